"""Helpers of the SQLite store's tests."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from conveyor import Client
from conveyor.backends.sql.sqlite_connections import SQLiteConnections
from conveyor.backends.sql.store import SQLStore


def rows_of(path: Path, sql: str) -> list[Any]:
    """A query's rows, read by a connection of the test's own."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def sqlite_db(client: Client) -> SQLiteConnections:
    """The SQLite file behind a client's store."""
    store = client.backend
    assert isinstance(store, SQLStore) and isinstance(store.db, SQLiteConnections)
    return store.db
