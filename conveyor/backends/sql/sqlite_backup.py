"""Backing up and restoring the embedded store's file while it is in use.

A copy of the file made while servers write to it is not a backup: the copy can hold half a
transaction, and the write-ahead log beside the file holds commits the file does not have
yet. `backup` uses SQLite's online backup: one read transaction copies every page of one
moment of the database (writers go on meanwhile, into the write-ahead log), into a file
beside the destination that is checked and then renamed into place, so the destination is
only ever a whole backup. `restore` copies a backup into a store's file the same way, where
no process has the store open.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3

from ...exceptions import InvalidInput, StoreUnavailable

REQUIRED = ("queues", "dedup", "topics")  # tables every Conveyor SQLite store has


def backup(path: str, dest: str) -> int:
    """Copy the store at `path` to `dest` (which must not exist), consistently while it is
    in use; the bytes written."""
    if not os.path.exists(path):
        raise InvalidInput(f"there is no store at {path}: name the store's file with --store")
    if os.path.exists(dest):
        raise InvalidInput(f"{dest} exists: back up to a new file, or remove it first")
    partial = f"{dest}.partial"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(partial)
    try:
        source = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=60)
        try:
            target = sqlite3.connect(partial)
            try:
                source.backup(target)  # every page of one moment, in one step
                check(target, partial)
            finally:
                target.close()
        finally:
            source.close()
        os.replace(partial, dest)
    except sqlite3.Error as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
        raise StoreUnavailable(f"backing up {path} to {dest} failed: {exc}") from exc
    return os.path.getsize(dest)


def restore(source: str, path: str, *, replace: bool = False) -> int:
    """Copy the backup at `source` into the store's file at `path`; refused where `path`
    exists (unless `replace`) or where a process has the store open. The bytes written."""
    if not os.path.exists(source):
        raise InvalidInput(f"there is no backup at {source}")
    try:
        backup_db = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise InvalidInput(f"{source} cannot be read as a SQLite file: {exc}") from exc
    try:
        check(backup_db, source)
        if os.path.exists(path) and not replace:
            raise InvalidInput(
                f"{path} exists: restore into a new file, or give --replace to overwrite it"
                " (stop every server and worker using it first)"
            )
        target = sqlite3.connect(path, timeout=0.5, isolation_level=None)
        try:
            # leaving write-ahead logging needs the file to itself: a process that has the
            # store open, even idle, makes it fail (BEGIN EXCLUSIVE would not: in WAL mode it
            # keeps out other writers only)
            try:
                mode = target.execute("PRAGMA journal_mode=DELETE").fetchone()
            except sqlite3.OperationalError as exc:
                mode = (str(exc),)
            if mode is None or str(mode[0]).lower() != "delete":
                raise InvalidInput(
                    f"{path} is in use ({mode[0] if mode else 'locked'}): stop the servers and"
                    " workers using it, then restore"
                )
            backup_db.backup(target)
        finally:
            target.close()
    except sqlite3.Error as exc:
        raise StoreUnavailable(f"restoring {source} into {path} failed: {exc}") from exc
    finally:
        backup_db.close()
    for stale in (f"{path}-shm",):  # SQLite makes it afresh on the next open
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stale)
    return os.path.getsize(path)


def check(conn: sqlite3.Connection, name: str) -> None:
    """Refuse a file that is damaged or is not a Conveyor store."""
    try:
        ok = conn.execute("PRAGMA quick_check").fetchone()
        found = conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
    except sqlite3.DatabaseError as exc:
        raise InvalidInput(f"{name} is not a SQLite database ({exc})") from exc
    if ok is None or ok[0] != "ok":
        raise InvalidInput(f"{name} is damaged ({ok[0] if ok else 'no answer'})")
    tables = {row[0] for row in found}
    missing = [t for t in REQUIRED if t not in tables]
    if missing:
        raise InvalidInput(f"{name} is not a Conveyor store (it has no {', '.join(missing)})")
