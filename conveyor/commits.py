"""What a store that commits on an event loop's own thread hands back (`Backend.inline`):
a future resolved once the commit is made and, where it must be, durable.

Its own module, so that what the synchronous callers import (the SDK, the command line)
does not import asyncio.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class CommitWait(asyncio.Future[None]):
    """What a store leaves in `Inline.durable`: a future it resolves once the call's commit
    is made and, where it must be, durable (or with the error that undid it).

    Nothing but the answer to a request follows it: a server may resume the request's
    coroutine from the future's callback rather than give the request a task of its own
    (a coroutine that waits again after it gets one then). A callback given to `settled`
    runs as the future is resolved, in the same turn of the loop as the commit, rather
    than at the loop's next turn as `add_done_callback`'s do."""

    __slots__ = ("_settled",)

    def __init__(self, *, loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(loop=loop)
        self._settled: list[Callable[[CommitWait], object]] = []

    def settled(self, fn: Callable[[CommitWait], object]) -> None:
        """Call `fn(self)` once resolved: at once if it is, else when it is."""
        if self.done():
            fn(self)
        else:
            self._settled.append(fn)

    def set_result(self, result: None) -> None:
        super().set_result(result)
        self._run_settled()

    def set_exception(self, exception: type | BaseException) -> None:
        super().set_exception(exception)
        self._run_settled()

    def _run_settled(self) -> None:
        callbacks, self._settled = self._settled, []
        for fn in callbacks:
            try:
                fn(self)
            except Exception as exc:  # as the loop reports a failed callback
                self.get_loop().call_exception_handler(
                    {"message": "CommitWait callback failed", "exception": exc, "future": self}
                )
