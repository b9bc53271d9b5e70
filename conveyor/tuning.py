"""Process-wide tuning a program opts into; nothing here runs unless called.

`keep_heap` is applied by the SQLite store when its URL says ``keep_heap=true`` (and by
``conveyor serve --keep-heap``); see docs/stores.md for its measured effect.
`server_gc` is applied by ``conveyor serve`` and ``conveyor gateway``, which run their event
loop with `run` (uvloop's where it is installed).
"""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_lock = threading.Lock()
_kept = False


def keep_heap() -> bool:
    """Stop glibc from giving the top of the heap back to the kernel after every statement.

    SQLite allocates and frees a scratch page cache (about 90 KiB) for each statement that
    builds a temporary b-tree (RETURNING, IN lists). With glibc's default 128 KiB trim
    threshold, freeing it often shrinks the heap, and the next statement faults the pages
    back in, zero-filled. Keeping up to 64 MiB of freed heap (and serving blocks below
    32 MiB from it) removes that, at the price of a process holding on to up to 64 MiB it
    no longer uses. Once per process, on Linux with glibc only; True if it is in effect.
    """
    global _kept
    with _lock:
        if _kept:
            return True
        if not sys.platform.startswith("linux"):
            return False
        import ctypes  # (a few milliseconds of import, for this alone)

        try:
            mallopt = ctypes.CDLL(None).mallopt
        except (OSError, AttributeError):
            return False
        mallopt(_M_MMAP_THRESHOLD, 32 << 20)
        mallopt(_M_TRIM_THRESHOLD, 64 << 20)
        _kept = True
        return True


def server_gc() -> None:
    """Run Python's cyclic garbage collector less often: its youngest generation every
    50,000 allocations instead of every 700, and the older ones 20 times rarer each.

    A server allocates a few hundred objects a request and frees nearly all of them by
    reference counting; the collector's passes over what survives (on the memory store,
    every queued message) cost a server 15-20% of its CPU under load and made its p99
    latency (87 ms at 4,000 requests/s) (measured in docs/benchmarks.md). Cycles are
    still collected, later.
    """
    gc.set_threshold(50_000, 20, 20)


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop where it is installed (uvicorn's standard extra brings it; it costs a
    request a fraction of asyncio's own loop), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, None]) -> None:
    """Run `main` to its end on the event loop of `event_loop_factory`."""
    import asyncio  # (not at import: the CLI's start imports this module)

    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        runner.run(main)
