"""Time sources. Stores read time only from a clock, so tests drive it with `ManualClock`."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    def sleep(self, seconds: float) -> None:
        """Let `seconds` pass (a manual clock advances instead of blocking)."""
        ...

    @property
    def manual(self) -> bool:
        """True when time moves only by `advance`; waiting on such a clock never blocks."""
        ...


class SystemClock:
    """Wall-clock time."""

    manual = False

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class ManualClock:
    """A clock that moves only when told to: visibility, delay and retention tests run instantly.

    `sleep` advances the clock instead of blocking, so code that waits (long polls, back-off,
    redrive rates) runs at once and deterministically.
    """

    manual = True

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a clock cannot go back")
        with self._lock:
            self._now += seconds
            return self._now

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)

    def set(self, when: float) -> None:
        with self._lock:
            if when < self._now:
                raise ValueError("a clock cannot go back")
            self._now = when


SYSTEM_CLOCK = SystemClock()
