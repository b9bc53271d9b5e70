"""The SQL stores' tables and their versions.

Every database holds the same tables under a name prefix (``conveyor_`` by default on
PostgreSQL and MySQL, none in a SQLite file): queues, dedup, archive, topics, subscriptions,
consumers, and the pipeline's leases, streams, stages and sinks (plus ``listeners`` where
processes LISTEN). Messages live in one ``messages`` table on PostgreSQL and MySQL, and in a
table per queue in SQLite (see `dialect.py`). Each family keeps its own list of versions,
so existing databases upgrade step by step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .connections import Exec
from .statements import HELD

Step = Sequence[str] | Callable[[Any], None]
"""One schema version's change: statements, or a function of an Exec."""

# the queues table but its id
QUEUE_COLUMNS = (
    "name TEXT NOT NULL UNIQUE, "
    "attrs TEXT NOT NULL, "
    "created_at REAL NOT NULL, "
    "updated_at REAL NOT NULL, "
    "sent INTEGER NOT NULL DEFAULT 0, "
    "received INTEGER NOT NULL DEFAULT 0, "
    "deleted INTEGER NOT NULL DEFAULT 0, "
    "dead INTEGER NOT NULL DEFAULT 0, "
    "expired INTEGER NOT NULL DEFAULT 0, "
    "tokens REAL NOT NULL DEFAULT 0, "
    "tokens_at REAL NOT NULL DEFAULT 0"
)


def pipeline_ddl(p: str, key: str, text: str, double: str, options: str = "") -> list[str]:
    """Tables of the pipeline features; `key` is the type of a message's id."""
    return [
        f"""CREATE TABLE {p}leases (
            queue_id BIGINT NOT NULL,
            stream {text} NOT NULL,
            lease BIGINT NOT NULL,
            row_key BIGINT NOT NULL,
            message_id {text} NOT NULL,
            token CHAR(16) NOT NULL,
            PRIMARY KEY (queue_id, stream, lease, row_key)
        ){options}""",
        f"""CREATE TABLE {p}streams (
            queue_id BIGINT NOT NULL,
            stream {text} NOT NULL,
            acked BIGINT NOT NULL,
            updated_at {double} NOT NULL,
            PRIMARY KEY (queue_id, stream)
        ){options}""",
        f"""CREATE TABLE {p}staged (
            queue_id BIGINT NOT NULL,
            sink {text} NOT NULL,
            batch BIGINT NOT NULL,
            part INTEGER NOT NULL,
            attempt INTEGER NOT NULL,
            mkey {key} NOT NULL,
            PRIMARY KEY (queue_id, sink, batch, mkey)
        ){options}""",
        f"""CREATE TABLE {p}sinks (
            queue_id BIGINT NOT NULL,
            sink {text} NOT NULL,
            batch BIGINT NOT NULL,
            committed_at {double} NOT NULL,
            PRIMARY KEY (queue_id, sink)
        ){options}""",
    ]


def stages_ddl(p: str, serial: str, text: str, double: str, options: str = "") -> list[str]:
    """The table of staging task attempts (replaced the per-message `staged` table)."""
    return [
        f"""CREATE TABLE {p}stages (
            tag {serial},
            queue_id BIGINT NOT NULL,
            sink {text} NOT NULL,
            batch BIGINT NOT NULL,
            part INTEGER NOT NULL,
            attempt INTEGER NOT NULL,
            low BIGINT,
            high BIGINT,
            created_at {double} NOT NULL,
            UNIQUE (queue_id, sink, batch, part, attempt)
        ){options}""",
    ]


# -- SQLite ---------------------------------------------------------------------------------


def _drop_old_staging(ex: Exec) -> None:
    for (qid,) in ex.rows("SELECT DISTINCT queue_id FROM staged"):
        ex.run(f"DELETE FROM q{int(qid)} WHERE visible_at >= 1e15")
    ex.run("DROP TABLE staged")


def _queue_ids_never_reused(ex: Exec) -> None:
    ex.run(f"CREATE TABLE queues_v5 (id INTEGER PRIMARY KEY AUTOINCREMENT, {QUEUE_COLUMNS})")
    ex.run("INSERT INTO queues_v5 SELECT * FROM queues")
    ex.run("DROP TABLE queues")
    ex.run("ALTER TABLE queues_v5 RENAME TO queues")


SQLITE_MIGRATIONS: list[Step] = [
    [
        f"CREATE TABLE queues (id INTEGER PRIMARY KEY, {QUEUE_COLUMNS})",
        """CREATE TABLE dedup (
            queue_id INTEGER NOT NULL,
            key TEXT NOT NULL,
            message_id TEXT NOT NULL,
            expires_at REAL NOT NULL,
            PRIMARY KEY (queue_id, key)
        ) WITHOUT ROWID""",
        """CREATE TABLE archive (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            queue TEXT NOT NULL,
            id TEXT NOT NULL,
            body BLOB NOT NULL,
            attributes TEXT,
            group_id TEXT,
            priority INTEGER NOT NULL,
            sent_at REAL NOT NULL,
            first_received_at REAL,
            removed_at REAL NOT NULL,
            receive_count INTEGER NOT NULL,
            outcome TEXT NOT NULL,
            compressed INTEGER NOT NULL DEFAULT 0
        )""",
        "CREATE INDEX archive_by_queue ON archive (queue, seq)",
        "CREATE TABLE topics (name TEXT PRIMARY KEY, created_at REAL NOT NULL)",
        """CREATE TABLE subscriptions (
            topic TEXT NOT NULL,
            queue_id INTEGER NOT NULL,
            PRIMARY KEY (topic, queue_id)
        ) WITHOUT ROWID""",
        """CREATE TABLE consumers (
            id TEXT PRIMARY KEY,
            queue TEXT,
            info TEXT NOT NULL,
            timeout REAL NOT NULL,
            registered_at REAL NOT NULL,
            heartbeat_at REAL NOT NULL
        )""",
    ],
    # leases, stream positions, staged writes and sink commits (pipeline.py)
    pipeline_ddl("", "", "TEXT", "REAL", " WITHOUT ROWID"),
    # staged writes tag messages by visible_at, one stages row per task attempt; what was
    # staged the old way is dropped (its job can no longer publish it)
    _drop_old_staging,
    stages_ddl("", "INTEGER PRIMARY KEY AUTOINCREMENT", "TEXT", "REAL"),
    # queue ids are never used again, so an id a process remembers cannot name another queue
    _queue_ids_never_reused,
    # the columns take the names they have on PostgreSQL and MySQL, so one statement serves
    [
        "ALTER TABLE dedup RENAME COLUMN key TO dkey",
        "ALTER TABLE archive RENAME COLUMN queue TO queue_name",
        "ALTER TABLE consumers RENAME COLUMN queue TO queue_name",
    ],
    # topic settings and subscription attributes (string maps as JSON)
    [
        "ALTER TABLE topics ADD COLUMN settings TEXT",
        "ALTER TABLE subscriptions ADD COLUMN attributes TEXT",
    ],
]


# -- PostgreSQL and MySQL -------------------------------------------------------------------


@dataclass(frozen=True)
class ServerTypes:
    """How PostgreSQL and MySQL spell the schema's types and table options."""

    serial: str  # an auto-numbered BIGINT primary key
    blob: str
    double: str
    table_options: str = ""
    text_key: str = "VARCHAR(255)"
    message_id: str = "VARCHAR(128)"
    message_options: str = ""  # extra storage options of the messages table
    partial_where: str = ""  # how an index covers only rows with a deadline, where possible
    clustered_order: bool = False  # delivery order is the messages' primary key (InnoDB)
    long_key: str = "VARCHAR(512)"  # topic names: 256 characters and a region:account: prefix
    retype: str = "ALTER TABLE {table} ALTER COLUMN {column} TYPE {type}"


def server_migrations(d: ServerTypes, p: str) -> list[Step]:
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
        # topic settings and subscription attributes (string maps as JSON); topic names as
        # long as SNS allows
        [
            f"ALTER TABLE {p}topics ADD COLUMN settings TEXT",
            f"ALTER TABLE {p}subscriptions ADD COLUMN attributes TEXT",
            d.retype.format(table=f"{p}topics", column="name", type=d.long_key),
            d.retype.format(table=f"{p}subscriptions", column="topic", type=d.long_key),
        ],
        held_index(d, p),
    ]


def held_index(d: ServerTypes, p: str) -> list[str]:
    """MySQL/MariaDB: an index of every queue's messages by the time they become visible,
    for the claims of queues deep in messages in flight (`inflight.py`).

    `held_at` is NULL for a message never received and not delayed, else its visible_at: a
    virtual column, so the index is the only thing stored. MySQL has no partial indexes; its
    rows under NULL serve the messages never received in delivery order, the others ready
    ones by time. PostgreSQL builds partial indexes for deep queues alone instead.
    """
    if not d.clustered_order:
        return []
    return [
        f"ALTER TABLE {p}messages ADD COLUMN held_at {d.double} AS"
        f" (IF({HELD}, visible_at, NULL)) VIRTUAL,"
        f" ADD INDEX {p}messages_held (queue_id, held_at, nprio, seq)"
    ]


def clustered_order(d: ServerTypes, p: str) -> list[str]:
    """MySQL/MariaDB: delivery order becomes the messages' primary key.

    InnoDB keeps a table's rows in primary-key order, so a claim then reads a queue's head
    straight from the table: no lookup from a secondary index per row, and no deadlocks
    between claims (which locked the order index, then the row) and deletes by seq (the row,
    then the order index). seq keeps a unique index of its own. PostgreSQL keeps its heap
    and the order index.
    """
    if not d.clustered_order:
        return []
    return [
        f"ALTER TABLE {p}messages DROP PRIMARY KEY, ADD UNIQUE KEY {p}messages_seq (seq),"
        f" ADD PRIMARY KEY (queue_id, nprio, seq), DROP INDEX {p}messages_order"
    ]
