"""Work a store must do however its process ends: when the store is collected, when the
interpreter exits, and when a `multiprocessing` child ends (which skips `atexit`: its
children end by `os._exit` after their own finalizers)."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any


def at_end(
    owner: object,
    fn: Callable[..., object],
    *args: Any,
    forget: Callable[[], object] | None = None,
) -> None:
    """Call `fn(*args)` once `owner` is collected or the process ends, whichever is first
    (`fn` must be safe to call twice: both hooks may run). In a `multiprocessing` child
    forked with `owner`, the same at the child's end, after `forget()` dropped what the
    parent had not written yet (the parent writes that itself)."""
    import multiprocessing.util

    weakref.finalize(owner, fn, *args)
    multiprocessing.util.Finalize(owner, fn, args, exitpriority=10)

    def in_child(obj: object) -> None:
        if forget is not None:
            forget()
        multiprocessing.util.Finalize(obj, fn, args, exitpriority=10)

    multiprocessing.util.register_after_fork(owner, in_child)
