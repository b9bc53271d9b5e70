"""`conveyor serve --workers N`: N server processes on one port.

The parent binds the port (so that a port in use is said first) without listening on it,
then forks the workers. Each worker binds the port again with SO_REUSEPORT and listens: the
kernel spreads new connections over the workers' sockets. Workers share nothing but the
store; long polls are woken across them by the store's own mechanism (SQLite and MySQL
through the wake directory of their host, PostgreSQL by LISTEN/NOTIFY, Redis by its wake
channel). The parent restarts a worker that dies, forwards SIGTERM/SIGINT to every worker
(each finishes its requests in flight and ends its long polls) and exits once they have.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from types import FrameType

log = logging.getLogger("conveyor.server")

PR_SET_PDEATHSIG = 1
FAST_EXIT = 5.0  # a worker that dies sooner than this after its start failed to start


def supervise(workers: int, start: Callable[[int], None]) -> int:
    """Fork `workers` processes running `start(index)`; the exit status for the parent."""
    children: dict[int, tuple[int, float]] = {}  # pid -> (index, started at)
    stopping = False
    status = 0

    def spawn(index: int) -> None:
        pid = os.fork()
        if pid == 0:  # the worker
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            _end_with_parent()
            code = 0
            try:
                start(index)
            except BaseException:
                log.exception("worker %d failed", index)
                code = 1
            finally:
                logging.shutdown()
                os._exit(code)
        children[pid] = (index, time.monotonic())

    def stop(sig: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if not stopping:
            log.info("shutting down %d workers", len(children))
        stopping = True
        for pid in list(children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for index in range(workers):
            spawn(index)
        while children:
            try:
                pid, wait_status = os.wait()
            except ChildProcessError:
                break
            if pid not in children:
                continue
            index, started = children.pop(pid)
            code = os.waitstatus_to_exitcode(wait_status)
            if stopping:
                continue
            if time.monotonic() - started < FAST_EXIT:
                log.error("worker %d exited at once (status %d): stopping the server", index, code)
                status = 1
                stop(signal.SIGTERM, None)
                continue
            log.error("worker %d exited (status %d): starting it again", index, code)
            spawn(index)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return status


def _end_with_parent() -> None:
    """Linux: this process gets SIGTERM when its parent dies, however it dies (a killed
    supervisor leaves no workers behind)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
