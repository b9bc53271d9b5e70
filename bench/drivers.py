"""What the benchmark drives: the Conveyor SDK on a store, or a plain-sqlite3 baseline.

Both do the same work with the same durability: send (one transaction per call), claim
ready messages (one transaction per receive), delete by handle (one transaction per call).
At full durability sends and deletes wait for the disk and claims do not, as in the store.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Sequence

from conveyor import Client, Queue

QUEUE = "bench"


class Driver(ABC):
    name: str

    @abstractmethod
    def setup(self) -> None:
        """Create an empty queue (called once, in the parent process)."""

    @abstractmethod
    def send(self, bodies: Sequence[bytes]) -> None: ...

    @abstractmethod
    def receive(self, n: int) -> list[tuple[object, bytes]]:
        """Claim up to n messages: (handle, body) pairs."""

    @abstractmethod
    def delete(self, handles: Sequence[object]) -> None: ...

    def close(self) -> None:  # noqa: B027 - optional
        pass


class ConveyorDriver(Driver):
    def __init__(self, name: str, url: str) -> None:
        self.name = name
        self.url = url
        self._client: Client | None = None
        self._queue: Queue | None = None

    @property
    def queue(self) -> Queue:
        """The queue handle, held as an application would (opened again after close)."""
        if self._queue is None:
            if self._client is None:
                self._client = Client(self.url)
            self._queue = self._client.queue(QUEUE)
        return self._queue

    def setup(self) -> None:
        client = Client(self.url)
        if QUEUE in client.list_queues():
            client.delete_queue(QUEUE)
        client.create_queue(QUEUE, visibility_timeout=300)
        self._client = client
        self._queue = None

    def send(self, bodies: Sequence[bytes]) -> None:
        q = self.queue
        if len(bodies) == 1:
            q.send(bodies[0])
        else:
            q.send_batch(bodies)

    def receive(self, n: int) -> list[tuple[object, bytes]]:
        return [(m.receipt, m.body) for m in self.queue.receive(n, wait=0)]

    def delete(self, handles: Sequence[object]) -> None:
        q = self.queue
        if len(handles) == 1:
            q.delete(handles[0])  # type: ignore[arg-type]
        else:
            q.delete_batch(handles)  # type: ignore[arg-type]

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
            self._queue = None


class SQLiteBaseline(Driver):
    """Hand-written sqlite3: INSERT; UPDATE ... RETURNING claim; DELETE. WAL, same sync."""

    def __init__(self, name: str, path: str, synchronous: str) -> None:
        self.name = name
        self.path = path
        self.synchronous = synchronous
        self._conn: sqlite3.Connection | None = None

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=60)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA busy_timeout = 60000")
            self._conn = conn
        return self._conn

    def setup(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(self.path + suffix):
                os.remove(self.path + suffix)
        self.conn.executescript(
            "CREATE TABLE messages (id INTEGER PRIMARY KEY, body BLOB NOT NULL,"
            " visible_at REAL NOT NULL, receipt TEXT);"
            "CREATE INDEX messages_ready ON messages (visible_at);"
        )

    def send(self, bodies: Sequence[bytes]) -> None:
        import time

        now = time.time()
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        c.executemany(
            "INSERT INTO messages (body, visible_at) VALUES (?, ?)", [(b, now) for b in bodies]
        )
        c.execute("COMMIT")

    def receive(self, n: int) -> list[tuple[object, bytes]]:
        import time

        now = time.time()
        receipt = secrets.token_hex(8)
        c = self.conn
        full = self.synchronous == "FULL"
        if full:  # as the store: a claim need not wait for the disk (a power cut redelivers)
            c.execute("PRAGMA synchronous = NORMAL")
        c.execute("BEGIN IMMEDIATE")
        rows = c.execute(
            "UPDATE messages SET visible_at = ?, receipt = ? WHERE id IN"
            " (SELECT id FROM messages WHERE visible_at <= ? ORDER BY id LIMIT ?)"
            " RETURNING id, body",
            (now + 300, receipt, now, n),
        ).fetchall()
        c.execute("COMMIT")
        if full:
            c.execute("PRAGMA synchronous = FULL")
        return [((r[0], receipt), r[1]) for r in rows]

    def delete(self, handles: Sequence[object]) -> None:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        c.executemany(
            "DELETE FROM messages WHERE id = ? AND receipt = ?",
            [h for h in handles],  # type: ignore[misc]
        )
        c.execute("COMMIT")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def drivers(workdir: str, only: set[str] | None = None) -> list[Driver]:
    all_drivers: list[Driver] = [
        ConveyorDriver("memory", "memory://bench"),
        ConveyorDriver("sqlite full", f"sqlite:///{workdir}/store-full.db?durability=full"),
        SQLiteBaseline("sqlite3 baseline full", f"{workdir}/base-full.db", "FULL"),
        ConveyorDriver("sqlite normal", f"sqlite:///{workdir}/store-normal.db?durability=normal"),
        SQLiteBaseline("sqlite3 baseline normal", f"{workdir}/base-normal.db", "NORMAL"),
    ]
    return [d for d in all_drivers if only is None or d.name in only]
