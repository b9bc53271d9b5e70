"""Waiting in tests for what another thread or process does (never for time to pass: a
`ManualClock` drives that)."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any


def free_port() -> int:
    """A port of 127.0.0.1 free now (the kernel's choice). Another process may take it
    before the caller's server binds it: where a server can be handed a bound socket or
    told port 0, that is better."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def until(check: Callable[[], bool], timeout: float = 20, what: str = "condition") -> None:
    """Return once `check()` holds; fail if it still does not after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(0.01)


def wait_port(proc: subprocess.Popen[Any], *ports: int, timeout: float = 60) -> None:
    """Return once something listens on each of 127.0.0.1's `ports`; fail if `proc` exits
    first, or after `timeout` seconds in all."""

    def up() -> bool:
        assert proc.poll() is None, "the process exited"
        try:
            for port in ports:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    until(up, timeout=timeout, what=f"ports {', '.join(map(str, ports))}")
