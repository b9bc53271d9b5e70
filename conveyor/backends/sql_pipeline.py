"""The PostgreSQL and MySQL stores' side of the pipeline operations (see pipeline.py).

A message's row key is its ``seq``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..ids import new_ids
from ..models import ArchivedMessage, Message, NewMessage, QueueAttributes
from .pipeline import PipelineStore
from .rows import row_to_archived
from .sql_conn import Cursor, in_list
from .sql_schema import ARCHIVE_COLUMNS, MESSAGE_COLUMNS, to_message

T = TypeVar("T")

MANY_ROWS = 1000


class _Exec:
    def __init__(self, cur: Cursor, arrays: bool = False) -> None:
        self.cur = cur
        self.arrays = arrays  # PostgreSQL: bulk rows travel as arrays

    def __call__(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self.cur.execute(sql, params)
        return list(self.cur.fetchall()) if self.cur.description else []

    def many(self, sql: str, rows: Sequence[Sequence[Any]], types: Sequence[str]) -> None:
        # one statement per MANY_ROWS rows: far fewer round trips than executemany; on
        # PostgreSQL one array per column (unnest), several times faster than VALUES lists
        if not rows:
            return
        marks = f"({in_list(rows[0])})"
        arrays = "SELECT * FROM unnest(" + ", ".join(f"%s::{t}[]" for t in types) + ")"
        for i in range(0, len(rows), MANY_ROWS):
            chunk = rows[i : i + MANY_ROWS]
            if self.arrays:
                self.cur.execute(
                    sql.replace(f"VALUES {marks}", arrays, 1),
                    [list(c) for c in zip(*chunk, strict=True)],
                )
            else:
                self.cur.execute(
                    sql.replace(marks, ", ".join([marks] * len(chunk)), 1),
                    [v for row in chunk for v in row],
                )

    def count(self, sql: str, params: Sequence[Any] = ()) -> int:
        self.cur.execute(sql, params)
        return int(self.cur.rowcount)


class SQLPipeline(PipelineStore):
    _pl_columns = MESSAGE_COLUMNS
    prefix: str

    @property
    def _pl_prefix(self) -> str:  # type: ignore[override]
        return self.prefix

    def _pl_run(self, fn: Callable[[Any], T], *, tx: bool = True) -> T:
        arrays = self.dialect.name == "postgresql"  # type: ignore[attr-defined]
        return self._run(lambda cur: fn(_Exec(cur, arrays)), tx=tx)  # type: ignore[attr-defined,no-any-return]

    def _pl_queue(self, ex: Any, queue: str) -> tuple[int, QueueAttributes]:
        return self._queue(ex.cur, queue)  # type: ignore[attr-defined,no-any-return]

    def _pl_messages(self, qid: int) -> tuple[str, str, str]:
        return f"{self.prefix}messages", "seq", f"queue_id = {int(qid)}"

    def _pl_message(self, queue: str, row: tuple[Any, ...]) -> Message:
        return to_message(queue, row)

    def _pl_archive(self) -> tuple[str, str, str]:
        return f"{self.prefix}archive", "queue_name", ARCHIVE_COLUMNS

    def _pl_archived(self, row: tuple[Any, ...]) -> ArchivedMessage:
        return row_to_archived((*row[:2], bytes(row[2]), *row[3:]))

    def _pl_insert_hidden(
        self, ex: Any, queue: str, qid: int, attrs: QueueAttributes,
        messages: Sequence[NewMessage], now: float, visible_at: float,
    ) -> tuple[list[int], list[str]]:  # fmt: skip
        mine = [m.generated_id or not m.id for m in messages]
        fresh = iter(new_ids(sum(mine)))
        ids = [next(fresh) if made else m.id for m, made in zip(messages, mine, strict=True)]
        rows = [
            (*row[:9], visible_at, row[10])
            for row in (
                self._row(qid, m, i, None, now, False)  # type: ignore[attr-defined]
                for m, i in zip(messages, ids, strict=True)
            )
        ]
        if all(mine):
            return self._insert_staged(ex.cur, queue, qid, rows), []
        inserted: set[str] = self._insert_many(ex.cur, queue, rows, False)  # type: ignore[attr-defined]
        keys = [k for k, _ in self._pl_find(ex, qid, sorted(inserted))] if inserted else []
        return keys, [i for i in ids if i not in inserted]

    def _insert_staged(
        self, cur: Cursor, queue: str, qid: int, rows: Sequence[tuple[Any, ...]]
    ) -> list[int]:
        """Insert rows whose ids this store made up (none can be present); their seqs."""
        self._insert_many(cur, queue, rows, True)  # type: ignore[attr-defined]
        return [k for k, _ in self._pl_find(_Exec(cur), qid, [r[2] for r in rows])]

    def _pl_find(self, ex: Any, qid: int, ids: Sequence[str]) -> list[tuple[int, float]]:
        found: list[tuple[int, float]] = []
        for i in range(0, len(ids), 1000):
            chunk = ids[i : i + 1000]
            found += [
                (int(r[0]), float(r[1]))
                for r in ex(
                    f"SELECT seq, visible_at FROM {self.prefix}messages"
                    f" WHERE id IN ({in_list(chunk)})"
                    " AND queue_id = %s",
                    (*chunk, qid),
                )
            ]
        return found

    def _pl_upsert(self, table: str, columns: str, key: str) -> str:
        return self.dialect.upsert_sql(table, columns, key)  # type: ignore[attr-defined,no-any-return]
