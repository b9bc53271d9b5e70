"""The fsync helper of a SQLite store at durability=full: a process of its own that fsyncs
the store's write-ahead log when asked (`conveyor.backends.sql.sqlite_sync.FsyncProcess`
starts it as ``python -I -S fsyncd.py LOG``).

It reads requests, a byte each, from its standard input. For every read (all the requests
that arrived since the last) it syncs the log once (`sync_data`; the first time, its
directory too),
then writes a byte a request to its standard output: ``F`` for the first, ``+`` for each
other that fsync served; ``E`` and ``e`` where it failed (the error goes to its standard
error, and the log is opened afresh for the next fsync). It ends at the end of its input:
when the store closes it, or when the process that started it is gone, whatever signal the
rest of that process's group gets.

It runs `RAISED` nice levels above the process that started it, where the system lets it
(root, CAP_SYS_NICE, or an RLIMIT_NICE that allows it: systemd's ``LimitNICE=``), and at
that process's level otherwise. It wants almost no CPU, but each request is a send that
waits: on a loaded machine the scheduler otherwise lets it wait its turn behind the
server's own work before it may fsync (measured in docs/benchmarks-history.md, "The fsync
helper ten nice levels up").

It imports nothing but the standard library, and runs without site packages.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

ASK = b"?"
RAISED = 10  # nice levels above its server's, where allowed
DONE, ALSO_DONE = ord("F"), ord("+")
FAILED, ALSO_FAILED = ord("E"), ord("e")


def serve(path: str, requests: int = 0, replies: int = 1) -> None:
    """Answer the requests read from `requests` on `replies` until the end of the input."""
    fd: int | None = None
    try:
        while True:
            asked = len(os.read(requests, 65536))
            if not asked:
                return
            try:
                if fd is None:
                    fd = os.open(path, os.O_RDONLY)
                    sync_data(fd)
                    fsync_directory(path)  # the first time: as SQLite does for a new log
                else:
                    sync_data(fd)
                reply = bytes([DONE]) + bytes([ALSO_DONE]) * (asked - 1)
            except OSError as exc:
                print(f"conveyor: cannot fsync {path}: {exc}", file=sys.stderr, flush=True)
                if fd is not None:
                    os.close(fd)
                    fd = None
                reply = bytes([FAILED]) + bytes([ALSO_FAILED]) * (asked - 1)
            view = memoryview(reply)
            while view:
                view = view[os.write(replies, view) :]
    finally:
        if fd is not None:
            os.close(fd)


def sync_data(fd: int) -> None:
    """Write a file's data to the disk with the metadata needed to read it back (its
    size): the sync SQLite itself makes of its files where the system has ``fdatasync``
    (on Linux each sync of the log at ``synchronous=FULL`` is one), so that a commit here
    is exactly as durable as there. (On this project's test machine it costs what ``fsync``
    does: ``python -m bench.disk``, docs/benchmarks.md.)"""
    if HAS_FDATASYNC:
        os.fdatasync(fd)
    else:
        os.fsync(fd)


HAS_FDATASYNC = hasattr(os, "fdatasync")  # macOS has none


def fsync_directory(path: str) -> None:
    """fsync the directory that holds `path`, where it can be opened and fsynced: as
    SQLite's own, a failure here is no failure of the fsync of the file."""
    try:
        dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def main() -> None:
    # The server drains its requests on SIGINT and SIGTERM, and those need fsyncs: this
    # process ends with its input instead (a terminal's Ctrl-C reaches the whole group).
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)
    with contextlib.suppress(OSError):  # not allowed: its server's level
        os.nice(-RAISED)
    serve(sys.argv[1])


if __name__ == "__main__":
    main()
