"""The PostgreSQL and MySQL stores' side of the pipeline operations (see pipeline.py).

A message's row key is its ``seq``; staged rows refer to messages by id (the unique index
``(id, queue_id)`` finds them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..ids import new_id
from ..models import ArchivedMessage, Message, NewMessage, QueueAttributes
from .pipeline import HIDDEN, PipelineStore
from .rows import row_to_archived
from .sql_conn import Cursor
from .sql_schema import ARCHIVE_COLUMNS, MESSAGE_COLUMNS, to_message

T = TypeVar("T")


class _Exec:
    def __init__(self, cur: Cursor) -> None:
        self.cur = cur

    def __call__(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self.cur.execute(sql, params)
        return list(self.cur.fetchall()) if self.cur.description else []

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.cur.executemany(sql, rows)


class SQLPipeline(PipelineStore):
    _pl_columns = MESSAGE_COLUMNS
    _pl_mkey = "id"
    prefix: str

    @property
    def _pl_prefix(self) -> str:  # type: ignore[override]
        return self.prefix

    def _pl_run(self, fn: Callable[[Any], T], *, tx: bool = True) -> T:
        return self._run(lambda cur: fn(_Exec(cur)), tx=tx)  # type: ignore[attr-defined,no-any-return]

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
        messages: Sequence[NewMessage], now: float,
    ) -> tuple[list[Any], list[str]]:  # fmt: skip
        ids = [new_id() if m.generated_id or not m.id else m.id for m in messages]
        rows = [
            self._row(qid, dataclasses.replace(m, delay=HIDDEN), i, None, now, False)  # type: ignore[attr-defined]
            for m, i in zip(messages, ids, strict=True)
        ]
        generated = all(m.generated_id or not m.id for m in messages)
        inserted: set[str] = self._insert_many(ex.cur, queue, rows, generated)  # type: ignore[attr-defined]
        keys: list[Any] = []
        present: list[str] = []
        for i in ids:
            if i in inserted:
                keys.append(i)
                inserted.discard(i)
            else:
                present.append(i)
        return keys, present

    def _pl_keys_of(self, ex: Any, qid: int, ids: Sequence[str]) -> list[Any]:
        return list(ids)

    def _pl_upsert(self, table: str, columns: str, key: str) -> str:
        return self.dialect.upsert_sql(table, columns, key)  # type: ignore[attr-defined,no-any-return]
