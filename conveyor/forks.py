"""What a process holds that a forked child must not use as its parent's.

A client made before a ``fork`` (a pre-forking server, a ``multiprocessing`` pool, a Celery
prefork worker) comes to the child with its parent's connections: the child writing to one
would interleave its requests with the parent's on the same socket, and each would read the
other's replies. An object registered here has its ``forked()`` called in the child as the
fork returns, when one thread runs there: it forgets the connections it holds (without
closing them, which would end the parent's sessions: each driver's connection, collected in
a process other than the one that opened it, closes only that process's copy of the socket)
and the locks a thread of the parent may have held at the fork, and makes new ones as it
needs them. The parent keeps what it had. Process-wide state (the wake hub, the random
bytes of receipts) is renewed the same way.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import Protocol

log = logging.getLogger(__name__)


class Forkable(Protocol):
    def forked(self) -> None:
        """In a forked child: forget the parent's connections, threads and locks."""


_held: weakref.WeakSet[Forkable] = weakref.WeakSet()


def renew_after_fork(obj: Forkable) -> None:
    """Call `obj.forked()` in every child forked from this process while `obj` lives."""
    _held.add(obj)


def renewed(event: threading.Event) -> threading.Event:
    """A new event set as `event` is (a parent's thread may have held its lock)."""
    fresh = threading.Event()
    if event.is_set():
        fresh.set()
    return fresh


def _in_child() -> None:
    for obj in list(_held):
        try:
            obj.forked()
        except Exception:  # logged: the fork itself goes on
            log.exception("renewing %r in a forked child", obj)


os.register_at_fork(after_in_child=_in_child)
