"""Waiting in tests for what another thread or process does (never for time to pass: a
`ManualClock` drives that), and starting those processes with their output in a log."""

from __future__ import annotations

import random
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def port_free(port: int) -> bool:
    """Whether a server could bind 127.0.0.1's `port` now."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def ephemeral_floor() -> int:
    """The lowest port the kernel hands to outgoing connections and to servers that bind
    port 0."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def unix_socket_accepts(path: str | Path) -> bool:
    """Whether a server accepts connections on the Unix socket `path` now, probed with a
    socket closed either way: a client library's own connect may leave the socket of a
    failed connect open (httpcore's and PyMySQL's do), so servers still starting are
    probed with this before a client connects."""
    with socket.socket(socket.AF_UNIX) as probe:
        probe.settimeout(2)
        return probe.connect_ex(str(path)) == 0


def free_port() -> int:
    """A port of 127.0.0.1 free now, for a server started after: one picked at random
    below the ephemeral range, so that no connection's local port (of this test or of
    another running beside it) and no server that binds port 0 takes it before the server
    binds it. Where a server can be handed a bound socket or told port 0, that is better."""
    floor = ephemeral_floor()
    if floor > 12000:
        for _ in range(200):
            port = random.randint(10000, floor - 1)
            if port_free(port):
                return port
    with socket.socket() as s:  # no room below the range: the kernel's choice
        s.bind(("127.0.0.1", 0))
        chosen: int = s.getsockname()[1]
        return chosen


def logged(
    args: Sequence[str | Path], log: Path, *, append: bool = False, **kwargs: Any
) -> subprocess.Popen[bytes]:
    """`subprocess.Popen(args, **kwargs)` with its output written to `log` (its standard
    error too, unless `kwargs` give another `stderr`); the file is closed in this process
    once the new one holds it."""
    kwargs.setdefault("stderr", subprocess.STDOUT)
    with log.open("ab" if append else "wb") as out:
        return subprocess.Popen(args, stdout=out, **kwargs)


def logged_line(proc: subprocess.Popen[Any], log: Path, needle: str, timeout: float = 60) -> str:
    """The first line of `log` (written by `proc`, see `logged`) holding `needle`, once it is
    there; fail if `proc` exits first, or after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        text = log.read_text(errors="replace")
        for line in text.splitlines():
            if needle in line:
                return line
        if proc.poll() is not None:
            raise AssertionError(f"the process exited before logging {needle!r}:\n{text}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{needle!r} not logged within {timeout} s:\n{text}")
        time.sleep(0.02)


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
