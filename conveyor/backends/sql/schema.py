"""The SQL stores' tables and their versions.

Every database holds the same tables under a name prefix (``conveyor_`` by default on
PostgreSQL and MySQL, none in a SQLite file): queues, dedup, archive, topics, subscriptions,
consumers, and the pipeline's leases, streams, stages and sinks (plus ``listeners`` where
processes LISTEN). Messages live in one ``messages`` table on PostgreSQL and MySQL, and in a
table per queue in SQLite (see `dialect.py`). Each family keeps its own list of versions,
so existing databases upgrade step by step.

Each change is a named `Statement` (`statement.py`), compiled by the dialect that runs it:
its slots name the tables and indexes (with the store's prefix) and, on the servers, the
types the database spells its own way (`ServerTypes`: ``{serial}``, ``{blob}``,
``{double}``, ``{text_key}``, ``{message_id}``, ``{long_key}``, ``{table_options}``,
``{message_options}``, ``{partial_where}``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .statement import Compiler, Statement
from .statements import HELD

Step = Sequence[Statement] | Callable[[Any, Compiler], None]
"""One schema version's change: statements, or a function of an Exec and the dialect's
statements."""

# the queues table but its id (SQLite)
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


@dataclass(frozen=True)
class ServerTypes:
    """How PostgreSQL and MySQL spell the schema's types and table options (the words of
    the schema's slots)."""

    serial: str  # an auto-numbered BIGINT primary key
    blob: str
    double: str
    table_options: str = ""
    text_key: str = "VARCHAR(255)"
    message_id: str = "VARCHAR(128)"
    message_options: str = ""  # extra storage options of the messages table
    partial_where: str = ""  # how an index covers only rows with a deadline, where possible
    long_key: str = "VARCHAR(512)"  # topic names: 256 characters and a region:account: prefix
    # the staging table: how a table whose rows a crash may lose is made (``UNLOGGED `` on
    # PostgreSQL), and its key (InnoDB keeps rows in its order, so publishing reads a
    # stage's rows in order with no sort; PostgreSQL's heap keeps them in the order written
    # and publishing reads them all, so it keeps no index up to date as tasks stage)
    unlogged: str = ""
    staging_key: str = ", PRIMARY KEY (tag, ord)"


# -- both: the pipeline's tables (pipeline.py) ------------------------------------------------

CREATE_LEASES = Statement(
    "create_leases",
    "The table of claims made under a stream's leases.",
    """CREATE TABLE {leases} (
        queue_id BIGINT NOT NULL,
        stream {text_key} NOT NULL,
        lease BIGINT NOT NULL,
        row_key BIGINT NOT NULL,
        message_id {text_key} NOT NULL,
        token CHAR(16) NOT NULL,
        PRIMARY KEY (queue_id, stream, lease, row_key)
    ){table_options}""",
    sqlite="""CREATE TABLE {leases} (
        queue_id BIGINT NOT NULL,
        stream TEXT NOT NULL,
        lease BIGINT NOT NULL,
        row_key BIGINT NOT NULL,
        message_id TEXT NOT NULL,
        token CHAR(16) NOT NULL,
        PRIMARY KEY (queue_id, stream, lease, row_key)
    ) WITHOUT ROWID""",
)
CREATE_STREAMS = Statement(
    "create_streams",
    "The table of each stream's last acknowledged lease.",
    """CREATE TABLE {streams} (
        queue_id BIGINT NOT NULL,
        stream {text_key} NOT NULL,
        acked BIGINT NOT NULL,
        updated_at {double} NOT NULL,
        PRIMARY KEY (queue_id, stream)
    ){table_options}""",
    sqlite="""CREATE TABLE {streams} (
        queue_id BIGINT NOT NULL,
        stream TEXT NOT NULL,
        acked BIGINT NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (queue_id, stream)
    ) WITHOUT ROWID""",
)
CREATE_STAGED = Statement(
    "create_staged",
    "The table of staged messages, one row each (replaced by stages in the next version).",
    """CREATE TABLE {staged} (
        queue_id BIGINT NOT NULL,
        sink {text_key} NOT NULL,
        batch BIGINT NOT NULL,
        part INTEGER NOT NULL,
        attempt INTEGER NOT NULL,
        mkey {message_id} NOT NULL,
        PRIMARY KEY (queue_id, sink, batch, mkey)
    ){table_options}""",
    sqlite="""CREATE TABLE {staged} (
        queue_id BIGINT NOT NULL,
        sink TEXT NOT NULL,
        batch BIGINT NOT NULL,
        part INTEGER NOT NULL,
        attempt INTEGER NOT NULL,
        mkey NOT NULL,
        PRIMARY KEY (queue_id, sink, batch, mkey)
    ) WITHOUT ROWID""",
)
CREATE_SINKS = Statement(
    "create_sinks",
    "The table of each sink's last published batch.",
    """CREATE TABLE {sinks} (
        queue_id BIGINT NOT NULL,
        sink {text_key} NOT NULL,
        batch BIGINT NOT NULL,
        committed_at {double} NOT NULL,
        PRIMARY KEY (queue_id, sink)
    ){table_options}""",
    sqlite="""CREATE TABLE {sinks} (
        queue_id BIGINT NOT NULL,
        sink TEXT NOT NULL,
        batch BIGINT NOT NULL,
        committed_at REAL NOT NULL,
        PRIMARY KEY (queue_id, sink)
    ) WITHOUT ROWID""",
)
PIPELINE_TABLES = (CREATE_LEASES, CREATE_STREAMS, CREATE_STAGED, CREATE_SINKS)
CREATE_STAGES = Statement(
    "create_stages",
    "The table of staging task attempts (their tags and the key ranges they wrote).",
    """CREATE TABLE {stages} (
        tag {serial},
        queue_id BIGINT NOT NULL,
        sink {text_key} NOT NULL,
        batch BIGINT NOT NULL,
        part INTEGER NOT NULL,
        attempt INTEGER NOT NULL,
        low BIGINT,
        high BIGINT,
        created_at {double} NOT NULL,
        UNIQUE (queue_id, sink, batch, part, attempt)
    ){table_options}""",
    sqlite="""CREATE TABLE {stages} (
        tag INTEGER PRIMARY KEY AUTOINCREMENT,
        queue_id BIGINT NOT NULL,
        sink TEXT NOT NULL,
        batch BIGINT NOT NULL,
        part INTEGER NOT NULL,
        attempt INTEGER NOT NULL,
        low BIGINT,
        high BIGINT,
        created_at REAL NOT NULL,
        UNIQUE (queue_id, sink, batch, part, attempt)
    )""",
)
ADD_STAGE_COUNT = Statement(
    "add_stage_count",
    "How many rows each stage has staged (its count of staging rows).",
    "ALTER TABLE {stages} ADD COLUMN staged BIGINT NOT NULL DEFAULT 0",
)
# the last count of each deep queue, from which every process estimates its stats between
# counts (estimates.py); `counted_at` NULL: none to use. `edits` counts the changes made to
# the queue that its running totals do not record, so that a count begun before one of
# them is not stored after it
CREATE_COUNTS = Statement(
    "create_counts",
    "The table of deep queues' last counts: their stats then, when and how long it took.",
    """CREATE TABLE {counts} (
        queue_id BIGINT NOT NULL PRIMARY KEY,
        ready_count BIGINT NOT NULL,
        delayed_count BIGINT NOT NULL,
        in_flight_count BIGINT NOT NULL,
        oldest_age {double},
        sent BIGINT NOT NULL,
        received BIGINT NOT NULL,
        deleted BIGINT NOT NULL,
        dead BIGINT NOT NULL,
        expired BIGINT NOT NULL,
        counted_at {double},
        took {double} NOT NULL,
        edits BIGINT NOT NULL DEFAULT 0
    ){table_options}""",
    sqlite="""CREATE TABLE {counts} (
        queue_id INTEGER NOT NULL PRIMARY KEY,
        ready_count INTEGER NOT NULL,
        delayed_count INTEGER NOT NULL,
        in_flight_count INTEGER NOT NULL,
        oldest_age REAL,
        sent INTEGER NOT NULL,
        received INTEGER NOT NULL,
        deleted INTEGER NOT NULL,
        dead INTEGER NOT NULL,
        expired INTEGER NOT NULL,
        counted_at REAL,
        took REAL NOT NULL,
        edits INTEGER NOT NULL DEFAULT 0
    )""",
)
# PostgreSQL and MySQL stage a job's messages beside the queue and publish them with one
# INSERT ... SELECT (pipeline.py); unlogged where the database can: a crash empties it, and
# publishing finds the rows short of the stages' counts and refuses
CREATE_STAGING = Statement(
    "create_staging",
    "The table of messages staged by jobs' tasks until their job publishes them.",
    """CREATE {unlogged}TABLE {staging} (
        tag BIGINT NOT NULL,
        ord BIGINT NOT NULL,
        nprio INTEGER NOT NULL,
        id {message_id} NOT NULL,
        body {blob} NOT NULL,
        attributes TEXT,
        group_id {message_id},
        dedup_id {message_id},
        deadline {double},
        sent_at {double} NOT NULL,
        visible_at {double} NOT NULL,
        compressed SMALLINT NOT NULL{staging_key}
    ){table_options}""",
)
DROP_STAGED = Statement(
    "drop_staged_table",
    "The table of staged messages, dropped.",
    "DROP TABLE {staged}",
)
ADD_TOPIC_SETTINGS = Statement(
    "add_topic_settings",
    "Topics' settings, a JSON string map.",
    "ALTER TABLE {topics} ADD COLUMN settings TEXT",
)
ADD_SUBSCRIPTION_ATTRIBUTES = Statement(
    "add_subscription_attributes",
    "Subscriptions' attributes, a JSON string map.",
    "ALTER TABLE {subscriptions} ADD COLUMN attributes TEXT",
)

# -- SQLite ---------------------------------------------------------------------------------

SQLITE_QUEUED_STAGES = Statement(
    "sqlite_queued_stages",
    "The queues that hold messages staged the old way.",
    "SELECT DISTINCT queue_id FROM {staged}",
)
SQLITE_DROP_STAGED_ROWS = Statement(
    "sqlite_drop_staged_rows",
    "A queue's messages staged the old way, deleted.",
    "DELETE FROM {messages} WHERE visible_at >= 1e15",
)


def _drop_old_staging(ex: Any, sql: Compiler) -> None:
    for (qid,) in ex.rows(sql(SQLITE_QUEUED_STAGES)):
        ex.run(sql(SQLITE_DROP_STAGED_ROWS, int(qid)))
    ex.run(sql(DROP_STAGED))


SQLITE_QUEUE_IDS_ONCE = (
    Statement(
        "sqlite_queues_v5",
        "The queues table again, its ids never used twice.",
        f"CREATE TABLE {{queues_v5}} (id INTEGER PRIMARY KEY AUTOINCREMENT, {QUEUE_COLUMNS})",
    ),
    Statement(
        "sqlite_queues_v5_copy",
        "Every queue copied to the new queues table.",
        "INSERT INTO {queues_v5} SELECT * FROM {queues}",
    ),
    Statement(
        "sqlite_queues_drop_v4",
        "The old queues table, dropped.",
        "DROP TABLE {queues}",
    ),
    Statement(
        "sqlite_queues_v5_renamed",
        "The new queues table, named queues.",
        "ALTER TABLE {queues_v5} RENAME TO {queues}",
    ),
)

SQLITE_MIGRATIONS: list[Step] = [
    (
        Statement(
            "sqlite_create_queues",
            "The queues table.",
            f"CREATE TABLE {{queues}} (id INTEGER PRIMARY KEY, {QUEUE_COLUMNS})",
        ),
        Statement(
            "sqlite_create_dedup",
            "The table of de-duplication keys.",
            """CREATE TABLE {dedup} (
                queue_id INTEGER NOT NULL,
                key TEXT NOT NULL,
                message_id TEXT NOT NULL,
                expires_at REAL NOT NULL,
                PRIMARY KEY (queue_id, key)
            ) WITHOUT ROWID""",
        ),
        Statement(
            "sqlite_create_archive",
            "The archive of deleted, expired and removed messages.",
            """CREATE TABLE {archive} (
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
        ),
        Statement(
            "sqlite_index_archive",
            "The archive's index by queue.",
            "CREATE INDEX {archive_by_queue} ON {archive} (queue, seq)",
        ),
        Statement(
            "sqlite_create_topics",
            "The topics table.",
            "CREATE TABLE {topics} (name TEXT PRIMARY KEY, created_at REAL NOT NULL)",
        ),
        Statement(
            "sqlite_create_subscriptions",
            "The table of topics' subscribed queues.",
            """CREATE TABLE {subscriptions} (
                topic TEXT NOT NULL,
                queue_id INTEGER NOT NULL,
                PRIMARY KEY (topic, queue_id)
            ) WITHOUT ROWID""",
        ),
        Statement(
            "sqlite_create_consumers",
            "The consumer registry.",
            """CREATE TABLE {consumers} (
                id TEXT PRIMARY KEY,
                queue TEXT,
                info TEXT NOT NULL,
                timeout REAL NOT NULL,
                registered_at REAL NOT NULL,
                heartbeat_at REAL NOT NULL
            )""",
        ),
    ),
    # leases, stream positions, staged writes and sink commits (pipeline.py)
    PIPELINE_TABLES,
    # staged writes tag messages by visible_at, one stages row per task attempt; what was
    # staged the old way is dropped (its job can no longer publish it)
    _drop_old_staging,
    (CREATE_STAGES,),
    # queue ids are never used again, so an id a process remembers cannot name another queue
    SQLITE_QUEUE_IDS_ONCE,
    # the columns take the names they have on PostgreSQL and MySQL, so one statement serves
    (
        Statement(
            "sqlite_rename_dedup_key",
            "The de-duplication key column, named as on the servers.",
            "ALTER TABLE {dedup} RENAME COLUMN key TO dkey",
        ),
        Statement(
            "sqlite_rename_archive_queue",
            "The archive's queue column, named as on the servers.",
            "ALTER TABLE {archive} RENAME COLUMN queue TO queue_name",
        ),
        Statement(
            "sqlite_rename_consumers_queue",
            "The consumers' queue column, named as on the servers.",
            "ALTER TABLE {consumers} RENAME COLUMN queue TO queue_name",
        ),
    ),
    # topic settings and subscription attributes (string maps as JSON)
    (ADD_TOPIC_SETTINGS, ADD_SUBSCRIPTION_ATTRIBUTES),
    # each stage counts its rows (SQLite keeps staging in the queue's own table)
    (ADD_STAGE_COUNT,),
    # deep queues' last counts, shared by every process (estimates.py)
    (CREATE_COUNTS,),
]


# -- PostgreSQL and MySQL -------------------------------------------------------------------


def _only_on(dialect: str, statements: Sequence[Statement]) -> Callable[[Any, Compiler], None]:
    """A version whose change one dialect alone makes (the other records the version)."""

    def step(ex: Any, sql: Compiler) -> None:
        if sql.dialect == dialect:
            for statement in statements:
                ex.run(sql(statement))

    return step


# MySQL/MariaDB: delivery order becomes the messages' primary key. InnoDB keeps a table's
# rows in primary-key order, so a claim then reads a queue's head straight from the table:
# no lookup from a secondary index per row, and no deadlocks between claims (which locked
# the order index, then the row) and deletes by seq (the row, then the order index). seq
# keeps a unique index of its own. PostgreSQL keeps its heap and the order index.
CLUSTERED_ORDER = Statement(
    "mysql_clustered_order",
    "Delivery order made the messages' primary key (InnoDB keeps rows in that order).",
    "ALTER TABLE {messages_table} DROP PRIMARY KEY, ADD UNIQUE KEY {messages_seq} (seq),"
    " ADD PRIMARY KEY (queue_id, nprio, seq), DROP INDEX {messages_order}",
)
# MySQL/MariaDB: an index of every queue's messages by the time they become visible, for
# the claims of queues deep in messages in flight (`inflight.py`). `held_at` is NULL for a
# message never received and not delayed, else its visible_at: a virtual column, so the
# index is the only thing stored. MySQL has no partial indexes; its rows under NULL serve
# the messages never received in delivery order, the others ready ones by time. PostgreSQL
# builds partial indexes for deep queues alone instead.
HELD_INDEX = Statement(
    "mysql_held_index",
    "Every message's time to become visible once held, and an index of queues by it.",
    "ALTER TABLE {messages_table} ADD COLUMN held_at {double} AS"
    f" (IF({HELD}, visible_at, NULL)) VIRTUAL,"
    " ADD INDEX {messages_held_index} (queue_id, held_at, nprio, seq)",
)

# PostgreSQL: the share of each page of the messages table that inserts fill. A receive
# rewrites its rows (visible time, receive count, first receipt, token; none indexed), and
# PostgreSQL writes the new version with no index entries (a HOT update) only where it fits
# on the row's own page. At 70, four consumers receiving ten at a time found no room for
# 38% of their rows' new versions, and each of those updates logged the whole row and an
# entry in each of the table's three indexes (about 550 bytes of WAL instead of 120); at 50
# every one was a HOT update (`python -m bench.pgmq`, docs/stores.md).
MESSAGES_FILLFACTOR = 50
POSTGRES_ROOM_FOR_RECEIVES = Statement(
    "postgres_messages_fillfactor",
    "Room on each page of the messages table for receives' new row versions (pages made"
    " from now on).",
    f"ALTER TABLE {{messages_table}} SET (fillfactor = {MESSAGES_FILLFACTOR})",
)

# PostgreSQL: the ids the store makes carry their row's key (server_statements.py's PG_ROW_ID), so
# finding one is a probe of the primary key, and only ids chosen by senders (and rows moved
# from elsewhere, whose ids carry another row's key) are in the unique index of ids. An
# entry in that index was a third of the B-tree records a send wrote to the WAL (about 110
# bytes a message: `python -m bench.pgmq`, docs/benchmarks.md). The rows already stored keep
# their entries (`indexed` true).
POSTGRES_CHOSEN_IDS = (
    Statement(
        "postgres_add_indexed",
        "Whether a message's id is in the index of ids (chosen by a sender, or carrying"
        " another row's key); the store's own ids are not.",
        "ALTER TABLE {messages_table} ADD COLUMN indexed BOOLEAN NOT NULL DEFAULT true",
    ),
    Statement(
        "postgres_index_chosen_ids",
        "The messages' index by id, of the ids in it.",
        "CREATE UNIQUE INDEX {messages_by_chosen_id} ON {messages_table} (id, queue_id)"
        " WHERE indexed",
    ),
    Statement(
        "postgres_drop_id_index",
        "The index of every message's id, dropped.",
        "DROP INDEX {messages_by_id}",
    ),
)

# messages staged in the messages table (hidden at visible_at >= 1e15), which a new way of
# staging leaves its jobs unable to publish
SERVER_DROP_HIDDEN = Statement(
    "server_drop_staged_rows",
    "Messages staged in the messages table, deleted.",
    "DELETE FROM {messages_table} WHERE visible_at >= 1e15",
)

SERVER_MIGRATIONS: list[Step] = [
    (
        Statement(
            "server_create_queues",
            "The queues table.",
            """CREATE TABLE {queues} (
                id {serial},
                name {text_key} NOT NULL UNIQUE,
                attrs TEXT NOT NULL,
                created_at {double} NOT NULL,
                updated_at {double} NOT NULL,
                sent BIGINT NOT NULL DEFAULT 0,
                received BIGINT NOT NULL DEFAULT 0,
                deleted BIGINT NOT NULL DEFAULT 0,
                dead BIGINT NOT NULL DEFAULT 0,
                expired BIGINT NOT NULL DEFAULT 0,
                tokens {double} NOT NULL DEFAULT 0,
                tokens_at {double} NOT NULL DEFAULT 0
            ){table_options}""",
        ),
        Statement(
            "server_create_messages",
            "The messages table, every queue's.",
            """CREATE TABLE {messages_table} (
                seq {serial},
                queue_id BIGINT NOT NULL,
                nprio INTEGER NOT NULL,
                id {message_id} NOT NULL,
                body {blob} NOT NULL,
                attributes TEXT,
                group_id {message_id},
                dedup_id {message_id},
                deadline {double},
                sent_at {double} NOT NULL,
                visible_at {double} NOT NULL,
                receive_count INTEGER NOT NULL DEFAULT 0,
                first_received_at {double},
                version INTEGER NOT NULL DEFAULT 1,
                token CHAR(16),
                source_queue {text_key},
                error TEXT,
                compressed SMALLINT NOT NULL DEFAULT 0
            ){table_options}{message_options}""",
        ),
        Statement(
            "server_index_order",
            "The messages' index in delivery order, queue by queue.",
            "CREATE INDEX {messages_order} ON {messages_table} (queue_id, nprio, seq)",
        ),
        # id first: only the order index may serve "this queue's messages" (a planner with
        # stale statistics would otherwise scan a queue by id and sort it)
        Statement(
            "server_index_ids",
            "The messages' index by id.",
            "CREATE UNIQUE INDEX {messages_by_id} ON {messages_table} (id, queue_id)",
        ),
        Statement(
            "server_index_deadlines",
            "The messages' index by deadline.",
            "CREATE INDEX {messages_by_deadline} ON {messages_table} (deadline, queue_id)"
            "{partial_where}",
        ),
        Statement(
            "server_create_dedup",
            "The table of de-duplication keys.",
            """CREATE TABLE {dedup} (
                queue_id BIGINT NOT NULL,
                dkey {text_key} NOT NULL,
                message_id {message_id} NOT NULL,
                expires_at {double} NOT NULL,
                PRIMARY KEY (queue_id, dkey)
            ){table_options}""",
        ),
        Statement(
            "server_create_archive",
            "The archive of deleted, expired and removed messages.",
            """CREATE TABLE {archive} (
                seq {serial},
                queue_name {text_key} NOT NULL,
                id {message_id} NOT NULL,
                body {blob} NOT NULL,
                attributes TEXT,
                group_id {message_id},
                priority INTEGER NOT NULL,
                sent_at {double} NOT NULL,
                first_received_at {double},
                removed_at {double} NOT NULL,
                receive_count INTEGER NOT NULL,
                outcome VARCHAR(16) NOT NULL,
                compressed SMALLINT NOT NULL DEFAULT 0
            ){table_options}""",
        ),
        Statement(
            "server_index_archive",
            "The archive's index by queue.",
            "CREATE INDEX {archive_by_queue} ON {archive} (queue_name, seq)",
        ),
        Statement(
            "server_create_topics",
            "The topics table.",
            "CREATE TABLE {topics} (name {text_key} NOT NULL PRIMARY KEY,"
            " created_at {double} NOT NULL){table_options}",
        ),
        Statement(
            "server_create_subscriptions",
            "The table of topics' subscribed queues.",
            """CREATE TABLE {subscriptions} (
                topic {text_key} NOT NULL,
                queue_id BIGINT NOT NULL,
                PRIMARY KEY (topic, queue_id)
            ){table_options}""",
        ),
        Statement(
            "server_create_consumers",
            "The consumer registry.",
            """CREATE TABLE {consumers} (
                id {text_key} NOT NULL PRIMARY KEY,
                queue_name {text_key},
                info TEXT NOT NULL,
                timeout {double} NOT NULL,
                registered_at {double} NOT NULL,
                heartbeat_at {double} NOT NULL
            ){table_options}""",
        ),
    ),
    # processes holding long polls; senders notify only while one is alive
    (
        Statement(
            "server_create_listeners",
            "The table of processes listening for sends, and when each last beat.",
            """CREATE TABLE {listeners} (
                id {text_key} NOT NULL PRIMARY KEY,
                seen_at {double} NOT NULL
            ){table_options}""",
        ),
    ),
    # leases, stream positions, staged writes and sink commits (pipeline.py)
    PIPELINE_TABLES,
    # staged writes tag messages by visible_at, one stages row per task attempt; what was
    # staged the old way is dropped (its job can no longer publish it)
    (
        SERVER_DROP_HIDDEN,
        DROP_STAGED,
        CREATE_STAGES,
    ),
    _only_on("mysql", [CLUSTERED_ORDER]),
    # topic settings and subscription attributes (string maps as JSON); topic names as
    # long as SNS allows
    (
        ADD_TOPIC_SETTINGS,
        ADD_SUBSCRIPTION_ATTRIBUTES,
        Statement(
            "server_long_topic_names",
            "Topic names as long as SNS allows.",
            "ALTER TABLE {topics} ALTER COLUMN name TYPE {long_key}",
            mysql="ALTER TABLE {topics} MODIFY name {long_key} NOT NULL",
        ),
        Statement(
            "server_long_subscription_topics",
            "Subscriptions' topic names as long as SNS allows.",
            "ALTER TABLE {subscriptions} ALTER COLUMN topic TYPE {long_key}",
            mysql="ALTER TABLE {subscriptions} MODIFY topic {long_key} NOT NULL",
        ),
    ),
    _only_on("mysql", [HELD_INDEX]),
    # staged messages wait in a table of their own, counted by their stage; what was staged
    # in the messages table is dropped (its job can no longer publish it)
    (
        SERVER_DROP_HIDDEN,
        Statement(
            "server_drop_old_stages",
            "The stages of those messages.",
            "DELETE FROM {stages}",
        ),
        ADD_STAGE_COUNT,
        CREATE_STAGING,
    ),
    _only_on("postgresql", [POSTGRES_ROOM_FOR_RECEIVES]),
    # deep queues' last counts, shared by every process (estimates.py)
    (CREATE_COUNTS,),
    _only_on("postgresql", POSTGRES_CHOSEN_IDS),
]


def catalog() -> list[Statement]:
    """Every statement of the schema's versions."""
    found: list[Statement] = []
    for step in (*SQLITE_MIGRATIONS, *SERVER_MIGRATIONS):
        if not callable(step):
            found += step
    found += [
        SQLITE_QUEUED_STAGES, SQLITE_DROP_STAGED_ROWS, *SQLITE_QUEUE_IDS_ONCE, CLUSTERED_ORDER,
        HELD_INDEX, POSTGRES_ROOM_FOR_RECEIVES, *POSTGRES_CHOSEN_IDS,
    ]  # fmt: skip
    return list(dict.fromkeys(found))
