"""Waiting in tests for what another thread or process does (never for time to pass: a
`ManualClock` drives that)."""

from __future__ import annotations

import time
from collections.abc import Callable


def until(check: Callable[[], bool], timeout: float = 20, what: str = "condition") -> None:
    """Return once `check()` holds; fail if it still does not after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(0.01)
