"""How the SQLite store writes messages: rowids in priority bands, ids it makes up that carry
their row, bare bodies by multi-row statements, de-duplication, and finding a row by id."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Sequence
from typing import Any

from ..ids import row_id, rowid_of
from ..models import NewMessage, QueueAttributes, SendResult, sent_result
from ..validation import DEDUP_WINDOW
from .base import bare_bodies, dedup_key
from .rows import encode_attributes
from .sqlite_conn import SQLiteConnections
from .sqlite_schema import BARE_ROWS, INSERT_COLUMNS, bare_insert, last_rowid


class SQLiteWrites(SQLiteConnections):
    """Mixed into `SQLiteBackend`: message writes inside a transaction the caller holds."""

    def _send_locked(
        self,
        conn: sqlite3.Connection,
        qid: int,
        attrs: QueueAttributes,
        messages: Sequence[NewMessage],
        now: float,
        hidden: float | None = None,
    ) -> list[SendResult]:
        """Insert messages (visible_at `hidden` instead of after their delay, if given)."""
        t = f"q{qid}"
        fifo = attrs.fifo
        if not fifo and bare_bodies(messages):
            return self._send_bare(conn, qid, t, messages, now, hidden)
        last: dict[int, int] = {}

        def next_row(priority: int) -> int:
            n = last.get(priority)
            n = (last_rowid(conn, t, priority) if n is None else n) + 1
            last[priority] = n
            return n

        def values(m: NewMessage, key: str | None) -> tuple[Any, ...]:
            priority = 0 if fifo else m.priority
            rowid = next_row(priority)
            generated = m.generated_id or not m.id
            return (
                rowid,
                row_id(rowid, random.getrandbits(59)) if generated else m.id,
                m.body,
                encode_attributes(m.attributes),
                m.group_id,
                key,
                priority,
                m.deadline,
                now,
                now + m.delay if hidden is None else hidden,
                int(m.compressed),
                0 if generated else 1,
            )

        insert = f"INSERT INTO {t} ({INSERT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        if not fifo and all(m.generated_id or not m.id for m in messages):
            # ids made here: nothing to de-duplicate
            rows = [values(m, None) for m in messages]
            conn.executemany(insert, rows)
            self._count(qid, sent=len(rows))
            return [sent_result(r[1]) for r in rows]
        results: list[SendResult] = []
        for m in messages:
            key = dedup_key(m, attrs.content_based_dedup) if fifo else None
            if key is not None:
                seen = conn.execute(
                    "SELECT message_id FROM dedup"
                    " WHERE queue_id = ? AND key = ? AND expires_at > ?",
                    (qid, key, now),
                ).fetchone()
                if seen is not None:
                    results.append(SendResult(id=seen[0], duplicate=True))
                    continue
            if m.id and not m.generated_id and self._find(conn, t, m.id) is not None:
                results.append(SendResult(id=m.id, duplicate=True))
                continue
            row = values(m, key)
            conn.execute(insert, row)
            if key is not None:
                conn.execute(
                    "INSERT OR REPLACE INTO dedup (queue_id, key, message_id, expires_at)"
                    " VALUES (?, ?, ?, ?)",
                    (qid, key, row[1], now + DEDUP_WINDOW),
                )
            results.append(SendResult(id=row[1], sequence=row[0] if fifo else None))
        self._count(qid, sent=sum(1 for r in results if not r.duplicate))
        return results

    def _send_bare(
        self,
        conn: sqlite3.Connection,
        qid: int,
        t: str,
        messages: Sequence[NewMessage],
        now: float,
        hidden: float | None,
    ) -> list[SendResult]:
        """Insert bodies that share everything else (see `bare_bodies`): consecutive rowids, one
        multi-row statement per BARE_ROWS, the shared values bound once."""
        first = messages[0]
        start = last_rowid(conn, t, first.priority) + 1
        rand = random.getrandbits
        ids = [row_id(start + k, rand(59)) for k in range(len(messages))]
        visible = now + first.delay if hidden is None else hidden
        for i in range(0, len(messages), BARE_ROWS):
            chunk = messages[i : i + BARE_ROWS]
            params: list[Any] = [first.priority, now, visible, start + i]
            for message_id, m in zip(ids[i : i + BARE_ROWS], chunk, strict=True):
                params += (message_id, m.body)
            conn.execute(bare_insert(t, len(chunk)), params)
        self._count(qid, sent=len(ids))
        return [sent_result(i) for i in ids]

    def _find(self, conn: sqlite3.Connection, t: str, message_id: str) -> int | None:
        """The rowid of a message by id: a primary-key lookup for ids this store made up,
        the partial index for the others."""
        rowid = rowid_of(message_id)
        if rowid is not None:
            row = conn.execute(
                f"SELECT rowid FROM {t} WHERE rowid = ? AND id = ?", (rowid, message_id)
            ).fetchone()
            if row is not None:
                return int(row[0])
        row = conn.execute(
            f"SELECT rowid FROM {t} WHERE indexed AND id = ?", (message_id,)
        ).fetchone()
        return None if row is None else int(row[0])
