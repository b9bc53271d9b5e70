"""Small disks of a test's own: a tmpfs of a few megabytes mounted on a temporary directory,
for a throwaway database server (or its tablespace) that is to run out of room, then be
given more. Mounting takes root: tests skip elsewhere (`unavailable_reason`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


def unavailable_reason() -> str | None:
    """Why a small disk cannot be made here, or None."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return "root and mount(8) (to give a throwaway database server a small disk)"
    return None


@contextlib.contextmanager
def small_disk(megabytes: int, owner: str | None = None) -> Iterator[Path]:
    """A tmpfs of `megabytes` (owned by the user `owner`, if given), unmounted afterwards."""
    where = Path(tempfile.mkdtemp(prefix="conveyor-disk-"))
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(where)],
        check=True,
        capture_output=True,
    )
    try:
        if owner is not None:
            shutil.chown(where, owner, owner)
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)
        shutil.rmtree(where, ignore_errors=True)


def grow(disk: Path, megabytes: int) -> None:
    """A `small_disk` made `megabytes` large."""
    subprocess.run(
        ["mount", "-o", f"remount,size={megabytes}m", str(disk)], check=True, capture_output=True
    )
