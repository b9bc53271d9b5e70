"""docs/deploy.md's backups of the shared stores, with their databases' own tools, as the page
writes them: a store with messages ready, in flight, delayed, dead-lettered, FIFO and a topic
(tests/schema_fixtures.populate) is dumped, dropped and restored, and holds the same, the
receipt given before the backup still deleting its message."""

from __future__ import annotations

import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from conveyor import Client, ManualClock

from .conftest import STORES, unavailable
from .support import redisservers, sqlstores
from .support.schema_fixtures import WRITTEN_AT, check, populate
from .support.waiting import free_port

pytestmark = pytest.mark.slow


def run(command: list[str], **options: object) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, **options)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{command[0]}: {done.stderr}"
    out: str = done.stdout
    return out


def populated(url: str) -> dict[str, str]:
    with Client(url, clock=ManualClock(WRITTEN_AT)) as client:
        return populate(client)


def still_there(url: str, receipts: dict[str, str]) -> None:
    with Client(url, clock=ManualClock(WRITTEN_AT + 60)) as client:
        check(client, receipts)


def store_of(kind: str, tmp_path: Path) -> tuple[str, str]:
    """A fresh store URL on this machine's server of `kind`, and its table prefix."""
    url = STORES[kind](tmp_path)
    return url, url.split("prefix=", 1)[1]


def test_pg_dump_and_pg_restore(tmp_path: Path) -> None:
    url, prefix = store_of("postgres", tmp_path)
    dump = tmp_path / "conveyor.dump"
    try:
        receipts = populated(url)
        run(["pg_dump", "--format=custom", "--table", f"{prefix}*", "--file", str(dump),
             sqlstores.PG_URL])  # fmt: skip
        sqlstores.drop(url)
        with pytest.raises(AssertionError):
            still_there(url, receipts)  # gone: what follows is the restore's doing
        sqlstores.drop(url)
        run(["pg_restore", "--no-owner", "--dbname", sqlstores.PG_URL, str(dump)])
        still_there(url, receipts)
    finally:
        sqlstores.drop(url)


def test_mysqldump_single_transaction(tmp_path: Path) -> None:
    url, prefix = store_of("mysql", tmp_path)
    parts = urlsplit(sqlstores.MYSQL_URL)
    login = ["-h", parts.hostname or "127.0.0.1", "-P", str(parts.port or 3306),
             "-u", parts.username or "root"]  # fmt: skip
    database = parts.path.lstrip("/")
    try:
        receipts = populated(url)
        like = prefix.replace("_", "\\_") + "%"
        tables = run(["mysql", *login, "-N", "-e", f"SHOW TABLES LIKE '{like}'", database]).split()
        assert len(tables) >= 3, tables
        dumped = run(["mysqldump", *login, "--single-transaction", database, *tables])
        sqlstores.drop(url)
        run(["mysql", *login, database], input=dumped)
        still_there(url, receipts)
    finally:
        sqlstores.drop(url)


def test_a_redis_snapshot_restored_into_a_new_server(tmp_path: Path) -> None:
    why = redisservers.available()
    if why is not None:
        unavailable(why)
    first = redisservers.RedisServer(tmp_path / "data", free_port())
    first.start()
    try:
        url = f"{first.url}?prefix=conveyor"
        receipts = populated(url)
        run(["redis-cli", "-p", str(first.port), "SAVE"])
    finally:
        first.kill()
    assert (tmp_path / "data" / "dump.rdb").exists()
    second = redisservers.RedisServer(tmp_path / "data", free_port())  # loads dump.rdb
    second.start()
    try:
        still_there(f"{second.url}?prefix=conveyor", receipts)
    finally:
        second.kill()
