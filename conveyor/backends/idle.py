"""Writing what a store counts in memory once its process goes idle.

The stores that count running totals in memory (the SQL stores, DynamoDB) write them from
the calls that count them, at most once a second. A process that stops calling would keep
its last second's counts from every other process until it called again or exited; a
`WhenIdle` writes them from a thread once they are due and the process has made no call for
`IDLE` seconds. A busy process still writes them in its own calls, so the timer adds no
writes beside them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..forks import renew_after_fork

log = logging.getLogger(__name__)

IDLE = 0.25
"""Seconds without a count after which counts held are written from a thread."""

LAST_WAIT = 5.0
"""Seconds a store's last write (at close, at exit) waits for writes of counts under way in
other threads to end."""


class Writing:
    """Writes of counts taken from memory that have not ended yet. A write from a thread (the
    idle timer's, a count stored in the background) takes the counts it writes before it has
    written them; a process ending meanwhile would find nothing left to write and lose them
    with the thread. A store's last write waits for those under way (`settle`), and takes
    what a write that failed gave back."""

    def __init__(self) -> None:
        self._under_way = 0
        self._ended = threading.Condition()
        renew_after_fork(self)

    def forked(self) -> None:
        """A forked child: its parent's threads, and their writes, did not come with it."""
        self._under_way, self._ended = 0, threading.Condition()

    def begin(self) -> None:
        """A write of counts begins: call before taking them, and `end()` once it ended
        (written, or the counts given back)."""
        with self._ended:
            self._under_way += 1

    def end(self) -> None:
        with self._ended:
            self._under_way -= 1
            if not self._under_way:
                self._ended.notify_all()

    def settle(self, timeout: float = LAST_WAIT) -> bool:
        """Wait until no write of counts is under way (at most `timeout` seconds: a write
        that waits on its database must not hold a process's exit for long); whether none
        is."""
        with self._ended:
            return self._ended.wait_for(lambda: not self._under_way, timeout)


class WhenIdle:
    """Calls `write()` from a timer thread once `wait()` (seconds until the counts held are
    due; None: nothing held) has passed and no `counted()` came for `IDLE` seconds, and again
    while counts remain (counted meanwhile, or a write that failed)."""

    def __init__(self, write: Callable[[], object], wait: Callable[[], float | None]) -> None:
        self._write = write
        self._wait = wait
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None  # armed, or firing
        self._cancelled = False
        self._active = 0.0  # time.monotonic() of the last count
        renew_after_fork(self)

    def forked(self) -> None:
        """A forked child: its parent's timer did not come with it, and the parent's
        thread may have held the lock."""
        self._lock, self._timer = threading.Lock(), None

    def counted(self) -> None:
        """A call counted something: the timer is armed, if it is not (every operation
        counts, so this asks no more than an attribute where it is)."""
        self._active = time.monotonic()
        if self._timer is None:
            with self._lock:
                if self._timer is None:
                    self._arm()

    def cancel(self) -> None:
        """No more writes from the timer (the store is closing)."""
        with self._lock:
            timer, self._timer, self._cancelled = self._timer, None, True
        if timer is not None:
            timer.cancel()

    def _arm(self) -> None:
        """Start the timer where counts are held (the lock held)."""
        wait = None if self._cancelled else self._wait()
        if wait is None:
            return
        idle = time.monotonic() - self._active
        timer = self._timer = threading.Timer(max(wait, IDLE - idle), self._fire)
        timer.daemon = True
        timer.start()

    def _fire(self) -> None:
        with self._lock:
            self._timer = None  # a count from now on arms it afresh
        if time.monotonic() - self._active >= IDLE:  # else the process's own calls write
            try:
                self._write()
            except Exception as exc:  # a store closed meanwhile: its close wrote them
                log.debug("writing the counts held: %s", exc)
        with self._lock:
            if self._timer is None:  # where counts remain, and no count armed it
                self._arm()
