"""In-memory store: the reference behaviour of the queue contract.

URL: ``memory://`` (``memory://NAME`` gives a named store shared by every client of this
process that uses the same name). Implements the core, editing, topics and consumers with
every feature but sharing across processes; no pipeline. Everything lives in dicts under
one lock; standard queues keep their ready messages in delivery order and their invisible
ones in the order they become visible (run-heaps: O(1) a message when they come in that
order, as sends and one visibility timeout make them, O(log n) otherwise), whatever the
depth.
FIFO queues walk their messages in send order.
"""

from __future__ import annotations

from .store import MemoryBackend

from_url = MemoryBackend.from_url

__all__ = ["MemoryBackend", "from_url"]
