"""The statements PostgreSQL and MySQL (or MariaDB) run alone: every queue's messages in one
table, `seq` the row key, then each database's own. Named once, as every statement
(`statements.py`), on whose conditions for a ready or held row they build."""

from __future__ import annotations

from .statement import Statement
from .statements import CLAIM_SET, FRESH, HELD, READY

# a message row's columns, as rows.MessageRow reads them
SERVER_COLUMNS = (
    "seq, id, body, attributes, group_id, dedup_id, -nprio, deadline, sent_at, visible_at,"
    " receive_count, first_received_at, version, source_queue, error, compressed"
)
# what a send writes, the queue id first and shared by a statement's rows (`ServerDialect`)
SERVER_SEND_COLUMNS = (
    "queue_id", "nprio", "id", "body", "attributes", "group_id", "dedup_id", "deadline",
    "sent_at", "visible_at", "compressed",
)  # fmt: skip
# ... and what else a row moved from elsewhere keeps
SERVER_ALL_COLUMNS = (
    *SERVER_SEND_COLUMNS, "receive_count", "first_received_at", "version", "source_queue",
    "error",
)  # fmt: skip
_SEND_INTO = f"INSERT INTO {{messages}} ({', '.join(SERVER_SEND_COLUMNS)})"
# a staged message's columns in the staging table: the stage's tag, the row's number in it,
# and what a send writes but the queue (publishing sets it, and the times)
STAGING_COLUMNS = ("tag", "ord", *SERVER_SEND_COLUMNS[1:])
SERVER_STAGING_ROWS = Statement(
    "server_staging_rows",
    "A stage's messages written to the staging table, numbered from a start.",
    f"INSERT INTO {{staging}} ({', '.join(STAGING_COLUMNS)}) VALUES (:tag, :start + #,"
    f" {', '.join(f':{c}*' for c in STAGING_COLUMNS[2:])})*",
)
SERVER_COUNT_STAGING = Statement(
    "server_count_staging",
    "How many rows stages hold in the staging table.",
    "SELECT count(*) FROM {staging} WHERE tag IN (:tags*)",
)
_PUBLISH_INTO = (
    f"INTO {{messages}} ({', '.join(SERVER_SEND_COLUMNS)}) SELECT :qid, nprio, id, body,"
    " attributes, group_id, dedup_id, deadline, :now, :now, compressed FROM {staging}"
    " WHERE tag IN (:tags*)"
)
SERVER_PUBLISH_STAGING = Statement(
    "server_publish_staging",
    "Stages' messages copied into the queue as sent now, skipping ids the queue holds (and"
    " a second row of one id).",
    f"INSERT {_PUBLISH_INTO} ON CONFLICT DO NOTHING",
    # in the stages' order (the staging table's primary key: no sort), which also keeps
    # the statement's effect one order for a statement-based binary log
    mysql=f"INSERT IGNORE {_PUBLISH_INTO} ORDER BY tag, ord",
)
POSTGRES_PUBLISH_PLAIN = Statement(
    "postgres_publish_plain",
    "Stages' messages copied into the queue as sent now, failing on an id the queue holds"
    " (a third cheaper than skipping them, for the imports that hold none).",
    f"INSERT {_PUBLISH_INTO}",
)
SERVER_DROP_STAGING = Statement(
    "server_drop_staging",
    "Stages' rows in the staging table, deleted.",
    "DELETE FROM {staging} WHERE tag IN (:tags*)",
)
# one row of a multi-row insert of rows as sent (`ServerDialect.send_row`)
_SENT_ROW = f"(:qid, {', '.join(f':{c}*' for c in SERVER_SEND_COLUMNS[1:])})*"
_ONE_SENT = f"(:qid, {', '.join(f':{c}' for c in SERVER_SEND_COLUMNS[1:])})"
_ONE_MOVED = f"(:qid, {', '.join(f':{c}' for c in SERVER_ALL_COLUMNS[1:])})"

SERVER_CREATE_SCHEMA = Statement(
    "server_create_schema",
    "The table holding the schema's version, made where it is missing.",
    "CREATE TABLE IF NOT EXISTS {schema} (version INTEGER NOT NULL){table_options}",
)
SERVER_SCHEMA_VERSION = Statement(
    "server_schema_version",
    "The schema's version.",
    "SELECT version FROM {schema}",
)
SERVER_FIRST_VERSION = Statement(
    "server_first_version",
    "The schema's version row, at version 0.",
    "INSERT INTO {schema} (version) VALUES (0)",
)
SERVER_SET_VERSION = Statement(
    "server_set_version",
    "The schema's new version.",
    "UPDATE {schema} SET version = :version",
)
SERVER_DROP_QUEUE = Statement(
    "server_drop_queue",
    "A deleted queue's messages, deleted.",
    "DELETE FROM {messages} WHERE queue_id = :qid",
)
SERVER_FIND = Statement(
    "server_find",
    "A message's key, by its queue and id (on PostgreSQL, an id chosen by a sender).",
    "SELECT seq FROM {messages} WHERE id = :id AND queue_id = :qid",
    postgresql="SELECT seq FROM {messages} WHERE indexed AND id = :id AND queue_id = :qid",
)
SERVER_ROWS_AHEAD = Statement(
    "server_rows_ahead",
    "How many of a queue's messages there are, counted up to a limit.",
    "SELECT count(*) FROM (SELECT 1 FROM {messages} WHERE queue_id = :qid LIMIT :rows) a",
)
SERVER_ROWS_AHEAD_OF = Statement(
    "server_rows_ahead_of",
    "How many of a queue's messages lie ahead of a place in delivery order, counted up to a limit.",
    "SELECT count(*) FROM (SELECT 1 FROM {messages} WHERE queue_id = :qid"
    " AND (nprio, seq) < (:nprio, :seq) LIMIT :rows) a",
)

# -- MySQL and MariaDB ---------------------------------------------------------------------

MYSQL_READ_ONLY = Statement(
    "mysql_read_only",
    "Whether the server takes no writes (a replica, or a primary set read-only).",
    "SELECT @@read_only",
)
MYSQL_LOCK_WAITS = Statement(
    "mysql_lock_waits",
    "A session's waits for row locks (InnoDB's) and table locks (LOCK TABLES, schema"
    " changes) bounded to so many seconds.",
    "SET SESSION innodb_lock_wait_timeout = :seconds, lock_wait_timeout = :seconds",
)
MYSQL_VERSION = Statement(
    "mysql_version",
    "The server's version (MariaDB says so in it).",
    "SELECT VERSION()",
)
MYSQL_LOCK_SCHEMA = Statement(
    "mysql_lock_schema",
    "The lock that serialises migrations, waited for up to a minute.",
    "SELECT GET_LOCK(:name, 60)",
)
MYSQL_UNLOCK_SCHEMA = Statement(
    "mysql_unlock_schema",
    "The lock that serialises migrations, released.",
    "SELECT RELEASE_LOCK(:name)",
)
MYSQL_SENT_ROWS = Statement(
    "mysql_sent_rows",
    "Rows as sent, none of whose ids the queue can hold, inserted.",
    f"{_SEND_INTO} VALUES {_SENT_ROW}",
)
MYSQL_NEW_SENT_ROWS = Statement(
    "mysql_new_sent_rows",
    "Rows as sent, inserted where the queue holds none of their ids.",
    f"INSERT IGNORE {_SEND_INTO[len('INSERT ') :]} VALUES {_SENT_ROW}",
)
MYSQL_BARE_ROWS = Statement(
    "mysql_bare_rows",
    "Bodies inserted, sharing queue, priority and times (the driver escapes what they share once).",
    "INSERT INTO {messages} (queue_id, nprio, id, body, sent_at, visible_at)"
    " VALUES (:qid, :nprio, :id*, :body*, :now, :visible_at)*",
)
MYSQL_NEW_SENT_ROW = Statement(
    "mysql_new_sent_row",
    "A row as sent, inserted unless the queue holds its id.",
    f"INSERT IGNORE {_SEND_INTO[len('INSERT ') :]} VALUES {_ONE_SENT}",
)
MYSQL_NEW_MOVED_ROW = Statement(
    "mysql_new_moved_row",
    "A row moved from elsewhere (its receives and history kept), inserted unless the queue"
    " holds its id.",
    f"INSERT IGNORE INTO {{messages}} ({', '.join(SERVER_ALL_COLUMNS)}) VALUES {_ONE_MOVED}",
)
MYSQL_CLAIM_PICK = Statement(
    "mysql_claim_pick",
    "A queue's first ready messages in delivery order, locked, others' locks skipped.",
    f"SELECT {{columns}} FROM {{messages}} WHERE queue_id = :qid AND {READY}"
    " ORDER BY nprio, seq LIMIT :limit FOR UPDATE SKIP LOCKED",
)
MYSQL_CLAIM_SEQS = Statement(
    "mysql_claim_seqs",
    "Messages, by key, claimed under a receive's token.",
    f"UPDATE {{messages}} SET {CLAIM_SET} WHERE seq IN (:keys*)",
)


def _mysql_deep(columns: str, where: str, locked: str) -> str:
    """The first rows of a deep queue meeting `where`: the fresh ones (held_at NULL) in
    delivery order and the held ones visible now, those visible first, both read from the
    held_at index (`inflight.py`); merged in delivery order by the caller."""
    part = (
        f"SELECT {columns} FROM {{messages}} FORCE INDEX ({{messages_held_index}})"
        f" WHERE queue_id = :qid AND {where} AND held_at"
    )
    return (
        f"({part} IS NULL ORDER BY nprio, seq LIMIT :limit{locked}) UNION ALL"
        f" ({part} <= :now ORDER BY held_at, nprio, seq LIMIT :limit{locked})"
    )


_WALKED = "seq, -nprio, group_id, visible_at, receive_count, deadline, sent_at"
MYSQL_DEEP_CLAIM_PICK = Statement(
    "mysql_deep_claim_pick",
    "A deep queue's first ready messages, from its held_at index, locked.",
    _mysql_deep("{columns}", READY, " FOR UPDATE SKIP LOCKED"),
)
MYSQL_DEEP_WALK = Statement(
    "mysql_deep_walk",
    "A page of a deep queue's visible rows after a place in delivery order.",
    _mysql_deep(_WALKED, "visible_at <= :now AND {after}", ""),
)
MYSQL_DEEP_WALK_LOCKING = Statement(
    "mysql_deep_walk_locking",
    "A page of a deep queue's visible rows after a place in delivery order, locked, others'"
    " locks skipped.",
    _mysql_deep(_WALKED, "visible_at <= :now AND {after}", " FOR UPDATE SKIP LOCKED"),
)
MARIADB_DELETE_HELD = Statement(
    "mariadb_delete_held",
    "Messages, by key, that their claim's token still holds, deleted; their keys.",
    "DELETE FROM {messages} WHERE queue_id = :qid AND token = :token AND seq IN (:keys*)"
    " RETURNING seq",
)
MYSQL_HELD = Statement(
    "mysql_held",
    "The keys of messages that their claim's token still holds, locked for a delete.",
    "SELECT seq FROM {messages} WHERE queue_id = :qid AND token = :token AND seq IN (:keys*)"
    " FOR UPDATE",
)
MYSQL_DELETE_SEQS = Statement(
    "mysql_delete_seqs",
    "Messages, by key alone, deleted.",
    "DELETE FROM {messages} WHERE seq IN (:keys*)",
)


# -- PostgreSQL ----------------------------------------------------------------------------

POSTGRES_LOCK_SCHEMA = Statement(
    "postgres_lock_schema",
    "The lock that serialises migrations, held until the transaction ends.",
    "SELECT pg_advisory_xact_lock(:key)",
)
POSTGRES_AUTOVACUUM = Statement(
    "postgres_autovacuum",
    "Whether the server runs autovacuum.",
    "SELECT current_setting('autovacuum')",
)
POSTGRES_SESSION_SETTINGS = Statement(
    "postgres_session_settings",
    "The store's planner settings and lock timeout for the rest of the session (set after"
    " connecting, not as startup options, which a connection pooler such as PgBouncer"
    " refuses).",
    "SELECT set_config('enable_bitmapscan', 'off', false), set_config('enable_sort', 'off',"
    " false), set_config('jit', 'off', false), set_config('plan_cache_mode',"
    " 'force_generic_plan', false), set_config('lock_timeout', :lock_timeout, false)",
)
POSTGRES_ANY_LISTENER = Statement(
    "postgres_any_listener",
    "Whether any process listening for sends beat since a time.",
    "SELECT 1 FROM {listeners} WHERE seen_at > :since LIMIT 1",
)
POSTGRES_LISTENER_BEAT = Statement(
    "postgres_listener_beat",
    "A listening process's beat.",
    "INSERT INTO {listeners} (id, seen_at) VALUES (:id, :now) ON CONFLICT (id) DO UPDATE SET"
    " seen_at = excluded.seen_at",
)
POSTGRES_LISTENER_GONE = Statement(
    "postgres_listener_gone",
    "A process that stops listening, struck off.",
    "DELETE FROM {listeners} WHERE id = :id",
)
POSTGRES_LISTEN = Statement(
    "postgres_listen",
    "Notifications on the store's channel, listened for.",
    "LISTEN {channel}",
)
POSTGRES_NOTIFY = Statement(
    "postgres_notify",
    "Listening processes told of a write to a queue, when the transaction commits.",
    "SELECT pg_notify(:channel, :queue)",
)


# PostgreSQL: the ids the store makes carry their row's key (`conveyor.ids.row_id`), made by
# the insert from the key the sequence gives the row and 59 random bits; only ids chosen by
# senders (and rows moved from elsewhere) are `indexed`, in the unique index of ids
_PG_CHOSEN_CONFLICT = "ON CONFLICT (queue_id, id) WHERE indexed"
# `conveyor.ids.row_id(s, r)` in SQL: s the row's key, r the random bits
PG_ROW_ID = (
    "lpad(to_hex(s >> 31), 8, '0') || '-' || lpad(to_hex((s >> 15) & 65535), 4, '0') || '-8'"
    " || lpad(to_hex((s >> 3) & 4095), 3, '0') || '-'"
    " || to_hex(32768 | ((s & 7) << 11) | ((r >> 48) & 2047)) || '-'"
    " || lpad(to_hex(r & 281474976710655), 12, '0')"
)
_MADE_COLUMNS = ", ".join(c for c in SERVER_SEND_COLUMNS if c != "id")


def _pg_notifying(
    name: str, doc: str, insert: str, returned: str, what: str, binary: bool
) -> dict[str, Statement]:
    """An insert of message rows returning the columns `returned` (`what` they are) as it
    is (`plain`), and with the listening processes notified in the same statement
    (`notify`)."""
    notified = f"SELECT {returned} FROM ins, (SELECT pg_notify(:channel, :queue)) n"
    return {
        "plain": Statement(
            name, f"{doc}; {what}.", f"{insert} RETURNING {returned}", binary=binary
        ),
        "notify": Statement(
            f"{name}_notify",
            f"{doc}, listening processes notified; {what}.",
            f"WITH ins AS ({insert} RETURNING {returned}) {notified}",
            binary=binary,
        ),
    }


def _pg_made(name: str, doc: str, source: str, columns: str, binary: bool) -> dict[str, Statement]:
    """An insert of message rows whose ids the store makes (`PG_ROW_ID`): `source` gives a
    row's random bits as r and its other values under `columns`; the key and id of each."""
    insert = (
        f"INSERT INTO {{messages}} (seq, indexed, id, {_MADE_COLUMNS}) SELECT s, false,"
        f" {PG_ROW_ID}, {columns} FROM (SELECT nextval('{{messages_serial}}') AS s, *"
        f" FROM {source}) t"
    )
    return _pg_notifying(name, doc, insert, "seq, id", "the key and id of each", binary)


POSTGRES_MADE_PLAIN_ROWS = _pg_made(
    "postgres_made_plain_rows",
    "Rows as sent with no options, their ids made from their keys, inserted",
    "(VALUES (:r*::int8, :body*::bytea, :sent_at*::float8, :visible_at*::float8)*)"
    " AS v(r, b, sa, va)",
    "(:qid)::bigint, 0, b, NULL, NULL, NULL, NULL, sa, va, 0",
    binary=False,
)
POSTGRES_MADE_ARRAY_ROWS = _pg_made(
    "postgres_made_array_rows",
    "Rows as sent, one array a column, their ids made from their keys, inserted",
    "unnest(:qids::bigint[], :nprios::int[], :rands::int8[], :bodies::bytea[],"
    " :attributes::text[], :group_ids::text[], :dedup_ids::text[], :deadlines::float8[],"
    " :sent_ats::float8[], :visible_ats::float8[], :compressed::smallint[])"
    " AS u(q, p, r, b, a, g, d, dl, sa, va, c)",
    "q, p, b, a, g, d, dl, sa, va, c",
    binary=True,
)
POSTGRES_MADE_SINCE = Statement(
    "postgres_made_since",
    "The ids of a queue's rows with ids the store made, keyed after a floor, that end in"
    " these random digits (what an insert whose answer was lost stored).",
    "SELECT id FROM {messages} WHERE queue_id = :qid AND seq > :floor AND NOT indexed"
    " AND right(id, 12) = ANY(:tails::text[])",
)
POSTGRES_AT_HOMES = Statement(
    "postgres_at_homes",
    "Of these ids the store made, those a queue holds at the keys they carry.",
    "SELECT id FROM {messages} WHERE seq = ANY(:seqs::int8[]) AND {key_scope}"
    " AND id = ANY(:ids::text[])",
)
POSTGRES_FIND_MADE = Statement(
    "postgres_find_made",
    "A message's key, by its queue, its id and the key the id carries.",
    "SELECT seq FROM {messages} WHERE seq = :seq AND {key_scope} AND id = :id",
)


def _pg_chosen(name: str, doc: str, insert: str, binary: bool) -> dict[str, Statement]:
    """An insert of message rows with ids chosen by senders, rows whose id the queue holds
    skipped; the ids inserted."""
    insert = f"{insert} {_PG_CHOSEN_CONFLICT} DO NOTHING"
    doc = f"{doc}, skipping ids the queue holds"
    return _pg_notifying(name, doc, insert, "id", "the ids inserted", binary)


POSTGRES_PLAIN_ROWS = _pg_chosen(
    "postgres_plain_rows",
    "Rows as sent with no options (no priority, attributes, group, deadline or compression),"
    " five values a row, inserted",
    f"{_SEND_INTO} VALUES (:qid, 0, :id*, :body*, NULL, NULL, NULL, NULL, :sent_at*,"
    " :visible_at*, 0)*",
    binary=False,
)
# one array per column: the same statement (prepared once) for any number of rows; binary
# parameters, so the arrays cross without text quoting and escaping
_ARRAYS = (
    "unnest(:qids::bigint[], :nprios::int[], :ids::text[], :bodies::bytea[],"
    " :attributes::text[], :group_ids::text[], :dedup_ids::text[], :deadlines::float8[],"
    " :sent_ats::float8[], :visible_ats::float8[], :compressed::smallint[])"
)
POSTGRES_ARRAY_ROWS = _pg_chosen(
    "postgres_array_rows",
    "Rows as sent, one array a column, inserted",
    f"{_SEND_INTO} SELECT * FROM {_ARRAYS}",
    binary=True,
)
POSTGRES_KEYED_ROWS = Statement(
    "postgres_keyed_rows",
    "Rows as sent, one array a column, inserted where the queue holds none of their ids;"
    " the key and id of each inserted.",
    f"{_SEND_INTO} SELECT * FROM {_ARRAYS} {_PG_CHOSEN_CONFLICT} DO NOTHING RETURNING seq, id",
    binary=True,
)
POSTGRES_NEW_SENT_ROW = Statement(
    "postgres_new_sent_row",
    "A row as sent, inserted unless the queue holds its id; its key.",
    f"{_SEND_INTO} VALUES {_ONE_SENT} {_PG_CHOSEN_CONFLICT} DO NOTHING RETURNING seq",
)
POSTGRES_NEW_MOVED_ROW = Statement(
    "postgres_new_moved_row",
    "A row moved from elsewhere (its receives and history kept), inserted unless the queue"
    " holds its id; its key.",
    f"INSERT INTO {{messages}} ({', '.join(SERVER_ALL_COLUMNS)}) VALUES {_ONE_MOVED}"
    f" {_PG_CHOSEN_CONFLICT} DO NOTHING RETURNING seq",
)
POSTGRES_RESERVE_SEQS = Statement(
    "postgres_reserve_seqs",
    "Keys for rows to come, taken from the messages table's sequence.",
    "SELECT nextval(pg_get_serial_sequence(:table, 'seq')) FROM generate_series(1, :n)",
)
POSTGRES_COPY_ROWS = Statement(
    "postgres_copy_rows",
    "Rows as sent with their keys, copied in (binary COPY).",
    f"COPY {{messages}} (seq, {', '.join(SERVER_SEND_COLUMNS)}) FROM STDIN (FORMAT BINARY)",
)
POSTGRES_COPY_STAGING = Statement(
    "postgres_copy_staging",
    "A stage's messages copied to the staging table (binary COPY).",
    f"COPY {{staging}} ({', '.join(STAGING_COLUMNS)}) FROM STDIN (FORMAT BINARY)",
)
POSTGRES_FIND_MANY = Statement(
    "postgres_find_many",
    "The key and visible time of a queue's messages with these ids: per id, a probe of the"
    " key it carries (where the store made it) and of the index of ids chosen by senders,"
    " whatever the statistics say.",
    "SELECT m.seq, m.visible_at FROM unnest(:ids::text[], :seqs::int8[]) AS x(id, s)"
    " CROSS JOIN LATERAL (SELECT seq, visible_at FROM {messages} WHERE seq = x.s AND"
    " {key_scope} AND id = x.id UNION ALL SELECT seq, visible_at FROM {messages}"
    " WHERE indexed AND id = x.id AND {key_scope} LIMIT 1) m",
)
# a claim's changes to the rows of an UPDATE ... FROM, and the claimed rows it returns
_PG_CLAIM_SET = (
    "visible_at = CASE WHEN m.deadline > :cut_from AND m.deadline < :until THEN m.deadline"
    " ELSE :until END, receive_count = m.receive_count + 1,"
    " first_received_at = coalesce(m.first_received_at, :now), version = m.version + 1,"
    " token = :token"
)
_PG_CLAIMED = SERVER_COLUMNS.replace("-nprio", "-m.nprio").replace("seq, ", "m.seq, ", 1)
_PG_READY_CLAIM = (
    f"UPDATE {{messages}} m SET {_PG_CLAIM_SET} FROM (SELECT seq FROM {{messages}}"
    f" WHERE queue_id = :qid AND {READY} ORDER BY nprio, seq LIMIT :limit"
    " FOR UPDATE SKIP LOCKED) c WHERE m.seq = c.seq"
)
POSTGRES_CLAIM_READY = Statement(
    "postgres_claim_ready",
    "A queue's first ready messages claimed, others' locks skipped.",
    f"{_PG_READY_CLAIM} RETURNING {_PG_CLAIMED}",
)
POSTGRES_LEASE_CLAIM = Statement(
    "postgres_lease_claim",
    "A queue's first ready messages claimed and their claims recorded under a lease.",
    f"WITH claimed AS ({_PG_READY_CLAIM} RETURNING m.seq, m.id) INSERT INTO {{leases}}"
    " (queue_id, stream, lease, row_key, message_id, token) SELECT :qid, :stream, :lease,"
    " seq, id, :token FROM claimed ON CONFLICT (queue_id, stream, lease, row_key)"
    " DO UPDATE SET message_id = excluded.message_id, token = excluded.token",
)
POSTGRES_CLAIM_KEYS = Statement(
    "postgres_claim_keys",
    "Messages, by key, claimed under a receive's token.",
    f"UPDATE {{messages}} m SET {_PG_CLAIM_SET} WHERE m.queue_id + 0 = :qid"
    f" AND m.seq = ANY(:keys::bigint[]) RETURNING {_PG_CLAIMED}",
)
POSTGRES_DELETE_HELD = Statement(
    "postgres_delete_held",
    "Messages, by key, that their claim's token still holds, deleted; their keys.",
    "DELETE FROM {messages} WHERE queue_id + 0 = :qid AND token = :token"
    " AND seq = ANY(:keys::bigint[]) RETURNING seq",
)


def _pg_deep(where: str, locked: str) -> str:
    """CTEs f and h: the first fresh rows of an indexed queue in delivery order and the
    held ones visible first, `where` added to both; c: the first of both."""
    return (
        f"WITH f AS (SELECT seq, nprio FROM {{messages}} WHERE {{scope}} AND {FRESH}"
        f" AND {where} ORDER BY nprio, seq LIMIT :limit{locked}), h AS (SELECT seq, nprio"
        f" FROM {{messages}} WHERE {{scope}} AND {HELD} AND {where}"
        f" ORDER BY visible_at, nprio, seq LIMIT :limit{locked}),"
        " c AS (SELECT seq FROM (SELECT * FROM f UNION ALL SELECT * FROM h) u"
        " ORDER BY nprio, seq LIMIT :limit)"
    )


POSTGRES_DEEP_CLAIM = Statement(
    "postgres_deep_claim",
    "An indexed queue's first ready messages claimed, read from its two partial indexes.",
    f"{_pg_deep(READY, ' FOR UPDATE SKIP LOCKED')} UPDATE {{messages}} m SET {_PG_CLAIM_SET}"
    f" FROM c WHERE m.seq = c.seq RETURNING {_PG_CLAIMED}",
)
_PG_DEEP_WALK = (
    " SELECT seq, -nprio, group_id, visible_at, receive_count, deadline, sent_at"
    " FROM {messages} WHERE seq IN (SELECT seq FROM c) ORDER BY nprio, seq"
)
POSTGRES_DEEP_WALK = Statement(
    "postgres_deep_walk",
    "A page of an indexed queue's visible rows after a place in delivery order.",
    f"{_pg_deep('visible_at <= :now AND {after}', '')}{_PG_DEEP_WALK}",
)
POSTGRES_DEEP_WALK_LOCKING = Statement(
    "postgres_deep_walk_locking",
    "A page of an indexed queue's visible rows after a place in delivery order, locked,"
    " others' locks skipped.",
    f"{_pg_deep('visible_at <= :now AND {after}', ' FOR UPDATE SKIP LOCKED')}{_PG_DEEP_WALK}",
)
POSTGRES_HELD_INDEXES = (
    Statement(
        "postgres_index_fresh",
        "A deep queue's index of its fresh rows in delivery order, built without blocking writers.",
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {{fresh_index}} ON {{messages}} (nprio, seq)"
        f" WHERE {{scope}} AND {FRESH}",
    ),
    Statement(
        "postgres_index_held",
        "A deep queue's index of its held rows by when they become visible, built without"
        " blocking writers.",
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {{held_index}} ON {{messages}}"
        f" (visible_at, nprio, seq) WHERE {{scope}} AND {HELD}",
    ),
)
POSTGRES_HELD_INDEXES_NOW = (
    Statement(
        "postgres_index_fresh_now",
        "A new queue's index of its fresh rows in delivery order (every queue indexed).",
        f"CREATE INDEX IF NOT EXISTS {{fresh_index}} ON {{messages}} (nprio, seq)"
        f" WHERE {{scope}} AND {FRESH}",
    ),
    Statement(
        "postgres_index_held_now",
        "A new queue's index of its held rows by when they become visible (every queue indexed).",
        f"CREATE INDEX IF NOT EXISTS {{held_index}} ON {{messages}} (visible_at, nprio, seq)"
        f" WHERE {{scope}} AND {HELD}",
    ),
)
_VALID_OF_TWO = (
    "SELECT count(*) FROM pg_index WHERE indisvalid AND indexrelid IN"
    " (to_regclass(:fresh), to_regclass(:held))"
)
POSTGRES_VALID_INDEXES = Statement(
    "postgres_valid_indexes",
    "How many of two indexes, by name, exist and are valid.",
    _VALID_OF_TWO,
)
POSTGRES_INDEXES_EXIST = Statement(
    "postgres_indexes_exist",
    "Which of two indexes, by name, exist.",
    "SELECT to_regclass(:fresh), to_regclass(:held)",
)
POSTGRES_LOCK_HELD_INDEXES = Statement(
    "postgres_lock_held_indexes",
    "The lock that lets one process at a time build or drop a queue's partial indexes, held"
    " until the session ends, if it is free.",
    "SELECT pg_try_advisory_lock(:space, :qid)",
)
POSTGRES_STILL_DEEP = Statement(
    "postgres_still_deep",
    "How many of a deep queue's two indexes are valid, and how many of its messages are in"
    " flight or delayed (up to :rows, read from its index of held rows).",
    f"SELECT ({_VALID_OF_TWO}), (SELECT count(*) FROM (SELECT 1 FROM {{messages}}"
    f" WHERE {{scope}} AND {HELD} AND visible_at > :now LIMIT :rows) x)",
)
POSTGRES_DROP_HELD_INDEXES = (
    Statement(
        "postgres_drop_fresh_index",
        "A deleted or shallow queue's index of fresh rows, dropped without blocking writers.",
        "DROP INDEX CONCURRENTLY IF EXISTS {fresh_index}",
    ),
    Statement(
        "postgres_drop_held_index",
        "A deleted or shallow queue's index of held rows, dropped without blocking writers.",
        "DROP INDEX CONCURRENTLY IF EXISTS {held_index}",
    ),
)
