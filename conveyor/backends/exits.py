"""Work a store must do however its process ends: when the store is collected, when the
interpreter exits, and when a `multiprocessing` child ends (which skips `atexit`: its
children end by `os._exit` after their own finalizers)."""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from typing import Any

from ..forks import renew_after_fork


def at_end(
    owner: object,
    fn: Callable[..., object],
    *args: Any,
    forget: Callable[[], object] | None = None,
) -> None:
    """Call `fn(*args)` once `owner` is collected or the process ends, whichever is first
    (`fn` must be safe to call twice: both hooks may run). In a child forked with `owner`,
    `forget()` first drops what the parent had not written yet (the parent writes that
    itself), and the same happens at the child's end, a `multiprocessing` child's too.

    `multiprocessing` is not imported for this (a command line's start would pay for it):
    a process that has not imported it is no `multiprocessing` child, and one that imports
    it later has it when it forks one."""
    end = _End(owner, fn, args, forget)
    weakref.finalize(owner, end.run)  # (which keeps `end` as long as `owner` lives)
    renew_after_fork(end)
    if "multiprocessing.util" in sys.modules:  # this may be a multiprocessing child
        end.at_child_end(owner)


class _End:
    """What `at_end` does, and redoes in a forked child."""

    def __init__(
        self,
        owner: object,
        fn: Callable[..., object],
        args: tuple[Any, ...],
        forget: Callable[[], object] | None,
    ) -> None:
        self.owner = weakref.ref(owner)
        self.fn = fn
        self.args = args
        self.forget = forget

    def run(self) -> None:
        self.fn(*self.args)

    def forked(self) -> None:
        """In a forked child (forks.py), as the fork returns: the parent's part forgotten.
        A `multiprocessing` child clears the finalizers it inherited after this, then runs
        the hooks registered with it: the child's end is registered from there."""
        owner = self.owner()
        if owner is None:
            return
        if self.forget is not None:
            self.forget()
        util = sys.modules.get("multiprocessing.util")
        if util is not None:
            util.register_after_fork(owner, self.at_child_end)

    def at_child_end(self, owner: object) -> None:
        import multiprocessing.util

        multiprocessing.util.Finalize(owner, self.run, exitpriority=10)
