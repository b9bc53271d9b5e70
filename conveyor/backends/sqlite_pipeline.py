"""The SQLite store's side of the pipeline operations (see pipeline.py).

A message's row key is its rowid in the queue's table.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..exceptions import ConveyorError, StoreUnavailable
from ..ids import rowid_of
from ..models import ArchivedMessage, Message, NewMessage, QueueAttributes, SendResult
from .pipeline import PipelineStore, lease_insert
from .rows import row_to_archived, row_to_message
from .sql_schema import POSTGRES
from .sqlite_schema import MESSAGE_COLUMNS, archive_insert

T = TypeVar("T")

ARCHIVE_COLUMNS = (
    "queue, id, body, attributes, group_id, priority, sent_at, first_received_at, removed_at,"
    " receive_count, outcome, compressed"
)


class _Exec:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __call__(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql.replace("%s", "?"), params).fetchall()

    def many(self, sql: str, rows: Sequence[Sequence[Any]], types: Sequence[str]) -> None:
        self.conn.executemany(sql.replace("%s", "?"), rows)

    def count(self, sql: str, params: Sequence[Any] = ()) -> int:
        return int(self.conn.execute(sql.replace("%s", "?"), params).rowcount)


class SQLitePipeline(PipelineStore):
    _pl_columns = MESSAGE_COLUMNS
    path: str

    def _pl_run(self, fn: Callable[[Any], T], *, tx: bool = True) -> T:
        if tx:
            with self._tx() as conn:  # type: ignore[attr-defined]
                return fn(_Exec(conn))
        try:
            return fn(_Exec(self._conn()))  # type: ignore[attr-defined]
        except ConveyorError:
            raise
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"SQLite store {self.path} failed: {exc}") from exc

    def _pl_queue(self, ex: Any, queue: str) -> tuple[int, QueueAttributes]:
        qid, attrs = self._queue(ex.conn, queue)  # type: ignore[attr-defined]
        return int(qid), attrs

    def _pl_messages(self, qid: int) -> tuple[str, str, str]:
        return f"q{int(qid)}", "rowid", "1 = 1"

    def _pl_message(self, queue: str, row: tuple[Any, ...]) -> Message:
        return row_to_message(queue, row)

    def _pl_archive(self) -> tuple[str, str, str]:
        return "archive", "queue", ARCHIVE_COLUMNS

    def _pl_archived(self, row: tuple[Any, ...]) -> ArchivedMessage:
        return row_to_archived(row)

    def _pl_insert_hidden(
        self, ex: Any, queue: str, qid: int, attrs: QueueAttributes,
        messages: Sequence[NewMessage], now: float, visible_at: float,
    ) -> tuple[list[int], list[str]]:  # fmt: skip
        results: list[SendResult] = self._send_locked(  # type: ignore[attr-defined]
            ex.conn, qid, attrs, messages, now, visible_at
        )
        keys: list[int] = []
        present: list[str] = []
        t = f"q{int(qid)}"
        self._count(qid, sent=-sum(1 for r in results if not r.duplicate))  # type: ignore[attr-defined]
        for m, r in zip(messages, results, strict=True):
            if r.duplicate:
                present.append(r.id)
                continue
            row = rowid_of(r.id) if m.generated_id or not m.id else None
            keys.append(row if row is not None else self._find(ex.conn, t, r.id))  # type: ignore[attr-defined]
        return keys, present

    def _pl_find(self, ex: Any, qid: int, ids: Sequence[str]) -> list[tuple[int, float]]:
        t = f"q{int(qid)}"
        found: list[tuple[int, float]] = []
        for i in ids:
            row = self._find(ex.conn, t, i)  # type: ignore[attr-defined]
            if row is not None:
                (visible_at,) = ex.conn.execute(
                    f"SELECT visible_at FROM {t} WHERE rowid = ?", (row,)
                ).fetchone()
                found.append((int(row), float(visible_at)))
        return found

    def _pl_upsert(self, table: str, columns: str, key: str) -> str:
        return POSTGRES.upsert_sql(table, columns, key)

    def _lease_chunk(
        self, queue: str, stream: str, lease: int, max_messages: int, visibility_timeout: float
    ) -> int:
        # a receive that returns row keys alone (no bodies copied, no messages built); its
        # claims are recorded straight from the table: the claimed rows are the ones in
        # their key range that hold the claim's token
        rows, token = self._fresh_on_drop(  # type: ignore[attr-defined]
            queue,
            lambda: self._claim_rows(queue, max_messages, visibility_timeout, "rowid"),  # type: ignore[attr-defined]
        )
        if not rows:
            return 0
        keys = [r[0] for r in rows]

        def record(ex: Any) -> None:
            qid, _ = self._pl_queue(ex, queue)
            ex(
                lease_insert(
                    "",
                    f"SELECT %s, %s, %s, rowid, id, token FROM q{qid}"
                    " WHERE rowid BETWEEN %s AND %s AND token = %s",
                ),
                (qid, stream, lease, min(keys), max(keys), token),
            )

        self._pl_run(record)
        return len(rows)

    def _delete_leased(self, queue: str, stream: str, upto: int) -> int:
        # one statement: the rows leases <= upto hold, where they still hold the claim
        now = self.clock.now()

        def run(ex: Any) -> tuple[int, int]:
            qid, attrs = self._pl_queue(ex, queue)
            t = f"q{qid}"
            where = (
                "WHERE (rowid, token) IN (SELECT row_key, token FROM leases"
                " WHERE queue_id = ? AND stream = ? AND lease <= ?)"
            )
            if attrs.archive:
                ex.conn.execute(
                    f"{archive_insert(t)} {where}", (queue, now, "deleted", qid, stream, upto)
                )
            deleted = ex.conn.execute(f"DELETE FROM {t} {where}", (qid, stream, upto)).rowcount
            return qid, int(deleted)

        qid, deleted = self._pl_run(run)
        if deleted:
            self._count(qid, deleted=deleted)  # type: ignore[attr-defined]
        return deleted
