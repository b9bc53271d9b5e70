"""Embedded SQLite store: the default.

URL: ``sqlite:///relative/or/absolute/path.db`` (``sqlite:////abs/path.db`` for an absolute
path). Options: ``durability=full`` (default: an acknowledged send survives a power cut;
``synchronous=FULL``) or ``durability=normal`` (survives a process crash; ``synchronous=NORMAL``),
``busy_timeout`` in seconds (default 60).

One file holds every queue, in WAL mode. Any number of threads and processes on one host may
share it: every change runs inside ``BEGIN IMMEDIATE``, so claims are atomic. Each queue has
a table of its own whose rowid is the delivery order (priority band, then sequence), so a
receive walks the table from its head and its cost does not grow with queue depth; a unique
index on the message id serves duplicates, receipts and lookups. The schema is versioned
(``PRAGMA user_version``) and migrated on first use. Supports every capability.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from ..clock import SYSTEM_CLOCK, Clock
from ..exceptions import (
    ConveyorError,
    InvalidInput,
    QueueDoesNotExist,
    QueueExists,
)
from ..models import (
    FAR_FUTURE,
    Delivery,
    Message,
    NewMessage,
    QueueAttributes,
    QueueInfo,
    QueueStats,
    SendResult,
)
from .base import (
    Backend,
    claim_receipts,
    group_receipts,
    parse_receipt,
    receipt_results,
    refill_tokens,
    stale_receipt,
)
from .rows import row_to_message
from .sqlite_admin import SQLiteAdmin
from .sqlite_conn import _Dropped, _write_counts
from .sqlite_pipeline import SQLitePipeline, _Exec
from .sqlite_schema import (
    MESSAGE_COLUMNS,
    archive_insert,
    queue_ddl,
)
from .totals import RunningTotals


class _NotAllHeld(ConveyorError):
    """Some rows a delete named are no longer held by the receipt's claim."""


class _MustBeDurable(ConveyorError):
    """The queue turned out to be at-most-once: claim again in a durable transaction."""


class SQLiteBackend(SQLitePipeline, SQLiteAdmin, Backend):
    scheme = "sqlite"

    def __init__(
        self,
        path: str = "conveyor.db",
        *,
        durability: str = "full",
        busy_timeout: float = 60.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(clock=clock)
        if durability not in ("full", "normal"):
            raise InvalidInput(f"durability must be 'full' or 'normal', got {durability!r}")
        self.path = path if path == ":memory:" else os.path.abspath(path)
        self.durability = durability
        self._busy_ms = int(busy_timeout * 1000)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._migrated = False
        self._attrs: dict[str, QueueAttributes] = {}
        self._swept: dict[int, float] = {}
        self._rows: dict[str, tuple[int, QueueAttributes, float]] = {}
        self._idle: set[str] = set()
        self._totals = RunningTotals()
        weakref.finalize(self, _write_counts, self.path, self._totals)

    @classmethod
    def from_url(cls, rest: str, params: dict[str, str], *, clock: Clock) -> SQLiteBackend:
        path = rest[1:] if rest.startswith("/") else rest
        if not path:
            raise InvalidInput("sqlite URL needs a file: sqlite:///path/to/conveyor.db")
        return cls(
            path,
            durability=params.get("durability", "full"),
            busy_timeout=float(params.get("busy_timeout", 60)),
            clock=clock,
        )

    @property
    def key(self) -> str:
        return f"sqlite:{self.path}"

    # -- queue rows -----------------------------------------------------------------------

    def _info(self, row: tuple[Any, ...]) -> QueueInfo:
        return QueueInfo(
            name=row[0], attributes=self._attributes(row[1]), created_at=row[2], updated_at=row[3]
        )

    def create_queue(self, name: str, attributes: QueueAttributes) -> tuple[QueueInfo, bool]:
        now = self.clock.now()
        with self._tx() as conn:
            row = conn.execute(
                "SELECT name, attrs, created_at, updated_at FROM queues WHERE name = ?", (name,)
            ).fetchone()
            if row is not None:
                info = self._info(row)
                if info.attributes != attributes:
                    raise QueueExists(
                        f"queue {name!r} exists with different attributes: use set_attributes"
                        " to change them"
                    )
                return info, False
            cur = conn.execute(
                "INSERT INTO queues (name, attrs, created_at, updated_at, tokens, tokens_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (name, attributes.to_json(), now, now, attributes.rate_limit or 0, now),
            )
            for statement in queue_ddl(int(cur.lastrowid or 0)):
                conn.execute(statement)
        self._rows.pop(name, None)
        return QueueInfo(name=name, attributes=attributes, created_at=now, updated_at=now), True

    def delete_queue(self, name: str) -> None:
        with self._tx() as conn:
            qid, _ = self._queue(conn, name)
            conn.execute(f"DROP TABLE q{qid}")
            conn.execute("DELETE FROM dedup WHERE queue_id = ?", (qid,))
            conn.execute("DELETE FROM subscriptions WHERE queue_id = ?", (qid,))
            conn.execute("DELETE FROM queues WHERE id = ?", (qid,))
            self._pl_forget(_Exec(conn), qid)
        self._rows.pop(name, None)
        self._totals.forget(qid)

    def list_queues(self, prefix: str = "") -> list[str]:
        rows = self._read("SELECT name FROM queues ORDER BY name")
        return [r[0] for r in rows if r[0].startswith(prefix)]

    def get_queue(self, name: str) -> QueueInfo:
        rows = self._read(
            "SELECT name, attrs, created_at, updated_at FROM queues WHERE name = ?", (name,)
        )
        if not rows:
            raise QueueDoesNotExist(f"queue {name!r} does not exist: create it first")
        return self._info(rows[0])

    def set_queue_attributes(self, name: str, attributes: QueueAttributes) -> QueueInfo:
        now = self.clock.now()
        with self._tx() as conn:
            self._queue(conn, name)
            conn.execute(
                "UPDATE queues SET attrs = ?, updated_at = ? WHERE name = ?",
                (attributes.to_json(), now, name),
            )
            row = conn.execute(
                "SELECT name, attrs, created_at, updated_at FROM queues WHERE name = ?", (name,)
            ).fetchone()
        self._rows.pop(name, None)
        return self._info(row)

    def purge_queue(self, name: str) -> int:
        with self._tx() as conn:
            qid, _ = self._queue(conn, name)
            return conn.execute(f"DELETE FROM q{qid}").rowcount

    def _sweep(
        self,
        conn: sqlite3.Connection,
        qid: int,
        name: str,
        attrs: QueueAttributes,
        now: float,
        force: bool = False,
    ) -> None:
        """Remove messages past retention or deadline; forget old dedup ids.

        Receives never deliver such messages (they filter on both), so this only reclaims
        space and counts them: once a minute per queue, and before stats.
        """
        if not force and now - self._swept.get(qid, -1e18) < 60.0:
            return
        self._swept[qid] = now
        t = f"q{qid}"
        cond = "sent_at < ? OR deadline <= ?"
        params = (now - attrs.retention, now)
        if attrs.archive:
            conn.execute(f"{archive_insert(t)} WHERE {cond}", (name, now, "expired", *params))
        n = conn.execute(f"DELETE FROM {t} WHERE {cond}", params).rowcount
        if n:
            conn.execute("UPDATE queues SET expired = expired + ? WHERE id = ?", (n, qid))
        conn.execute("DELETE FROM dedup WHERE queue_id = ? AND expires_at <= ?", (qid, now))

    def queue_stats(self, name: str) -> QueueStats:
        now = self.clock.now()
        with self._tx() as conn:
            qid, attrs = self._queue(conn, name)
            self._sweep(conn, qid, name, attrs, now, force=True)
            self._flush_counters(conn)
            ready, delayed, in_flight, oldest = conn.execute(
                "SELECT coalesce(sum(visible_at <= ?1), 0),"
                " coalesce(sum(visible_at > ?1 AND receive_count = 0), 0),"
                " coalesce(sum(visible_at > ?1 AND receive_count > 0), 0), min(sent_at)"
                f" FROM q{qid}",
                (now,),
            ).fetchone()
            sent, received, deleted, dead, expired = conn.execute(
                "SELECT sent, received, deleted, dead, expired FROM queues WHERE id = ?", (qid,)
            ).fetchone()
        return QueueStats(
            queue=name,
            ready=ready,
            delayed=delayed,
            in_flight=in_flight,
            dead=dead,
            expired=expired,
            oldest_age=None if oldest is None else max(0.0, now - oldest),
            sent=sent,
            received=received,
            deleted=deleted,
        )

    # -- messages -------------------------------------------------------------------------

    def send(self, queue: str, messages: Sequence[NewMessage]) -> list[SendResult]:
        results = self._fresh_on_drop(queue, lambda: self._send(queue, messages))
        self.notify(queue)
        return results

    def _send(self, queue: str, messages: Sequence[NewMessage]) -> list[SendResult]:
        now = self.clock.now()
        with self._tx() as conn:
            qid, attrs = self._recent_queue(conn, queue, now)
            return self._send_locked(conn, qid, attrs, messages, now)

    def receive(self, queue: str, max_messages: int, visibility_timeout: float) -> list[Message]:
        rows, token = self._fresh_on_drop(
            queue, lambda: self._claim_rows(queue, max_messages, visibility_timeout)
        )
        rows.sort()  # by rowid: RETURNING gives no order (rowids are unique)
        receipts = claim_receipts(queue, token, rows)
        return [row_to_message(queue, r, h) for r, h in zip(rows, receipts, strict=True)]

    def _claim_rows(
        self,
        queue: str,
        max_messages: int,
        visibility_timeout: float,
        columns: str = MESSAGE_COLUMNS,
    ) -> tuple[list[Any], str]:
        """Receive: claim up to `max_messages` under a new token; the claimed rows' `columns`
        (rowid and id first) and the token.

        A claim of an at-least-once queue need not wait for the disk: a power cut that undid
        it would make its messages visible again as they were, as if their receiver had died.
        At-most-once claims are durable (their messages must never come back).
        """
        hit = self._rows.get(queue)
        durable = hit is None or hit[1].delivery is Delivery.AT_MOST_ONCE
        try:
            return self._claim(queue, max_messages, visibility_timeout, columns, durable)
        except _MustBeDurable:
            return self._claim(queue, max_messages, visibility_timeout, columns, True)

    def _claim(
        self,
        queue: str,
        max_messages: int,
        visibility_timeout: float,
        columns: str,
        durable: bool,
    ) -> tuple[list[Any], str]:
        now = self.clock.now()
        token = secrets.token_hex(8)
        if queue in self._idle and not self._maybe_ready(queue, now):
            return [], token
        with self._tx(durable) as conn:
            qid, attrs = self._recent_queue(conn, queue, now)
            if not durable and attrs.delivery is Delivery.AT_MOST_ONCE:
                raise _MustBeDurable(queue)  # it changed since the row was last read
            t = f"q{qid}"
            self._sweep(conn, qid, queue, attrs, now)
            limit = max_messages
            if attrs.rate_limit:
                bucket = conn.execute(
                    "SELECT tokens, tokens_at FROM queues WHERE id = ?", (qid,)
                ).fetchone()
                if bucket is None:
                    raise _Dropped(queue)
                tokens, tokens_at = bucket
                tokens = refill_tokens(tokens, tokens_at, attrs.rate_limit, now)
                limit = min(limit, int(tokens))
            if attrs.delivery is Delivery.AT_MOST_ONCE:
                visible_at = FAR_FUTURE
            else:
                visible_at = now + visibility_timeout
            claim = (
                f"UPDATE {t} SET visible_at = ?, receive_count = receive_count + 1,"
                " first_received_at = coalesce(first_received_at, ?), version = version + 1,"
                " token = ? WHERE rowid IN"
            )
            if limit <= 0:
                rows = []
            elif attrs.fifo or attrs.dead_letter is not None:
                picked = self._pick(conn, qid, queue, attrs, limit, now)
                rows = (
                    conn.execute(
                        f"{claim} ({','.join('?' * len(picked))}) RETURNING {columns}",
                        (visible_at, now, token, *picked),
                    ).fetchall()
                    if picked
                    else []
                )
            else:
                rows = conn.execute(
                    f"{claim} (SELECT rowid FROM {t} WHERE visible_at <= ? AND sent_at >= ?"
                    " AND (deadline IS NULL OR deadline > ?) ORDER BY rowid LIMIT ?)"
                    f" RETURNING {columns}",
                    (visible_at, now, token, now, now - attrs.retention, now, limit),
                ).fetchall()
            if rows:
                self._count(qid, received=len(rows))
                self._idle.discard(queue)
            else:
                self._idle.add(queue)
            if attrs.rate_limit:
                conn.execute(
                    "UPDATE queues SET tokens = ?, tokens_at = ? WHERE id = ?",
                    (tokens - len(rows), now, qid),
                )
        return rows, token

    def _maybe_ready(self, queue: str, now: float) -> bool:
        """Whether a receive could find anything, read without taking the write lock.

        Receivers polling an idle queue (its last receive here found nothing) would
        otherwise hold the lock that senders need. Only a definite "nothing is visible"
        answers False; any doubt (an unknown queue, a dropped table, a failed read) goes on
        to the locked, authoritative receive.
        """
        hit = self._rows.get(queue)
        if hit is None:
            return True
        try:
            row = (
                self._conn()
                .execute(f"SELECT 1 FROM q{hit[0]} WHERE visible_at <= ? LIMIT 1", (now,))
                .fetchone()
            )
        except sqlite3.Error:
            self._rows.pop(queue, None)
            return True
        return row is not None

    def _pick(
        self,
        conn: sqlite3.Connection,
        qid: int,
        queue: str,
        attrs: QueueAttributes,
        limit: int,
        now: float,
    ) -> list[int]:
        """Choose what to claim on FIFO queues and queues with a dead-letter policy.

        Expires messages past their retention or deadline and moves those at the max
        receive count to the dead-letter queue on the way. FIFO queues walk in send order,
        skipping every group whose earliest message is not visible.
        """
        policy = attrs.dead_letter
        dlq_id: int | None = None
        if policy is not None:
            row = conn.execute("SELECT id FROM queues WHERE name = ?", (policy.queue,)).fetchone()
            dlq_id = row[0] if row else None
        visible = "" if attrs.fifo else "AND visible_at <= :now"
        sql = (
            "SELECT rowid, group_id, visible_at, receive_count, deadline, sent_at"
            f" FROM q{qid} WHERE rowid > :after {visible} ORDER BY rowid LIMIT :n"
        )
        chosen: list[int] = []
        blocked: set[str | None] = set()
        after = 0
        page = max(limit * 4, 64)
        horizon = now - attrs.retention
        while len(chosen) < limit:
            rows = conn.execute(sql, {"after": after, "now": now, "n": page}).fetchall()
            for rowid, group, visible_at, count, deadline, sent_at in rows:
                after = rowid
                if group in blocked:
                    continue
                if visible_at > now:
                    blocked.add(group)
                    continue
                if (deadline is not None and deadline <= now) or sent_at < horizon:
                    self._expire(conn, qid, queue, attrs, rowid, now)
                    continue
                if policy is not None and dlq_id is not None and count >= policy.max_receive_count:
                    self._to_dlq(conn, qid, queue, dlq_id, rowid, now, None)
                    continue
                chosen.append(rowid)
                if len(chosen) >= limit:
                    break
            if len(rows) < page:
                break
        return chosen

    def delete(self, queue: str, receipts: Sequence[str]) -> list[Exception | None]:
        parsed, by_token = group_receipts(queue, receipts)
        try:
            gone = self._fresh_on_drop(queue, lambda: self._delete_claims(queue, by_token))
        except _NotAllHeld:  # some receipts are stale: find out which
            gone = self._fresh_on_drop(
                queue, lambda: self._delete_claims(queue, by_token, every=False)
            )
        return receipt_results(parsed, gone)

    def _delete_claims(
        self, queue: str, by_token: Mapping[str, Sequence[int]], every: bool = True
    ) -> set[int]:
        """Delete rows still held by their claim's token (one statement per token, as the
        receipts of one receive share it); the rows deleted.

        With `every`, the statement only counts what it deleted, and anything short of
        every row rolls the whole call back (_NotAllHeld); without, it returns each row it
        deleted, which a call with stale receipts needs.
        """
        now = self.clock.now()
        gone: set[int] = set()
        with self._tx() as conn:
            qid, attrs = self._recent_queue(conn, queue, now)
            t = f"q{qid}"
            for token, rowids in by_token.items():
                where = f"token = ? AND rowid IN ({','.join('?' * len(rowids))})"
                if attrs.archive:
                    conn.execute(
                        f"{archive_insert(t)} WHERE {where}",
                        (queue, now, "deleted", token, *rowids),
                    )
                if every:
                    deleted = conn.execute(f"DELETE FROM {t} WHERE {where}", (token, *rowids))
                    if deleted.rowcount != len(rowids):
                        raise _NotAllHeld(queue)
                    gone.update(rowids)
                    continue
                rows = conn.execute(
                    f"DELETE FROM {t} WHERE {where} RETURNING rowid", (token, *rowids)
                ).fetchall()
                gone.update(r[0] for r in rows)
            if gone:
                self._count(qid, deleted=len(gone))
        return gone

    def change_visibility(
        self, queue: str, entries: Sequence[tuple[str, float]]
    ) -> list[Exception | None]:
        return self._fresh_on_drop(queue, lambda: self._change_visibility(queue, entries))

    def _change_visibility(
        self, queue: str, entries: Sequence[tuple[str, float]]
    ) -> list[Exception | None]:
        now = self.clock.now()
        results: list[Exception | None] = []
        released = False
        with self._tx() as conn:
            qid, _ = self._recent_queue(conn, queue, now)
            for receipt, timeout in entries:
                try:
                    rowid, mid, token = parse_receipt(queue, receipt)
                except ConveyorError as exc:
                    results.append(exc)
                    continue
                n = conn.execute(
                    f"UPDATE q{qid} SET visible_at = ?, version = version + 1"
                    " WHERE rowid = ? AND token = ?",
                    (now + timeout, rowid, token),
                ).rowcount
                results.append(None if n else stale_receipt(mid))
                released = released or (n > 0 and timeout == 0)
        if released:
            self.notify(queue)
        return results
