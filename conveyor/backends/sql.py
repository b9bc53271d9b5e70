"""The SQL queue: the store behind ``postgresql://`` and ``mysql://``.

Any number of `conveyor serve` processes and workers on any number of hosts share one
database. Receives claim with ``SELECT ... FOR UPDATE SKIP LOCKED``, so receivers never wait
on each other's rows and never get the same message; FIFO queues and rate limits take the
queue's row lock instead, which orders their receivers. Times are the clients' clocks (keep
hosts in NTP sync). The drivers (`postgres.py`, `mysql.py`) supply connections, the
statements their database can do in one round trip, and long-poll wake-ups.
"""

from __future__ import annotations

import secrets
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ..exceptions import ConveyorError
from ..ids import new_id, new_ids
from ..models import (
    FAR_FUTURE,
    Delivery,
    Message,
    NewMessage,
    QueueAttributes,
    SendResult,
    sent_result,
)
from ..validation import DEDUP_WINDOW
from .base import (
    Backend,
    bare_bodies,
    claim_receipts,
    dedup_key,
    group_receipts,
    parse_receipt,
    receipt_results,
    refill_tokens,
    stale_receipt,
)
from .rows import encode_attributes
from .sql_admin import SQLAdmin
from .sql_conn import Cursor, in_list
from .sql_pipeline import SQLPipeline
from .sql_queues import SQLQueues
from .sql_schema import (
    MESSAGE_COLUMNS,
    archive_insert,
    claimed,
    to_message,
)

Row = tuple[Any, ...]


class Bare(NamedTuple):
    """Bare bodies to insert together (see `bare_bodies`) and what their rows share."""

    qid: int
    ids: list[str]
    bodies: list[bytes]
    nprio: int
    now: float
    visible_at: float


INSERT_VALUES = "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"


class SQLBackend(SQLPipeline, SQLQueues, SQLAdmin, Backend):
    # the driver's claim, delete and insert hooks are single statements (no transaction)
    single_statement = False
    single_statement_delete = False

    # -- what a driver provides besides connections ---------------------------------------

    @abstractmethod
    def _insert_many(
        self, cur: Cursor, queue: str, rows: Sequence[Row], generated: bool
    ) -> set[str]:
        """Insert message rows, skipping ids the queue holds; the ids inserted. With
        `generated`, every id was made up by this store (none can be a duplicate)."""

    def _insert_bare(self, cur: Cursor, queue: str, bare: Bare, again: bool) -> None:
        """Insert bare bodies (see `bare_bodies`); `again` on a retry, which skips ids a
        first attempt stored unconfirmed."""
        rows = [
            (bare.qid, bare.nprio, i, body, None, None, None, None, bare.now, bare.visible_at, 0)
            for i, body in zip(bare.ids, bare.bodies, strict=True)
        ]
        self._insert_many(cur, queue, rows, not again)

    @abstractmethod
    def _insert_one(self, cur: Cursor, row: Row) -> int | None:
        """Insert one message row; its seq, or None if the queue holds its id."""

    @abstractmethod
    def _insert_select(self, cur: Cursor, sql: str, params: Sequence[Any]) -> int:
        """Run an INSERT ... SELECT of one message row; the new row's seq."""

    def _notify_waiters(self, cur: Cursor, queue: str) -> None:
        """Wake other processes' long polls on `queue` when this transaction commits."""

    def _claim_ready(
        self, cur: Cursor, qid: int, limit: int, visible_at: float, now: float, horizon: float,
        token: str,
    ) -> list[Row]:  # fmt: skip
        """Claim up to `limit` ready messages of a plain queue; the rows as claimed."""
        p = self.prefix
        cur.execute(
            f"SELECT {MESSAGE_COLUMNS} FROM {p}messages WHERE queue_id = %s AND visible_at <= %s"
            " AND sent_at >= %s AND (deadline IS NULL OR deadline > %s)"
            " ORDER BY nprio, seq LIMIT %s FOR UPDATE SKIP LOCKED",
            (qid, now, horizon, now, limit),
        )
        rows = cur.fetchall()
        if rows:
            self._claim(cur, [r[0] for r in rows], visible_at, now, token)
        return [claimed(r, visible_at, now) for r in rows]

    def _delete_by_token(self, cur: Cursor, qid: int, token: str, seqs: Sequence[int]) -> list[int]:
        """Delete the rows of `seqs` that still carry `token`; the seqs deleted."""
        p = self.prefix
        cur.execute(
            f"SELECT seq FROM {p}messages WHERE queue_id = %s AND token = %s"
            f" AND seq IN ({in_list(seqs)}) FOR UPDATE",
            (qid, token, *seqs),
        )
        found = [int(r[0]) for r in cur.fetchall()]
        if found:
            cur.execute(f"DELETE FROM {p}messages WHERE seq IN ({in_list(found)})", found)
        return found

    # -- messages -------------------------------------------------------------------------

    @staticmethod
    def _row(
        qid: int, m: NewMessage, message_id: str, key: str | None, now: float, fifo: bool
    ) -> Row:
        return (
            qid,
            0 if fifo else -m.priority,
            message_id,
            m.body,
            encode_attributes(m.attributes),
            m.group_id,
            key,
            m.deadline,
            now,
            now + m.delay,
            int(m.compressed),
        )

    def send(self, queue: str, messages: Sequence[NewMessage]) -> list[SendResult]:
        now = self.clock.now()
        qid, attrs = self._lookup(queue)
        if attrs.fifo:
            results = self._run(
                lambda cur: self._send_locked(cur, queue, qid, attrs, messages, now)
            )
        elif bare_bodies(messages):
            # one priority and delay, no options: rows built straight from the bodies
            first = messages[0]
            bare = Bare(
                qid, new_ids(len(messages)), [m.body for m in messages], -first.priority, now,
                now + first.delay,
            )  # fmt: skip
            tries = 0

            def insert_bare(cur: Cursor) -> None:
                nonlocal tries
                tries += 1
                self._insert_bare(cur, queue, bare, tries > 1)

            self._run(insert_bare, tx=False)
            self._count(qid, sent=len(bare.ids))
            self.notify(queue)
            return [sent_result(i) for i in bare.ids]
        else:
            # ids are fixed before the first attempt, so a retried insert cannot duplicate
            mine = [m.generated_id or not m.id for m in messages]
            fresh = iter(new_ids(sum(mine)))
            ids = [next(fresh) if made else m.id for m, made in zip(messages, mine, strict=True)]
            rows = [
                self._row(qid, m, i, None, now, False) for m, i in zip(messages, ids, strict=True)
            ]
            generated = all(mine)
            attempts = 0

            def insert(cur: Cursor) -> set[str]:
                # a retry may follow a commit that was never confirmed: it skips ids stored
                nonlocal attempts
                attempts += 1
                return self._insert_many(cur, queue, rows, generated and attempts == 1)

            inserted = self._run(insert, tx=not (self.single_statement or generated))
            results = []
            for made, i in zip(mine, ids, strict=True):
                results.append(
                    sent_result(i) if made or i in inserted else SendResult(id=i, duplicate=True)
                )
                inserted.discard(i)  # a second entry with the same id is its duplicate
        sent = sum(1 for r in results if not r.duplicate)
        if sent:
            self._count(qid, sent=sent)
            self.notify(queue)
        return results

    def _send_locked(
        self,
        cur: Cursor,
        queue: str,
        qid: int,
        attrs: QueueAttributes,
        messages: Sequence[NewMessage],
        now: float,
    ) -> list[SendResult]:
        """Send one by one inside the caller's transaction (FIFO queues, topic fan-out).

        FIFO sends hold the queue's row lock, so send order is commit order and a group is
        never seen out of order.
        """
        p = self.prefix
        fifo = attrs.fifo
        if fifo:
            qid, _ = self._queue(cur, queue, lock=True)
        results: list[SendResult] = []
        for m in messages:
            key = dedup_key(m, attrs.content_based_dedup) if fifo else None
            if key is not None:
                cur.execute(
                    f"SELECT message_id FROM {p}dedup WHERE queue_id = %s AND dkey = %s"
                    " AND expires_at > %s",
                    (qid, key, now),
                )
                seen = cur.fetchone()
                if seen is not None:
                    results.append(SendResult(id=seen[0], duplicate=True))
                    continue
            message_id = new_id() if m.generated_id or not m.id else m.id
            seq = self._insert_one(cur, self._row(qid, m, message_id, key, now, fifo))
            if seq is None:
                results.append(SendResult(id=message_id, duplicate=True))
                continue
            if key is not None:
                cur.execute(
                    self.dialect.upsert_sql(
                        f"{p}dedup", "queue_id, dkey, message_id, expires_at", "queue_id, dkey"
                    ),
                    (qid, key, message_id, now + DEDUP_WINDOW),
                )
            results.append(SendResult(id=message_id, sequence=seq if fifo else None))
        if any(not r.duplicate for r in results):
            self._notify_waiters(cur, queue)
        return results

    def _claim_terms(
        self, queue: str, visibility_timeout: float
    ) -> tuple[int, QueueAttributes, float, float, float]:
        """What a receive of `queue` claims with: the queue's id and attributes, now, the
        claimed messages' visible_at and the retention horizon (expired messages swept)."""
        now = self.clock.now()
        qid, attrs = self._lookup(queue)
        self._sweep(qid, queue, attrs, now)
        if attrs.delivery is Delivery.AT_MOST_ONCE:
            visible_at = FAR_FUTURE
        else:
            visible_at = now + visibility_timeout
        return qid, attrs, now, visible_at, now - attrs.retention

    @staticmethod
    def _walks_head(attrs: QueueAttributes) -> bool:
        """Whether receives walk the queue's head (FIFO groups, dead letters, rate limits)
        rather than claim the first ready messages."""
        return attrs.fifo or attrs.dead_letter is not None or bool(attrs.rate_limit)

    def receive(self, queue: str, max_messages: int, visibility_timeout: float) -> list[Message]:
        token = secrets.token_hex(8)
        qid, attrs, now, visible_at, horizon = self._claim_terms(queue, visibility_timeout)
        if self._walks_head(attrs):
            rows = self._run(
                lambda cur: self._claim_picked(
                    cur, qid, queue, attrs, max_messages, visible_at, now, token
                )
            )
        else:
            rows = self._run(
                lambda cur: self._claim_ready(
                    cur, qid, max_messages, visible_at, now, horizon, token
                ),
                tx=not self.single_statement,
            )
        if rows:
            self._count(qid, received=len(rows))
        rows.sort(key=lambda r: (r[6], r[0]))
        receipts = claim_receipts(queue, token, rows)
        return [to_message(queue, r, h) for r, h in zip(rows, receipts, strict=True)]

    def _claim(
        self, cur: Cursor, seqs: Sequence[int], visible_at: float, now: float, token: str
    ) -> None:
        cur.execute(
            f"UPDATE {self.prefix}messages SET visible_at = %s, receive_count = receive_count + 1,"
            " first_received_at = coalesce(first_received_at, %s), version = version + 1,"
            f" token = %s WHERE seq IN ({in_list(seqs)})",
            (visible_at, now, token, *seqs),
        )

    def _claim_picked(
        self,
        cur: Cursor,
        qid: int,
        queue: str,
        attrs: QueueAttributes,
        max_messages: int,
        visible_at: float,
        now: float,
        token: str,
    ) -> list[Row]:
        """Receive from FIFO queues, rate-limited queues and queues with a dead-letter policy.

        Walks the queue from its head: expires messages past their retention or deadline and
        moves those at the max receive count to the dead-letter queue on the way. FIFO queues
        skip every group whose earliest message is not visible; they and rate-limited queues
        hold the queue's row lock, other queues skip rows other receivers hold.
        """
        p = self.prefix
        limit = max_messages
        tokens = 0.0
        if attrs.fifo or attrs.rate_limit:
            cur.execute(f"SELECT tokens, tokens_at FROM {p}queues WHERE id = %s FOR UPDATE", (qid,))
            row = cur.fetchone()
            if row is None:
                return []
            if attrs.rate_limit:
                tokens = refill_tokens(row[0], row[1], attrs.rate_limit, now)
                limit = min(limit, int(tokens))
        policy = attrs.dead_letter
        dlq_id: int | None = None
        if policy is not None:
            cur.execute(f"SELECT id FROM {p}queues WHERE name = %s", (policy.queue,))
            found = cur.fetchone()
            dlq_id = int(found[0]) if found else None
        visible = "" if attrs.fifo else " AND visible_at <= %s"
        lock = "" if attrs.fifo or attrs.rate_limit else " FOR UPDATE SKIP LOCKED"
        sql = (
            f"SELECT {MESSAGE_COLUMNS} FROM {p}messages WHERE queue_id = %s"
            f" AND (nprio > %s OR (nprio = %s AND seq > %s)){visible}"
            f" ORDER BY nprio, seq LIMIT %s{lock}"
        )
        chosen: list[Row] = []
        blocked: set[str | None] = set()
        after = (-(2**31) - 1, 0)
        page = max(limit * 4, 64)
        horizon = now - attrs.retention
        while len(chosen) < limit:
            params: tuple[Any, ...] = (qid, after[0], after[0], after[1])
            cur.execute(sql, (*params, now, page) if visible else (*params, page))
            rows = cur.fetchall()
            for row in rows:
                after = (row[6], row[0])
                group = row[4]
                if group in blocked:
                    continue
                if row[9] > now:
                    blocked.add(group)
                    continue
                if (row[7] is not None and row[7] <= now) or row[8] < horizon:
                    self._expire(cur, qid, queue, attrs, row[0], now)
                    continue
                if (
                    policy is not None
                    and dlq_id is not None
                    and row[10] >= policy.max_receive_count
                ):
                    self._to_dlq(cur, qid, queue, dlq_id, row[0], None)
                    continue
                chosen.append(row)
                if len(chosen) >= limit:
                    break
            if len(rows) < page:
                break
        if chosen:
            self._claim(cur, [r[0] for r in chosen], visible_at, now, token)
        if attrs.rate_limit:
            cur.execute(
                f"UPDATE {p}queues SET tokens = %s, tokens_at = %s WHERE id = %s",
                (tokens - len(chosen), now, qid),
            )
        if policy is not None and dlq_id is not None:
            self._notify_waiters(cur, policy.queue)
        return [claimed(r, visible_at, now) for r in chosen]

    def delete(self, queue: str, receipts: Sequence[str]) -> list[Exception | None]:
        parsed, by_token = group_receipts(queue, receipts)
        return receipt_results(parsed, self._delete_claims(queue, by_token))

    def _delete_claims(self, queue: str, by_token: Mapping[str, Sequence[int]]) -> set[int]:
        """Delete rows still held by their claim's token (one statement per token, as the
        receipts of one receive share it); the rows deleted."""
        if not by_token:
            return set()
        now = self.clock.now()
        qid, attrs = self._lookup(queue)
        p = self.prefix

        def run(cur: Cursor) -> set[int]:
            gone: set[int] = set()
            for token, seqs in by_token.items():
                if attrs.archive:
                    cur.execute(
                        # by seq, never through the order index (see _delete_by_token)
                        f"{archive_insert(p)} WHERE queue_id + 0 = %s AND token = %s"
                        f" AND seq IN ({in_list(seqs)})",
                        (queue, now, "deleted", qid, token, *seqs),
                    )
                gone.update(self._delete_by_token(cur, qid, token, seqs))
            return gone

        gone = self._run(
            run, tx=attrs.archive or len(by_token) > 1 or not self.single_statement_delete
        )
        if gone:
            self._count(qid, deleted=len(gone))
        return gone

    def change_visibility(
        self, queue: str, entries: Sequence[tuple[str, float]]
    ) -> list[Exception | None]:
        now = self.clock.now()
        qid, _ = self._lookup(queue)
        p = self.prefix

        def run(cur: Cursor) -> tuple[list[Exception | None], bool]:
            results: list[Exception | None] = []
            released = False
            for receipt, timeout in entries:
                try:
                    seq, mid, token = parse_receipt(queue, receipt)
                except ConveyorError as exc:
                    results.append(exc)
                    continue
                cur.execute(
                    f"UPDATE {p}messages SET visible_at = %s, version = version + 1"
                    " WHERE seq = %s AND queue_id = %s AND token = %s",
                    (now + timeout, seq, qid, token),
                )
                results.append(None if cur.rowcount else stale_receipt(mid))
                released = released or (cur.rowcount > 0 and timeout == 0)
            if released:
                self._notify_waiters(cur, queue)
            return results, released

        results, released = self._run(run)
        if released:
            self.notify(queue)
        return results
