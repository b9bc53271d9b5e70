"""The schema of the PostgreSQL and MySQL/MariaDB stores, their migrations, and row codecs.

All tables share one name prefix (``conveyor_`` unless the store URL says otherwise), so
several deployments can share a database. The prefix is the only thing ever spliced into SQL
text, and it is checked against ``PREFIX_RE`` first; queue names, ids and bodies are always
parameters.

Messages of every queue live in one table. A row's ``seq`` (a sequence) is its identity and
its place in send order; ``nprio`` is minus the priority, so the index ``(queue_id, nprio,
seq)`` lists a queue in delivery order and a receive reads it from its head: its cost does
not grow with depth.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..exceptions import InvalidInput
from ..models import Message
from .pipeline import pipeline_ddl, stages_ddl
from .rows import stored_message

PREFIX_RE = re.compile(r"[a-z][a-z0-9_]{0,29}")


def check_prefix(prefix: str) -> str:
    if not PREFIX_RE.fullmatch(prefix):
        raise InvalidInput(
            f"table prefix {prefix!r} is not valid: use 1-30 lower-case letters, digits or"
            " underscores, starting with a letter (for example prefix=conveyor_)"
        )
    return prefix


@dataclass(frozen=True)
class Dialect:
    name: str
    serial: str  # an auto-numbered BIGINT primary key
    blob: str
    double: str
    table_options: str = ""
    text_key: str = "VARCHAR(255)"
    message_id: str = "VARCHAR(128)"
    message_options: str = ""  # extra storage options of the messages table
    partial_where: str = ""  # how an index covers only rows with a deadline, where possible
    # one-row inserts that skip, or update, a row whose key exists
    insert_ignore: str = (
        "INSERT INTO {table} ({columns}) VALUES ({marks}) ON CONFLICT ({key}) DO NOTHING"
    )
    upsert: str = (
        "INSERT INTO {table} ({columns}) VALUES ({marks}) ON CONFLICT ({key}) DO UPDATE SET"
    )
    updated: str = "EXCLUDED.{c}"

    def ignore_sql(self, table: str, columns: str, key: str) -> str:
        marks = ", ".join(["%s"] * len(columns.split(",")))
        return self.insert_ignore.format(table=table, columns=columns, marks=marks, key=key)

    def upsert_sql(self, table: str, columns: str, key: str) -> str:
        cols = [c.strip() for c in columns.split(",")]
        keys = {k.strip() for k in key.split(",")}
        sets = ", ".join(f"{c} = {self.updated.format(c=c)}" for c in cols if c not in keys)
        marks = ", ".join(["%s"] * len(cols))
        return f"{self.upsert.format(table=table, columns=columns, marks=marks, key=key)} {sets}"


POSTGRES = Dialect(
    "postgresql",
    "BIGSERIAL PRIMARY KEY",
    "BYTEA",
    "DOUBLE PRECISION",
    # byte-wise comparison: exact, as on every store, and cheaper than the locale's
    text_key='VARCHAR(255) COLLATE "C"',
    message_id='VARCHAR(128) COLLATE "C"',
    # room in each page, so a claim's UPDATE stays on its page and touches no index (HOT)
    message_options=" WITH (fillfactor = 70)",
    partial_where=" WHERE deadline IS NOT NULL",
)
MYSQL = Dialect(
    "mysql",
    "BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY",
    "LONGBLOB",
    "DOUBLE",
    # binary collation: queue names and ids compare exactly, as on every other store
    " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
    "VARCHAR(255)",
    "VARCHAR(128)",
    "",
    "",
    "INSERT IGNORE INTO {table} ({columns}) VALUES ({marks})",
    "INSERT INTO {table} ({columns}) VALUES ({marks}) ON DUPLICATE KEY UPDATE",
    "VALUES({c})",
)


def migrations(d: Dialect, p: str) -> list[list[str]]:
    """Statements per schema version; the version table records how far a database is."""
    f, o, k, i = d.double, d.table_options, d.text_key, d.message_id
    return [
        [
            f"""CREATE TABLE {p}queues (
                id {d.serial},
                name {k} NOT NULL UNIQUE,
                attrs TEXT NOT NULL,
                created_at {f} NOT NULL,
                updated_at {f} NOT NULL,
                sent BIGINT NOT NULL DEFAULT 0,
                received BIGINT NOT NULL DEFAULT 0,
                deleted BIGINT NOT NULL DEFAULT 0,
                dead BIGINT NOT NULL DEFAULT 0,
                expired BIGINT NOT NULL DEFAULT 0,
                tokens {f} NOT NULL DEFAULT 0,
                tokens_at {f} NOT NULL DEFAULT 0
            ){o}""",
            f"""CREATE TABLE {p}messages (
                seq {d.serial},
                queue_id BIGINT NOT NULL,
                nprio INTEGER NOT NULL,
                id {i} NOT NULL,
                body {d.blob} NOT NULL,
                attributes TEXT,
                group_id {i},
                dedup_id {i},
                deadline {f},
                sent_at {f} NOT NULL,
                visible_at {f} NOT NULL,
                receive_count INTEGER NOT NULL DEFAULT 0,
                first_received_at {f},
                version INTEGER NOT NULL DEFAULT 1,
                token CHAR(16),
                source_queue {k},
                error TEXT,
                compressed SMALLINT NOT NULL DEFAULT 0
            ){o}{d.message_options}""",
            f"CREATE INDEX {p}messages_order ON {p}messages (queue_id, nprio, seq)",
            # id first: only the order index may serve "this queue's messages" (a planner
            # with stale statistics would otherwise scan a queue by id and sort it)
            f"CREATE UNIQUE INDEX {p}messages_by_id ON {p}messages (id, queue_id)",
            f"CREATE INDEX {p}messages_by_deadline ON {p}messages (deadline, queue_id)"
            f"{d.partial_where}",
            f"""CREATE TABLE {p}dedup (
                queue_id BIGINT NOT NULL,
                dkey {k} NOT NULL,
                message_id {i} NOT NULL,
                expires_at {f} NOT NULL,
                PRIMARY KEY (queue_id, dkey)
            ){o}""",
            f"""CREATE TABLE {p}archive (
                seq {d.serial},
                queue_name {k} NOT NULL,
                id {i} NOT NULL,
                body {d.blob} NOT NULL,
                attributes TEXT,
                group_id {i},
                priority INTEGER NOT NULL,
                sent_at {f} NOT NULL,
                first_received_at {f},
                removed_at {f} NOT NULL,
                receive_count INTEGER NOT NULL,
                outcome VARCHAR(16) NOT NULL,
                compressed SMALLINT NOT NULL DEFAULT 0
            ){o}""",
            f"CREATE INDEX {p}archive_by_queue ON {p}archive (queue_name, seq)",
            f"CREATE TABLE {p}topics (name {k} NOT NULL PRIMARY KEY, created_at {f} NOT NULL){o}",
            f"""CREATE TABLE {p}subscriptions (
                topic {k} NOT NULL,
                queue_id BIGINT NOT NULL,
                PRIMARY KEY (topic, queue_id)
            ){o}""",
            f"""CREATE TABLE {p}consumers (
                id {k} NOT NULL PRIMARY KEY,
                queue_name {k},
                info TEXT NOT NULL,
                timeout {f} NOT NULL,
                registered_at {f} NOT NULL,
                heartbeat_at {f} NOT NULL
            ){o}""",
        ],
        [
            # processes holding long polls; senders notify only while one is alive
            f"""CREATE TABLE {p}listeners (
                id {k} NOT NULL PRIMARY KEY,
                seen_at {f} NOT NULL
            ){o}""",
        ],
        # leases, stream positions, staged writes and sink commits (pipeline.py)
        pipeline_ddl(p, i, k, f, o),
        # staged writes tag messages by visible_at, one stages row per task attempt; what
        # was staged the old way is dropped (its job can no longer publish it)
        [
            f"DELETE FROM {p}messages WHERE visible_at >= 1e15",
            f"DROP TABLE {p}staged",
            *stages_ddl(p, d.serial, k, f, o),
        ],
        clustered_order(d, p),
    ]


def clustered_order(d: Dialect, p: str) -> list[str]:
    """MySQL/MariaDB: delivery order becomes the messages' primary key.

    InnoDB keeps a table's rows in primary-key order, so a claim then reads a queue's head
    straight from the table: no lookup from a secondary index per row, and no deadlocks
    between claims (which locked the order index, then the row) and deletes by seq (the row,
    then the order index). seq keeps a unique index of its own. PostgreSQL keeps its heap
    and the order index.
    """
    if d.name != "mysql":
        return []
    return [
        f"ALTER TABLE {p}messages DROP PRIMARY KEY, ADD UNIQUE KEY {p}messages_seq (seq),"
        f" ADD PRIMARY KEY (queue_id, nprio, seq), DROP INDEX {p}messages_order"
    ]


SCHEMA_VERSION = len(migrations(POSTGRES, "x"))

MESSAGE_COLUMNS = (
    "seq, id, body, attributes, group_id, dedup_id, nprio, deadline, sent_at, visible_at,"
    " receive_count, first_received_at, version, source_queue, error, compressed"
)
INSERT_COLUMNS = (
    "queue_id, nprio, id, body, attributes, group_id, dedup_id, deadline, sent_at, visible_at,"
    " compressed"
)
# what a move to another queue keeps (the rest is set anew)
COPY_COLUMNS = "nprio, id, body, attributes, group_id, dedup_id, deadline, compressed"
ARCHIVE_COLUMNS = (
    "queue_name, id, body, attributes, group_id, priority, sent_at, first_received_at,"
    " removed_at, receive_count, outcome, compressed"
)

SEQ_BITS = 47
SEQ_MASK = (1 << SEQ_BITS) - 1


def sequence(seq: int, nprio: int) -> int:
    """A message's place in delivery order as one number, as the SQLite store numbers rows:
    the priority's band, then the send sequence."""
    return ((32767 + max(-32768, min(32767, nprio))) << SEQ_BITS) | (seq & SEQ_MASK)


def after_key(after: int) -> tuple[int, int]:
    """(nprio, seq) to list from, for `list_messages(after=...)`."""
    if after <= 0:
        return (-(2**31) - 1, 0)
    return ((after >> SEQ_BITS) - 32767, after & SEQ_MASK)


def archive_insert(p: str) -> str:
    """INSERT ... SELECT of message rows into the archive; params: queue, removed_at, outcome."""
    return (
        f"INSERT INTO {p}archive ({ARCHIVE_COLUMNS}) SELECT %s, id, body, attributes, group_id,"
        f" -nprio, sent_at, first_received_at, %s, receive_count, %s, compressed FROM {p}messages"
    )


def to_message(queue: str, row: tuple[Any, ...], receipt: str | None = None) -> Message:
    """A message from a row of MESSAGE_COLUMNS (seq and nprio become sequence and priority)."""
    nprio, body = row[6], row[2]
    return stored_message(
        queue,
        row,
        receipt,
        sequence(row[0], nprio),
        -nprio,
        body if type(body) is bytes else bytes(body),
    )


def claimed(row: tuple[Any, ...], visible_at: float, now: float) -> tuple[Any, ...]:
    """A row read before a claim, as the claim left it."""
    r = list(row)
    r[9] = visible_at
    r[10] += 1
    r[11] = now if r[11] is None else r[11]
    r[12] += 1
    return tuple(r)
