"""SQLite schema, its migrations and the statements shared by the SQLite store's modules."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable

from .pipeline import pipeline_ddl, stages_ddl

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


def _drop_old_staging(conn: sqlite3.Connection) -> None:
    for (qid,) in conn.execute("SELECT DISTINCT queue_id FROM staged").fetchall():
        conn.execute(f"DELETE FROM q{int(qid)} WHERE visible_at >= 1e15")
    conn.execute("DROP TABLE staged")


def _queue_ids_never_reused(conn: sqlite3.Connection) -> None:
    conn.execute(f"CREATE TABLE queues_v5 (id INTEGER PRIMARY KEY AUTOINCREMENT, {QUEUE_COLUMNS})")
    conn.execute("INSERT INTO queues_v5 SELECT * FROM queues")
    conn.execute("DROP TABLE queues")
    conn.execute("ALTER TABLE queues_v5 RENAME TO queues")


# Each entry upgrades the schema by one version; PRAGMA user_version records where a file is.
MIGRATIONS: list[str | Callable[[sqlite3.Connection], None]] = [
    f"""
    CREATE TABLE queues (id INTEGER PRIMARY KEY, {QUEUE_COLUMNS});
    CREATE TABLE dedup (
        queue_id INTEGER NOT NULL,
        key TEXT NOT NULL,
        message_id TEXT NOT NULL,
        expires_at REAL NOT NULL,
        PRIMARY KEY (queue_id, key)
    ) WITHOUT ROWID;
    CREATE TABLE archive (
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
    );
    CREATE INDEX archive_by_queue ON archive (queue, seq);
    CREATE TABLE topics (name TEXT PRIMARY KEY, created_at REAL NOT NULL);
    CREATE TABLE subscriptions (
        topic TEXT NOT NULL,
        queue_id INTEGER NOT NULL,
        PRIMARY KEY (topic, queue_id)
    ) WITHOUT ROWID;
    CREATE TABLE consumers (
        id TEXT PRIMARY KEY,
        queue TEXT,
        info TEXT NOT NULL,
        timeout REAL NOT NULL,
        registered_at REAL NOT NULL,
        heartbeat_at REAL NOT NULL
    );
    """,
    # leases, stream positions, staged writes and sink commits (pipeline.py)
    ";\n".join(pipeline_ddl("", "", "TEXT", "REAL", " WITHOUT ROWID")),
    # staged writes tag messages by visible_at, one stages row per task attempt; what was
    # staged the old way is dropped (its job can no longer publish it)
    _drop_old_staging,
    ";\n".join(stages_ddl("", "INTEGER PRIMARY KEY AUTOINCREMENT", "TEXT", "REAL")),
    # queue ids are never used again, so an id a process remembers cannot name another queue
    _queue_ids_never_reused,
]

SCHEMA_VERSION = len(MIGRATIONS)

# Each queue's messages live in a table of its own, "q<queue id>", whose rowid is the
# delivery order: (32767 - priority) << 47 | sequence. Walking the table by rowid is walking
# the queue from its head, so no secondary index is needed to receive. Ids the store makes
# up carry their rowid (`conveyor.ids.row_id`), so finding one is a primary-key lookup; only
# ids chosen by senders, and messages that changed rows (moved, re-prioritised), are in the
# partial unique index `by_id` ("indexed" = 1). A send, receive or delete of a message with
# a generated id so writes a single table page.
SEQ_BITS = 47
BAND = 1 << SEQ_BITS
MAX_PRIORITY = 32767


def band(priority: int) -> int:
    """The first rowid of a priority's band (higher priorities get lower rowids)."""
    return (MAX_PRIORITY - priority) << SEQ_BITS


def queue_ddl(qid: int) -> list[str]:
    t = f"q{int(qid)}"
    return [
        f"""CREATE TABLE {t} (
            id TEXT NOT NULL,
            body BLOB NOT NULL,
            attributes TEXT,
            group_id TEXT,
            dedup_id TEXT,
            priority INTEGER NOT NULL DEFAULT 0,
            deadline REAL,
            sent_at REAL NOT NULL,
            visible_at REAL NOT NULL,
            receive_count INTEGER NOT NULL DEFAULT 0,
            first_received_at REAL,
            version INTEGER NOT NULL DEFAULT 1,
            token TEXT,
            source_queue TEXT,
            error TEXT,
            compressed INTEGER NOT NULL DEFAULT 0,
            indexed INTEGER NOT NULL DEFAULT 0
        )""",
        f"CREATE UNIQUE INDEX {t}_by_id ON {t} (id) WHERE indexed",
        f"CREATE INDEX {t}_by_deadline ON {t} (deadline) WHERE deadline IS NOT NULL",
    ]


def last_rowid(conn: sqlite3.Connection, t: str, priority: int) -> int:
    """The highest rowid in a priority's band (or the band's base when it is empty)."""
    base = band(priority)
    row = conn.execute(
        f"SELECT max(rowid) FROM {t} WHERE rowid BETWEEN ? AND ?", (base, base + BAND - 1)
    ).fetchone()
    return int(row[0]) if row[0] is not None else base


MESSAGE_COLUMNS = (
    "rowid, id, body, attributes, group_id, dedup_id, priority, deadline, sent_at, visible_at,"
    " receive_count, first_received_at, version, source_queue, error, compressed"
)

# copy columns (all but rowid and the receive state) for moving a message between tables
COPY_COLUMNS = "id, body, attributes, group_id, dedup_id, priority, deadline, compressed"

INSERT_COLUMNS = (
    "rowid, id, body, attributes, group_id, dedup_id, priority, deadline, sent_at, visible_at,"
    " compressed, indexed"
)

# rows per statement of `bare_insert`
BARE_ROWS = 50


@functools.lru_cache(maxsize=1024)
def bare_insert(t: str, n: int) -> str:
    """Insert n bodies that share priority, sent_at and visible_at (?1-?3), at consecutive
    rowids from ?4, each with its id and body (?5 and ?6 for the first, and so on).

    One statement binds the shared values once: a batch of 10 binds 24 values instead of
    120, which is most of what an insert costs here.
    """
    rows = ",".join(f"(?1, ?2, ?3, ?4 + {k}, ?{5 + 2 * k}, ?{6 + 2 * k})" for k in range(n))
    return f"INSERT INTO {t} (priority, sent_at, visible_at, rowid, id, body) VALUES {rows}"


def archive_insert(t: str) -> str:
    return (
        "INSERT INTO archive (queue, id, body, attributes, group_id, priority, sent_at,"
        " first_received_at, removed_at, receive_count, outcome, compressed)"
        " SELECT ?, id, body, attributes, group_id, priority, sent_at, first_received_at, ?,"
        f" receive_count, ?, compressed FROM {t}"
    )


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the file to SCHEMA_VERSION inside one write transaction; returns the old version."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        current = conn.execute("PRAGMA user_version").fetchone()[0]
        if current > SCHEMA_VERSION:
            raise RuntimeError(
                f"this database has schema version {current}, newer than this Conveyor"
                f" ({SCHEMA_VERSION}): upgrade Conveyor"
            )
        for version in range(current, SCHEMA_VERSION):
            step = MIGRATIONS[version]
            if callable(step):
                step(conn)
                continue
            for statement in step.split(";"):
                if statement.strip():
                    conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
        return int(current)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
