"""Embedded SQLite store: the default.

URL: ``sqlite:///relative/or/absolute/path.db`` (``sqlite:////abs/path.db`` for an absolute
path). Options: ``durability=full`` (default: an acknowledged send survives a power cut;
``synchronous=FULL``) or ``durability=normal`` (survives a process crash; ``synchronous=NORMAL``),
``busy_timeout`` in seconds (default 60).

One file holds every queue, in WAL mode. Any number of threads and processes on one host may
share it: every change runs inside ``BEGIN IMMEDIATE``, so claims are atomic. Receive walks
the index ``(queue_id, priority DESC, seq, visible_at)`` from its head, so its cost does not
grow with queue depth. The schema is versioned (``PRAGMA user_version``) and migrated on
first use. Supports every capability.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..clock import SYSTEM_CLOCK, Clock
from ..exceptions import (
    ConveyorError,
    InvalidInput,
    InvalidState,
    MessageNotFound,
    QueueDoesNotExist,
    QueueExists,
    StoreUnavailable,
)
from ..models import (
    FAR_FUTURE,
    Delivery,
    Message,
    MessageState,
    MessageUpdate,
    NewMessage,
    QueueAttributes,
    QueueInfo,
    QueueStats,
    SendResult,
)
from ..notify import HUB
from ..validation import DEDUP_WINDOW
from .base import Backend, dedup_key, make_receipt, parse_receipt, refill_tokens, stale_receipt
from .sqlite_admin import SQLiteAdmin
from .sqlite_schema import (
    ARCHIVE_INSERT,
    MESSAGE_COLUMNS,
    encode_attributes,
    migrate,
    row_to_message,
)

_CLAIM_SET = (
    "UPDATE messages SET visible_at = ?, receive_count = receive_count + 1,"
    " first_received_at = coalesce(first_received_at, ?), version = version + 1, token = ?"
)
_INSERT = (
    "INSERT INTO messages (queue_id, id, body, attributes, group_id, dedup_id, priority,"
    " deadline, sent_at, visible_at, compressed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (queue_id, id) DO NOTHING"
)


class SQLiteBackend(SQLiteAdmin, Backend):
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

    # -- connections and transactions -----------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        try:
            parent = os.path.dirname(self.path)
            if parent and not os.path.isdir(parent):
                raise StoreUnavailable(
                    f"cannot open SQLite store {self.path}: directory {parent} does not exist"
                )
            conn = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=self._busy_ms / 1000,
            )
            conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            conn.execute("PRAGMA journal_mode = WAL")
            sync = "FULL" if self.durability == "full" else "NORMAL"
            conn.execute(f"PRAGMA synchronous = {sync}")
            conn.execute("PRAGMA cache_size = -32000")
            if not self._migrated:
                with self._lock:
                    if not self._migrated:
                        migrate(conn)
                        self._migrated = True
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot open SQLite store {self.path}: {exc}") from exc
        self._local.conn = conn
        with self._lock:
            self._connections.append(conn)
        return conn

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreUnavailable(
                f"SQLite store {self.path} is busy or unavailable: {exc}"
            ) from exc
        try:
            yield conn
            conn.execute("COMMIT")
        except ConveyorError:
            conn.execute("ROLLBACK")
            raise
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise StoreUnavailable(f"SQLite store {self.path} failed: {exc}") from exc
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        try:
            return self._conn().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"SQLite store {self.path} failed: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

    def wait_for_messages(self, queue: str, since: int, timeout: float) -> None:
        """Wake on a send in this process, or on any commit by another (PRAGMA data_version)."""
        if self.clock.manual:
            self.clock.sleep(timeout)
            return
        conn = self._conn()
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        remaining = timeout
        while remaining > 0:
            step = min(remaining, 0.02)
            if HUB.wait(self.key, queue, since, step):
                return
            if conn.execute("PRAGMA data_version").fetchone()[0] != version:
                return
            remaining -= step

    # -- queue rows -----------------------------------------------------------------------

    def _attributes(self, text: str) -> QueueAttributes:
        attrs = self._attrs.get(text)
        if attrs is None:
            attrs = self._attrs[text] = QueueAttributes.from_json(text)
        return attrs

    def _queue(self, conn: sqlite3.Connection, name: str) -> tuple[int, QueueAttributes]:
        row = conn.execute("SELECT id, attrs FROM queues WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise QueueDoesNotExist(f"queue {name!r} does not exist: create it first")
        return row[0], self._attributes(row[1])

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
            conn.execute(
                "INSERT INTO queues (name, attrs, created_at, updated_at, tokens, tokens_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (name, attributes.to_json(), now, now, attributes.rate_limit or 0, now),
            )
        return QueueInfo(name=name, attributes=attributes, created_at=now, updated_at=now), True

    def delete_queue(self, name: str) -> None:
        with self._tx() as conn:
            qid, _ = self._queue(conn, name)
            conn.execute("DELETE FROM messages WHERE queue_id = ?", (qid,))
            conn.execute("DELETE FROM dedup WHERE queue_id = ?", (qid,))
            conn.execute("DELETE FROM subscriptions WHERE queue_id = ?", (qid,))
            conn.execute("DELETE FROM queues WHERE id = ?", (qid,))

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
        return self._info(row)

    def purge_queue(self, name: str) -> int:
        with self._tx() as conn:
            qid, _ = self._queue(conn, name)
            return conn.execute("DELETE FROM messages WHERE queue_id = ?", (qid,)).rowcount

    def _sweep(
        self,
        conn: sqlite3.Connection,
        qid: int,
        name: str,
        attrs: QueueAttributes,
        now: float,
        force: bool = False,
    ) -> None:
        """Expire messages past retention or deadline and forget old dedup ids (≤ 1/s)."""
        if not force and now - self._swept.get(qid, 0.0) < 1.0:
            return
        self._swept[qid] = now
        horizon = now - attrs.retention
        cond = (
            "queue_id = ? AND seq IN (SELECT seq FROM messages WHERE queue_id = ? AND sent_at < ?"
            " UNION SELECT seq FROM messages WHERE queue_id = ? AND deadline <= ?)"
        )
        params = (qid, qid, horizon, qid, now)
        if attrs.archive:
            conn.execute(f"{ARCHIVE_INSERT} WHERE {cond}", (name, now, "expired", *params))
        n = conn.execute(f"DELETE FROM messages WHERE {cond}", params).rowcount
        if n:
            conn.execute("UPDATE queues SET expired = expired + ? WHERE id = ?", (n, qid))
        conn.execute("DELETE FROM dedup WHERE queue_id = ? AND expires_at <= ?", (qid, now))

    def queue_stats(self, name: str) -> QueueStats:
        now = self.clock.now()
        with self._tx() as conn:
            qid, attrs = self._queue(conn, name)
            self._sweep(conn, qid, name, attrs, now, force=True)
            ready, delayed, in_flight, oldest = conn.execute(
                "SELECT coalesce(sum(visible_at <= ?1), 0),"
                " coalesce(sum(visible_at > ?1 AND receive_count = 0), 0),"
                " coalesce(sum(visible_at > ?1 AND receive_count > 0), 0), min(sent_at)"
                " FROM messages WHERE queue_id = ?2",
                (now, qid),
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

    def _send_locked(
        self,
        conn: sqlite3.Connection,
        qid: int,
        attrs: QueueAttributes,
        messages: Sequence[NewMessage],
        now: float,
    ) -> list[SendResult]:
        results: list[SendResult] = []
        fifo = attrs.fifo
        execute = conn.execute
        for m in messages:
            key = dedup_key(m, attrs.content_based_dedup) if fifo else None
            if key is not None:
                seen = execute(
                    "SELECT message_id FROM dedup"
                    " WHERE queue_id = ? AND key = ? AND expires_at > ?",
                    (qid, key, now),
                ).fetchone()
                if seen is not None:
                    results.append(SendResult(id=seen[0], duplicate=True))
                    continue
            cur = execute(
                _INSERT,
                (
                    qid,
                    m.id,
                    m.body,
                    encode_attributes(m.attributes),
                    m.group_id,
                    key,
                    0 if fifo else m.priority,
                    m.deadline,
                    now,
                    now + m.delay,
                    int(m.compressed),
                ),
            )
            if cur.rowcount == 0:
                results.append(SendResult(id=m.id, duplicate=True))
                continue
            if key is not None:
                execute(
                    "INSERT OR REPLACE INTO dedup (queue_id, key, message_id, expires_at)"
                    " VALUES (?, ?, ?, ?)",
                    (qid, key, m.id, now + DEDUP_WINDOW),
                )
            results.append(SendResult(id=m.id, sequence=cur.lastrowid if fifo else None))
        stored = sum(1 for r in results if not r.duplicate)
        if stored:
            execute("UPDATE queues SET sent = sent + ? WHERE id = ?", (stored, qid))
        return results

    def send(self, queue: str, messages: Sequence[NewMessage]) -> list[SendResult]:
        now = self.clock.now()
        with self._tx() as conn:
            qid, attrs = self._queue(conn, queue)
            results = self._send_locked(conn, qid, attrs, messages, now)
        self.notify(queue)
        return results

    def receive(self, queue: str, max_messages: int, visibility_timeout: float) -> list[Message]:
        now = self.clock.now()
        token = secrets.token_hex(8)
        with self._tx() as conn:
            qid, attrs = self._queue(conn, queue)
            self._sweep(conn, qid, queue, attrs, now)
            limit = max_messages
            if attrs.rate_limit:
                tokens, tokens_at = conn.execute(
                    "SELECT tokens, tokens_at FROM queues WHERE id = ?", (qid,)
                ).fetchone()
                tokens = refill_tokens(tokens, tokens_at, attrs.rate_limit, now)
                limit = min(limit, int(tokens))
                if limit <= 0:
                    conn.execute(
                        "UPDATE queues SET tokens = ?, tokens_at = ? WHERE id = ?",
                        (tokens, now, qid),
                    )
                    return []
            if attrs.delivery is Delivery.AT_MOST_ONCE:
                visible_at = FAR_FUTURE
            else:
                visible_at = now + visibility_timeout
            if attrs.fifo or attrs.dead_letter is not None:
                seqs = self._pick(conn, qid, queue, attrs, limit, now)
                if not seqs:
                    rows = []
                else:
                    marks = ",".join("?" * len(seqs))
                    rows = conn.execute(
                        f"{_CLAIM_SET} WHERE seq IN ({marks}) RETURNING {MESSAGE_COLUMNS}",
                        (visible_at, now, token, *seqs),
                    ).fetchall()
            else:
                rows = conn.execute(
                    f"{_CLAIM_SET} WHERE seq IN (SELECT seq FROM messages WHERE queue_id = ?"
                    " AND visible_at <= ? AND (deadline IS NULL OR deadline > ?)"
                    f" ORDER BY priority DESC, seq LIMIT ?) RETURNING {MESSAGE_COLUMNS}",
                    (visible_at, now, token, qid, now, now, limit),
                ).fetchall()
            if rows:
                conn.execute(
                    "UPDATE queues SET received = received + ? WHERE id = ?", (len(rows), qid)
                )
            if attrs.rate_limit:
                conn.execute(
                    "UPDATE queues SET tokens = ?, tokens_at = ? WHERE id = ?",
                    (tokens - len(rows), now, qid),
                )
        rows.sort(key=lambda r: r[0] if attrs.fifo else (-r[6], r[0]))
        return [row_to_message(queue, r, make_receipt(queue, r[1], token)) for r in rows]

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

        Expires messages past their deadline and moves those at the max receive count to the
        dead-letter queue on the way. FIFO queues walk in send order, skipping every group
        whose earliest message is not visible.
        """
        policy = attrs.dead_letter
        dlq_id: int | None = None
        if policy is not None:
            row = conn.execute("SELECT id FROM queues WHERE name = ?", (policy.queue,)).fetchone()
            dlq_id = row[0] if row else None
        chosen: list[int] = []
        blocked: set[str | None] = set()
        last_priority, last_seq = 2**31, 0
        page = max(limit * 4, 64)
        if attrs.fifo:
            sql = (
                "SELECT seq, priority, group_id, visible_at, receive_count, deadline"
                " FROM messages WHERE queue_id = :q AND seq > :seq ORDER BY seq LIMIT :n"
            )
        else:
            sql = (
                "SELECT seq, priority, group_id, visible_at, receive_count, deadline"
                " FROM messages WHERE queue_id = :q AND visible_at <= :now"
                " AND (priority < :p OR (priority = :p AND seq > :seq))"
                " ORDER BY priority DESC, seq LIMIT :n"
            )
        while len(chosen) < limit:
            rows = conn.execute(
                sql, {"q": qid, "now": now, "p": last_priority, "seq": last_seq, "n": page}
            ).fetchall()
            for seq, priority, group, visible, count, deadline in rows:
                last_priority, last_seq = priority, seq
                if group in blocked:
                    continue
                if visible > now:
                    blocked.add(group)
                    continue
                if deadline is not None and deadline <= now:
                    self._expire(conn, qid, queue, attrs, seq, now)
                    continue
                if policy is not None and dlq_id is not None and count >= policy.max_receive_count:
                    self._to_dlq(conn, qid, queue, dlq_id, seq, now, None)
                    continue
                chosen.append(seq)
                if len(chosen) >= limit:
                    break
            if len(rows) < page:
                break
        return chosen

    def _expire(
        self,
        conn: sqlite3.Connection,
        qid: int,
        queue: str,
        attrs: QueueAttributes,
        seq: int,
        now: float,
    ) -> None:
        if attrs.archive:
            conn.execute(f"{ARCHIVE_INSERT} WHERE seq = ?", (queue, now, "expired", seq))
        conn.execute("DELETE FROM messages WHERE seq = ?", (seq,))
        conn.execute("UPDATE queues SET expired = expired + 1 WHERE id = ?", (qid,))

    def _to_dlq(
        self,
        conn: sqlite3.Connection,
        qid: int,
        queue: str,
        dlq_id: int,
        seq: int,
        now: float,
        error: str | None,
    ) -> int:
        conn.execute(
            "DELETE FROM messages"
            " WHERE queue_id = ? AND id = (SELECT id FROM messages WHERE seq = ?)",
            (dlq_id, seq),
        )
        cur = conn.execute(
            "INSERT INTO messages (queue_id, id, body, attributes, group_id, dedup_id, priority,"
            " deadline, sent_at, visible_at, receive_count, source_queue, error, compressed)"
            " SELECT ?, id, body, attributes, group_id, dedup_id, priority, deadline, sent_at, ?,"
            " 0, ?, coalesce(?, error), compressed FROM messages WHERE seq = ?",
            (dlq_id, now, queue, error, seq),
        )
        conn.execute("DELETE FROM messages WHERE seq = ?", (seq,))
        conn.execute("UPDATE queues SET dead = dead + 1 WHERE id = ?", (qid,))
        return int(cur.lastrowid or 0)

    def delete(self, queue: str, receipts: Sequence[str]) -> list[Exception | None]:
        now = self.clock.now()
        results: list[Exception | None] = []
        with self._tx() as conn:
            qid, attrs = self._queue(conn, queue)
            deleted = 0
            for receipt in receipts:
                try:
                    mid, token = parse_receipt(queue, receipt)
                except ConveyorError as exc:
                    results.append(exc)
                    continue
                if attrs.archive:
                    conn.execute(
                        f"{ARCHIVE_INSERT} WHERE queue_id = ? AND id = ? AND token = ?",
                        (queue, now, "deleted", qid, mid, token),
                    )
                n = conn.execute(
                    "DELETE FROM messages WHERE queue_id = ? AND id = ? AND token = ?",
                    (qid, mid, token),
                ).rowcount
                if n:
                    deleted += 1
                    results.append(None)
                else:
                    results.append(stale_receipt(mid))
            if deleted:
                conn.execute("UPDATE queues SET deleted = deleted + ? WHERE id = ?", (deleted, qid))
        return results

    def change_visibility(
        self, queue: str, entries: Sequence[tuple[str, float]]
    ) -> list[Exception | None]:
        now = self.clock.now()
        results: list[Exception | None] = []
        released = False
        with self._tx() as conn:
            qid, _ = self._queue(conn, queue)
            for receipt, timeout in entries:
                try:
                    mid, token = parse_receipt(queue, receipt)
                except ConveyorError as exc:
                    results.append(exc)
                    continue
                n = conn.execute(
                    "UPDATE messages SET visible_at = ?, version = version + 1"
                    " WHERE queue_id = ? AND id = ? AND token = ?",
                    (now + timeout, qid, mid, token),
                ).rowcount
                results.append(None if n else stale_receipt(mid))
                released = released or (n > 0 and timeout == 0)
        if released:
            self.notify(queue)
        return results

    # -- shared by the admin operations ---------------------------------------------------

    def _message_row(
        self, conn: sqlite3.Connection, qid: int, queue: str, message_id: str
    ) -> tuple[Any, ...]:
        row = conn.execute(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE queue_id = ? AND id = ?",
            (qid, message_id),
        ).fetchone()
        if row is None:
            raise MessageNotFound(f"no message {message_id!r} in queue {queue!r}")
        return tuple(row)

    def _state_filter(self, state: MessageState | None) -> str:
        return {
            None: "1",
            MessageState.READY: "visible_at <= :now",
            MessageState.DELAYED: "visible_at > :now AND receive_count = 0",
            MessageState.IN_FLIGHT: "visible_at > :now AND receive_count > 0",
        }[state]

    def _check_redrivable(self, row: tuple[Any, ...], now: float) -> None:
        if row[9] > now and row[10] > 0:
            raise InvalidState(
                f"message {row[1]!r} is in flight: wait for its visibility timeout or delete it"
            )

    def _update(
        self, conn: sqlite3.Connection, qid: int, queue: str, message_id: str, update: MessageUpdate
    ) -> None:
        sets: list[str] = []
        params: list[Any] = []
        if update.body is not None:
            sets += ["body = ?", "compressed = ?"]
            params += [update.body, int(bool(update.compressed))]
        if update.attributes is not None:
            sets.append("attributes = ?")
            params.append(encode_attributes(update.attributes))
        if update.priority is not None:
            sets.append("priority = ?")
            params.append(update.priority)
        if update.visible_at is not None:
            sets.append("visible_at = ?")
            params.append(update.visible_at)
        sets.append("version = version + 1")
        n = conn.execute(
            f"UPDATE messages SET {', '.join(sets)} WHERE queue_id = ? AND id = ?",
            (*params, qid, message_id),
        ).rowcount
        if not n:
            raise MessageNotFound(f"no message {message_id!r} in queue {queue!r}")
