"""Every statement the SQL stores run, named once (see `statement.py` for how one is written
and compiled).

Slots every dialect fills (`Dialect.slot_names`, `Dialect.slot_words`): the tables
``{queues}``, ``{dedup}``, ``{archive}``, ``{topics}``, ``{subscriptions}``,
``{consumers}``, ``{leases}``, ``{streams}``, ``{stages}``, ``{sinks}``; for one queue,
``{messages}`` (its table: SQLite's own for the queue, the servers' shared one) and the
conditions that keep a statement to its rows: ``{scope}`` (for a walk of the queue),
``{key_scope}`` (for rows found by key), ``{id_scope}`` (by message id); the row key
``{key}``, the delivery order ``{order}``, a message row's columns ``{columns}`` (as
`rows.MessageRow` reads them) and its priority ``{priority}``; ``{after}``, the rows
after a place in delivery order (parameters `Dialect.after_values`); ``{for_update}``
and ``{skip_locked}``, row locks where the database has them (empty in SQLite). SQLite
adds its per-queue indexes (``{fresh_index}``, ``{held_index}``, ``{by_id_index}``,
``{by_deadline_index}``), PostgreSQL a deep queue's two indexes and its ``{channel}``,
MySQL the ``{messages_held_index}`` its deep claims force.

Sections run from what every store runs to what SQLite runs alone; a statement a database
words its own way carries that text beside the common one (`Statement.mysql`). The bulk
access's statements are in `pipeline_statements.py`, those PostgreSQL and MySQL run alone in
`server_statements.py` (`catalog()` gives all three), the schema's versions in `schema.py`.
"""

from __future__ import annotations

from .rows import ARCHIVE_COLUMNS, CONSUMER_COLUMNS
from .statement import Statement

# a row never received and not delayed is "fresh": ready (retention and deadline aside);
# any other is "held", ready once its visible_at has passed (inflight.py)
FRESH = "receive_count = 0 AND visible_at <= sent_at"
HELD = "(receive_count > 0 OR visible_at > sent_at)"

# -- queue rows ---------------------------------------------------------------------------

QUEUE_ROW = Statement(
    "queue_row",
    "A queue's id and attributes, by its name.",
    "SELECT id, attrs FROM {queues} WHERE name = :name",
)
QUEUE_ROW_LOCKED = Statement(
    "queue_row_locked",
    "A queue's id and attributes, by its name, its row locked until the transaction ends.",
    "SELECT id, attrs FROM {queues} WHERE name = :name{for_update}",
)
QUEUE_INFO = Statement(
    "queue_info",
    "A queue's id, attributes and times, by its name.",
    "SELECT id, attrs, created_at, updated_at FROM {queues} WHERE name = :name",
)
QUEUE_ID = Statement(
    "queue_id",
    "A queue's id, by its name.",
    "SELECT id FROM {queues} WHERE name = :name",
)
QUEUE_NAMES = Statement(
    "queue_names",
    "The name of every queue.",
    "SELECT name FROM {queues}",
)
CREATE_QUEUE = Statement(
    "create_queue",
    "A new queue's row, unless a queue of that name exists.",
    "INSERT INTO {queues} (name, attrs, created_at, updated_at, tokens, tokens_at)"
    " VALUES (:name, :attrs, :now, :now, :tokens, :now) ON CONFLICT (name) DO NOTHING",
    mysql="INSERT IGNORE INTO {queues} (name, attrs, created_at, updated_at, tokens, tokens_at)"
    " VALUES (:name, :attrs, :now, :now, :tokens, :now)",
)
DELETE_QUEUE = Statement(
    "delete_queue",
    "A queue's row, deleted.",
    "DELETE FROM {queues} WHERE id = :qid",
)
# what a deleted queue leaves in the other tables, deleted with it
QUEUE_LEFTOVERS = tuple(
    Statement(
        f"delete_queue_{table}",
        f"A deleted queue's rows in {table}.",
        f"DELETE FROM {{{table}}} WHERE queue_id = :qid",
    )
    for table in ("dedup", "subscriptions", "leases", "streams", "stages", "sinks", "counts")
)
FORGET_DEDUP = QUEUE_LEFTOVERS[0]
SET_QUEUE_ATTRIBUTES = Statement(
    "set_queue_attributes",
    "A queue's new attributes.",
    "UPDATE {queues} SET attrs = :attrs, updated_at = :now WHERE name = :name",
)
RATE_BUCKET = Statement(
    "rate_bucket",
    "A queue's receive tokens and when they were counted, its row locked.",
    "SELECT tokens, tokens_at FROM {queues} WHERE id = :qid{for_update}",
)
SPEND_TOKENS = Statement(
    "spend_tokens",
    "A queue's receive tokens left after a receive.",
    "UPDATE {queues} SET tokens = :tokens, tokens_at = :now WHERE id = :qid",
)

# -- running totals -----------------------------------------------------------------------

ADD_COUNTS = Statement(
    "add_counts",
    "A queue's running totals of messages sent, received and deleted, raised.",
    "UPDATE {queues} SET sent = sent + :sent, received = received + :received,"
    " deleted = deleted + :deleted WHERE id = :qid",
)
ADD_EXPIRED = Statement(
    "add_expired",
    "A queue's running total of messages expired, raised.",
    "UPDATE {queues} SET expired = expired + :n WHERE id = :qid",
)
ADD_DEAD = Statement(
    "add_dead",
    "A queue's running total of messages moved to its dead-letter queue, raised by one.",
    "UPDATE {queues} SET dead = dead + 1 WHERE id = :qid",
)
# a deep queue's last count (estimates.py): its stats then, the totals it saw, when, and how
# long it took; and the queue's edits, the changes to it the totals do not record
_COUNT_COLUMNS = (
    "ready_count, delayed_count, in_flight_count, oldest_age, sent, received, deleted, dead,"
    " expired, counted_at, took"
)
_COUNT_VALUES = (
    ":ready, :delayed, :in_flight, :oldest_age, :sent, :received, :deleted, :dead, :expired,"
    " :counted_at, :took"
)
QUEUE_TOTALS_AND_COUNT = Statement(
    "queue_totals_and_count",
    "A queue's running totals, when its stored count was made and how long it took (NULL:"
    " none to use), its edits, and the count's totals (moved on by `shift_count`).",
    "SELECT q.sent, q.received, q.deleted, q.dead, q.expired, c.counted_at, c.took, c.edits,"
    " c.sent, c.received, c.deleted"
    " FROM {queues} q LEFT JOIN {counts} c ON c.queue_id = q.id WHERE q.id = :qid",
)
COUNTS_MADE_AT = Statement(
    "counts_made_at",
    "The queues, of these, that have a stored count to use, and when it was made.",
    "SELECT queue_id, counted_at FROM {counts} WHERE queue_id IN (:qids*)"
    " AND counted_at IS NOT NULL",
)
SHIFT_COUNT = Statement(
    "shift_count",
    "A queue's stored count's totals raised by what was done before the count and written"
    " after it, so that its estimates do not take that twice.",
    "UPDATE {counts} SET sent = sent + :sent, received = received + :received,"
    " deleted = deleted + :deleted WHERE queue_id = :qid AND counted_at = :counted_at",
)
STORED_COUNT = Statement(
    "stored_count",
    "A queue's stored count.",
    f"SELECT {_COUNT_COLUMNS} FROM {{counts}} WHERE queue_id = :qid",
)
STORE_COUNT = Statement(
    "store_count",
    "A deep queue's latest count, written over the one before unless the queue was edited"
    " since the count began.",
    f"INSERT INTO {{counts}} (queue_id, edits, {_COUNT_COLUMNS}) VALUES (:qid, :edits,"
    f" {_COUNT_VALUES}) ON CONFLICT (queue_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _COUNT_COLUMNS.split(", "))
    + " WHERE {counts}.edits = excluded.edits",
    mysql=f"INSERT INTO {{counts}} (queue_id, edits, {_COUNT_COLUMNS}) VALUES (:qid, :edits,"
    f" {_COUNT_VALUES}) ON DUPLICATE KEY UPDATE "
    + ", ".join(
        f"{c} = IF(edits = VALUES(edits), VALUES({c}), {c})" for c in _COUNT_COLUMNS.split(", ")
    ),
)
UNCOUNT = Statement(
    "uncount",
    "A queue's stored count set aside (it is no longer deep), unless it was edited since.",
    "UPDATE {counts} SET counted_at = NULL WHERE queue_id = :qid AND edits = :edits",
)
RECOUNT = Statement(
    "recount",
    "A queue's stored count set aside, and its edits raised (a change its totals do not record).",
    f"INSERT INTO {{counts}} (queue_id, edits, {_COUNT_COLUMNS}) VALUES (:qid, 1,"
    " 0, 0, 0, NULL, 0, 0, 0, 0, 0, NULL, 0) ON CONFLICT (queue_id) DO UPDATE SET"
    " edits = {counts}.edits + 1, counted_at = NULL",
    mysql=f"INSERT INTO {{counts}} (queue_id, edits, {_COUNT_COLUMNS}) VALUES (:qid, 1,"
    " 0, 0, 0, NULL, 0, 0, 0, 0, 0, NULL, 0) ON DUPLICATE KEY UPDATE edits = edits + 1,"
    " counted_at = NULL",
)
COUNT_MESSAGES = Statement(
    "count_messages",
    "A queue's messages counted: ready, delayed, in flight, and the oldest one's send time"
    " (leaving out what a job staged, hidden until it publishes, and what expired). A message"
    " never received and sent without a delay (FRESH) is ready, whatever the clock says:"
    " another process may have sent it a moment after :now was read, before the count.",
    f"SELECT coalesce(sum(CASE WHEN visible_at <= :now OR ({FRESH}) THEN 1 ELSE 0 END), 0),"
    " coalesce(sum(CASE WHEN visible_at > :now AND receive_count = 0"
    f" AND {HELD} THEN 1 ELSE 0 END), 0),"
    " coalesce(sum(CASE WHEN visible_at > :now AND receive_count > 0 THEN 1 ELSE 0 END), 0),"
    " min(sent_at) FROM {messages} WHERE {scope} AND visible_at < :hidden"
    " AND sent_at >= :horizon AND (deadline IS NULL OR deadline > :cut)",
)

# -- de-duplication -----------------------------------------------------------------------

DEDUP_SEEN = Statement(
    "dedup_seen",
    "The message a live de-duplication key of a queue was sent as.",
    "SELECT message_id FROM {dedup} WHERE queue_id = :qid AND dkey = :dkey AND expires_at > :now",
)
REMEMBER_DEDUP = Statement(
    "remember_dedup",
    "A de-duplication key, the message sent with it and when it expires (replacing an old one).",
    "INSERT INTO {dedup} (queue_id, dkey, message_id, expires_at)"
    " VALUES (:qid, :dkey, :message_id, :expires_at) ON CONFLICT (queue_id, dkey)"
    " DO UPDATE SET message_id = excluded.message_id, expires_at = excluded.expires_at",
    mysql="INSERT INTO {dedup} (queue_id, dkey, message_id, expires_at)"
    " VALUES (:qid, :dkey, :message_id, :expires_at) ON DUPLICATE KEY UPDATE"
    " message_id = VALUES(message_id), expires_at = VALUES(expires_at)",
)
ANY_EXPIRED_DEDUP = Statement(
    "any_expired_dedup",
    "Whether a queue holds de-duplication keys past their time.",
    "SELECT 1 FROM {dedup} WHERE queue_id = :qid AND expires_at <= :now LIMIT 1",
)
FORGET_EXPIRED_DEDUP = Statement(
    "forget_expired_dedup",
    "A queue's de-duplication keys past their time, deleted.",
    "DELETE FROM {dedup} WHERE queue_id = :qid AND expires_at <= :now",
)

# -- messages by key ----------------------------------------------------------------------

MESSAGE_ROW = Statement(
    "message_row",
    "A message's row, by key.",
    "SELECT {columns} FROM {messages} WHERE {key_scope} AND {key} = :key",
)
DELETE_KEY = Statement(
    "delete_key",
    "A message's row, by key, deleted.",
    "DELETE FROM {messages} WHERE {key_scope} AND {key} = :key",
)
DELETE_KEYS = Statement(
    "delete_keys",
    "Messages' rows, by key, deleted.",
    "DELETE FROM {messages} WHERE {key_scope} AND {key} IN (:keys*)",
)
FIND_MANY = Statement(
    "find_many",
    "The key, id and visible time of a queue's messages with these ids (the id index).",
    "SELECT {key}, id, visible_at FROM {messages} WHERE {id_scope} AND id IN (:ids*)",
)
CHANGE_VISIBILITY = Statement(
    "change_visibility",
    "A message's new visible time, where its claim's token still holds it.",
    "UPDATE {messages} SET visible_at = :visible_at, version = version + 1"
    " WHERE {key_scope} AND {key} = :key AND token = :token",
)
GIVE_BACK = Statement(
    "give_back",
    "A message made visible again as though its claim (whose token still holds it) had not"
    " been made: its receive count one lower, its first receive forgotten at 0.",
    # first_received_at first: MySQL assigns in order, each from the values before it
    "UPDATE {messages} SET first_received_at = CASE WHEN receive_count > 1"
    " THEN first_received_at END, receive_count = CASE WHEN receive_count > 0"
    " THEN receive_count - 1 ELSE 0 END, visible_at = :visible_at, version = version + 1,"
    " token = NULL WHERE {key_scope} AND {key} = :key AND token = :token",
)
PURGE = Statement(
    "purge",
    "Every message of a queue, deleted.",
    "DELETE FROM {messages} WHERE {scope}",
)

# -- walks of a queue's head --------------------------------------------------------------

ANY_READY = Statement(
    "any_ready",
    "Whether a queue has a message visible now (a read, no lock taken).",
    "SELECT 1 FROM {messages} WHERE {scope} AND visible_at <= :now LIMIT 1",
)
_WALK = (
    "SELECT {key}, {priority}, group_id, visible_at, receive_count, deadline, sent_at"
    " FROM {messages} WHERE {scope} AND {after}"
)
WALK = Statement(
    "walk",
    "A page of a queue's rows after a place in delivery order: what a walk decides by.",
    f"{_WALK} ORDER BY {{order}} LIMIT :page",
)
WALK_LOCKING = Statement(
    "walk_locking",
    "A page of a queue's rows after a place in delivery order, skipping and locking as a"
    " claim does.",
    f"{_WALK} ORDER BY {{order}} LIMIT :page{{skip_locked}}",
)
WALK_VISIBLE = Statement(
    "walk_visible",
    "A page of a queue's rows visible now after a place in delivery order.",
    f"{_WALK} AND visible_at <= :now ORDER BY {{order}} LIMIT :page",
)
WALK_VISIBLE_LOCKING = Statement(
    "walk_visible_locking",
    "A page of a queue's rows visible now after a place in delivery order, skipping and"
    " locking as a claim does.",
    f"{_WALK} AND visible_at <= :now ORDER BY {{order}} LIMIT :page{{skip_locked}}",
)
SWEEP_RETAINED = Statement(
    "sweep_retained",
    "The keys of messages past retention among the first rows of a queue's head.",
    "SELECT {key} FROM (SELECT {key}, sent_at FROM {messages} WHERE {scope}"
    " ORDER BY {order} LIMIT :rows) h WHERE sent_at < :horizon",
)
SWEEP_DEADLINES = Statement(
    "sweep_deadlines",
    "The keys of messages past their deadline, from the deadline index.",
    "SELECT {key} FROM {messages} WHERE deadline <= :cut AND {scope} LIMIT :rows",
)

# -- the archive ---------------------------------------------------------------------------

_ARCHIVED = (
    f"INSERT INTO {{archive}} ({ARCHIVE_COLUMNS}) SELECT :queue, id, body, attributes,"
    " group_id, {priority}, sent_at, first_received_at, :now, receive_count, :outcome,"
    " compressed FROM {messages} WHERE {key_scope} AND {key} IN (:keys*)"
)
ARCHIVE_KEYS = Statement(
    "archive_keys",
    "Messages, by key, copied to the archive with what became of them.",
    _ARCHIVED,
)
ARCHIVE_HELD = Statement(
    "archive_held",
    "Messages, by key, that their claim's token still holds, copied to the archive.",
    f"{_ARCHIVED} AND token = :token",
)
LIST_ARCHIVE = Statement(
    "list_archive",
    "A page of a queue's archived messages, oldest first.",
    f"SELECT {ARCHIVE_COLUMNS} FROM {{archive}} WHERE queue_name = :queue ORDER BY seq"
    " LIMIT :limit OFFSET :skip",
)

# -- inspection and editing ---------------------------------------------------------------

_LISTED = "SELECT {columns} FROM {messages} WHERE {scope} AND {after}"
LIST_MESSAGES = Statement(
    "list_messages",
    "A page of a queue's messages in delivery order (not those a job staged).",
    f"{_LISTED} AND visible_at < :hidden ORDER BY {{order}} LIMIT :limit",
)
LIST_READY = Statement(
    "list_ready",
    "A page of a queue's messages visible now, in delivery order.",
    f"{_LISTED} AND visible_at <= :now ORDER BY {{order}} LIMIT :limit",
)
LIST_DELAYED = Statement(
    "list_delayed",
    "A page of a queue's delayed messages (never received, not yet visible), in delivery order.",
    f"{_LISTED} AND visible_at > :now AND visible_at < :hidden AND receive_count = 0"
    " ORDER BY {order} LIMIT :limit",
)
LIST_IN_FLIGHT = Statement(
    "list_in_flight",
    "A page of a queue's messages in flight (received, not yet visible again), in delivery order.",
    f"{_LISTED} AND visible_at > :now AND receive_count > 0 ORDER BY {{order}} LIMIT :limit",
)
UPDATE_MESSAGE = Statement(
    "update_message",
    "A message's body, attributes and visible time, edited in place.",
    "UPDATE {messages} SET body = :body, compressed = :compressed, attributes = :attributes,"
    " visible_at = :visible_at, version = version + 1 WHERE {key_scope} AND {key} = :key",
)
RESET_MESSAGE = Statement(
    "reset_message",
    "A message released as if never received: visible at the given time, claim dropped.",
    "UPDATE {messages} SET receive_count = 0, first_received_at = NULL,"
    " visible_at = :visible_at, token = NULL, version = version + 1"
    " WHERE {key_scope} AND {key} = :key",
)
FAIL_MESSAGE = Statement(
    "fail_message",
    "A message released, its receives counted: visible at the given time, claim dropped.",
    "UPDATE {messages} SET visible_at = :visible_at, token = NULL, version = version + 1"
    " WHERE {key_scope} AND {key} = :key",
)
REDRIVE_PICK = Statement(
    "redrive_pick",
    "The first visible messages of a (dead-letter) queue, to move elsewhere.",
    "SELECT {columns} FROM {messages} WHERE {scope} AND visible_at <= :now"
    " ORDER BY {order} LIMIT :limit{skip_locked}",
)

# -- topics -------------------------------------------------------------------------------

TOPIC_NAMES = Statement(
    "topic_names",
    "The name of every topic.",
    "SELECT name FROM {topics}",
)
TOPIC_SETTINGS = Statement(
    "topic_settings",
    "A topic's settings.",
    "SELECT settings FROM {topics} WHERE name = :name",
)
TOPIC_SETTINGS_LOCKED = Statement(
    "topic_settings_locked",
    "A topic's settings, its row locked until the transaction ends.",
    "SELECT settings FROM {topics} WHERE name = :name{for_update}",
)
CREATE_TOPIC = Statement(
    "create_topic",
    "A new topic's row, unless a topic of that name exists.",
    "INSERT INTO {topics} (name, created_at) VALUES (:name, :now) ON CONFLICT (name) DO NOTHING",
    mysql="INSERT IGNORE INTO {topics} (name, created_at) VALUES (:name, :now)",
)
DELETE_TOPIC_SUBSCRIPTIONS = Statement(
    "delete_topic_subscriptions",
    "A topic's subscriptions, deleted.",
    "DELETE FROM {subscriptions} WHERE topic = :topic",
)
DELETE_TOPIC = Statement(
    "delete_topic",
    "A topic's row, deleted.",
    "DELETE FROM {topics} WHERE name = :topic",
)
SET_TOPIC_SETTINGS = Statement(
    "set_topic_settings",
    "A topic's new settings.",
    "UPDATE {topics} SET settings = :settings WHERE name = :name",
)
SUBSCRIBE = Statement(
    "subscribe",
    "A queue subscribed to a topic, unless it is already.",
    "INSERT INTO {subscriptions} (topic, queue_id) VALUES (:topic, :qid)"
    " ON CONFLICT (topic, queue_id) DO NOTHING",
    mysql="INSERT IGNORE INTO {subscriptions} (topic, queue_id) VALUES (:topic, :qid)",
)
SET_SUBSCRIPTION = Statement(
    "set_subscription",
    "A subscription's new attributes.",
    "UPDATE {subscriptions} SET attributes = :attributes WHERE topic = :topic AND queue_id = :qid",
)
UNSUBSCRIBE = Statement(
    "unsubscribe",
    "A queue's subscription to a topic, by the queue's name, deleted.",
    "DELETE FROM {subscriptions} WHERE topic = :topic AND queue_id IN"
    " (SELECT id FROM {queues} WHERE name = :queue)",
)
SUBSCRIBERS = Statement(
    "subscribers",
    "The queues subscribed to a topic, by name, with each subscription's attributes.",
    "SELECT q.name, s.attributes FROM {subscriptions} s JOIN {queues} q ON q.id = s.queue_id"
    " WHERE s.topic = :topic ORDER BY q.name",
)
SUBSCRIPTION_LOCKED = Statement(
    "subscription_locked",
    "A queue's subscription to a topic (its queue id and attributes), its row locked.",
    "SELECT s.queue_id, s.attributes FROM {subscriptions} s JOIN {queues} q"
    " ON q.id = s.queue_id WHERE s.topic = :topic AND q.name = :queue{for_update}",
)

# -- consumers ----------------------------------------------------------------------------

CONSUMER_REGISTERED = Statement(
    "consumer_registered",
    "When a consumer first registered.",
    "SELECT registered_at FROM {consumers} WHERE id = :id",
)
REGISTER_CONSUMER = Statement(
    "register_consumer",
    "A consumer's row, written or replaced.",
    f"INSERT INTO {{consumers}} ({CONSUMER_COLUMNS}) VALUES (:id, :queue_name, :info,"
    " :timeout, :registered_at, :heartbeat_at) ON CONFLICT (id) DO UPDATE SET"
    " queue_name = excluded.queue_name, info = excluded.info, timeout = excluded.timeout,"
    " registered_at = excluded.registered_at, heartbeat_at = excluded.heartbeat_at",
    mysql=f"INSERT INTO {{consumers}} ({CONSUMER_COLUMNS}) VALUES (:id, :queue_name, :info,"
    " :timeout, :registered_at, :heartbeat_at) ON DUPLICATE KEY UPDATE"
    " queue_name = VALUES(queue_name), info = VALUES(info), timeout = VALUES(timeout),"
    " registered_at = VALUES(registered_at), heartbeat_at = VALUES(heartbeat_at)",
)
PRUNE_CONSUMERS = Statement(
    "prune_consumers",
    "The consumers that missed their heartbeats, deleted.",
    "DELETE FROM {consumers} WHERE heartbeat_at + timeout < :now",
)
CONSUMER_HEARTBEAT = Statement(
    "consumer_heartbeat",
    "A consumer's heartbeat.",
    "UPDATE {consumers} SET heartbeat_at = :now WHERE id = :id",
)
CONSUMER_ROW = Statement(
    "consumer_row",
    "A consumer's row.",
    f"SELECT {CONSUMER_COLUMNS} FROM {{consumers}} WHERE id = :id",
)
UNREGISTER_CONSUMER = Statement(
    "unregister_consumer",
    "A consumer's row, deleted.",
    "DELETE FROM {consumers} WHERE id = :id",
)
LIST_CONSUMERS = Statement(
    "list_consumers",
    "Every consumer, first registered first.",
    f"SELECT {CONSUMER_COLUMNS} FROM {{consumers}} ORDER BY registered_at, id",
)
LIST_QUEUE_CONSUMERS = Statement(
    "list_queue_consumers",
    "The consumers of a queue, first registered first.",
    f"SELECT {CONSUMER_COLUMNS} FROM {{consumers}} WHERE queue_name = :queue"
    " ORDER BY registered_at, id",
)

# -- claims (every dialect) ---------------------------------------------------------------

# what a claim takes: visible now, neither past retention (the horizon) nor expired by its
# deadline (rules.deadline_rules); parameters `claim_values`
READY = "visible_at <= :now AND sent_at >= :horizon AND (deadline IS NULL OR deadline > :expires)"
# what a claim sets visible_at to (rules.claimed_until): the claim's end, or the deadline
# where the queue's rules cut the claim there
CLAIMED_UNTIL = "CASE WHEN deadline > :cut_from AND deadline < :until THEN deadline ELSE :until END"
CLAIM_SET = (
    f"visible_at = {CLAIMED_UNTIL}, receive_count = receive_count + 1,"
    " first_received_at = coalesce(first_received_at, :now), version = version + 1,"
    " token = :token"
)
ROWS_OF_KEYS = Statement(
    "rows_of_keys",
    "Messages' rows, by key.",
    "SELECT {columns} FROM {messages} WHERE {key_scope} AND {key} IN (:keys*)",
)
CLAIM_KEYS = Statement(
    "claim_keys",
    "Messages, by key, claimed under a receive's token.",
    f"UPDATE {{messages}} SET {CLAIM_SET} WHERE {{key_scope}} AND {{key}} IN (:keys*)",
)

# -- SQLite: a table per queue, its rowid the delivery order --------------------------------

# a message row's columns, as rows.MessageRow reads them
SQLITE_COLUMNS = (
    "rowid, id, body, attributes, group_id, dedup_id, priority, deadline, sent_at, visible_at,"
    " receive_count, first_received_at, version, source_queue, error, compressed"
)
# what a send writes (the receive state keeps its defaults)
SQLITE_SEND_COLUMNS = (
    "rowid", "id", "body", "attributes", "group_id", "dedup_id", "priority", "deadline",
    "sent_at", "visible_at", "compressed", "indexed",
)  # fmt: skip
# ... and what else a row moved from elsewhere keeps
SQLITE_ALL_COLUMNS = (
    *SQLITE_SEND_COLUMNS, "receive_count", "first_received_at", "version", "source_queue",
    "error",
)  # fmt: skip
SQLITE_CREATE_QUEUE = (
    Statement(
        "sqlite_create_queue",
        "A new queue's table.",
        """CREATE TABLE {messages} (
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
    ),
    Statement(
        "sqlite_index_ids",
        "A new queue's index of the ids its senders chose (ids made here carry their rowid).",
        "CREATE UNIQUE INDEX {by_id_index} ON {messages} (id) WHERE indexed",
    ),
    Statement(
        "sqlite_index_deadlines",
        "A new queue's index of the messages with a deadline.",
        "CREATE INDEX {by_deadline_index} ON {messages} (deadline) WHERE deadline IS NOT NULL",
    ),
)
SQLITE_DROP_QUEUE = Statement(
    "sqlite_drop_queue",
    "A deleted queue's table, dropped.",
    "DROP TABLE {messages}",
)
SQLITE_INDEX_HELD = (
    Statement(
        "sqlite_index_fresh",
        "A queue's index of its fresh rows, in rowid order (for a head deep in held rows).",
        f"CREATE INDEX IF NOT EXISTS {{fresh_index}} ON {{messages}} (receive_count) WHERE {FRESH}",
    ),
    Statement(
        "sqlite_index_held",
        "A queue's index of its held rows, by when they become visible.",
        f"CREATE INDEX IF NOT EXISTS {{held_index}} ON {{messages}} (visible_at) WHERE {HELD}",
    ),
)
SQLITE_LAST_ROWID = Statement(
    "sqlite_last_rowid",
    "The highest rowid in a range (a priority's band).",
    "SELECT max(rowid) FROM {messages} WHERE rowid BETWEEN :low AND :high",
)
SQLITE_BARE_ROWS = Statement(
    "sqlite_bare_rows",
    "Bodies inserted at consecutive rowids from :start, sharing priority and times.",
    "INSERT INTO {messages} (priority, sent_at, visible_at, rowid, id, body)"
    " VALUES (:priority, :now, :visible_at, :start + #, :id*, :body*)*",
)
SQLITE_SENT_ROWS = Statement(
    "sqlite_sent_rows",
    "Rows as sent, inserted.",
    f"INSERT INTO {{messages}} ({', '.join(SQLITE_SEND_COLUMNS)})"
    f" VALUES ({', '.join(f':{c}*' for c in SQLITE_SEND_COLUMNS)})*",
)
SQLITE_MOVED_ROW = Statement(
    "sqlite_moved_row",
    "A row moved from elsewhere (its receives and history kept), inserted.",
    f"INSERT INTO {{messages}} ({', '.join(SQLITE_ALL_COLUMNS)})"
    f" VALUES ({', '.join(f':{c}' for c in SQLITE_ALL_COLUMNS)})",
)
SQLITE_AT_ROWIDS = Statement(
    "sqlite_at_rowids",
    "The rowid, id and visible time of the rows at these rowids.",
    "SELECT rowid, id, visible_at FROM {messages} WHERE rowid IN (:rowids*)",
)
SQLITE_OF_IDS = Statement(
    "sqlite_of_ids",
    "The rowid, id and visible time of the indexed rows with these ids.",
    "SELECT rowid, id, visible_at FROM {messages} WHERE indexed AND id IN (:ids*)",
)
SQLITE_AT_HOME = Statement(
    "sqlite_at_home",
    "Whether the row at a rowid holds the message of that id.",
    "SELECT 1 FROM {messages} WHERE rowid = :rowid AND id = :id",
)
SQLITE_INDEXED_ID = Statement(
    "sqlite_indexed_id",
    "The rowid of the indexed row with an id.",
    "SELECT rowid FROM {messages} WHERE indexed AND id = :id",
)
SQLITE_ANY_FRESH = Statement(
    "sqlite_any_fresh",
    "Whether an indexed queue has a fresh message visible now.",
    f"SELECT 1 FROM {{messages}} INDEXED BY {{fresh_index}} WHERE {FRESH}"
    " AND visible_at <= :now LIMIT 1",
)
SQLITE_ANY_HELD = Statement(
    "sqlite_any_held",
    "Whether an indexed queue has a held message visible now.",
    f"SELECT 1 FROM {{messages}} INDEXED BY {{held_index}} WHERE {HELD}"
    " AND visible_at <= :now LIMIT 1",
)
_SQLITE_CLAIM = f"UPDATE {{messages}} SET {CLAIM_SET} WHERE rowid IN"
SQLITE_READY_ROWS = Statement(
    "sqlite_ready_rows",
    "A queue's first ready messages, in rowid order (claimed next by claim_keys).",
    f"SELECT {SQLITE_COLUMNS} FROM {{messages}} WHERE {READY} ORDER BY rowid LIMIT :limit",
)
SQLITE_READY_INDEXED = Statement(
    "sqlite_ready_indexed",
    "An indexed queue's first ready messages: the first fresh ones in rowid order and the"
    " held ones that became visible first, merged in rowid order (claimed next by"
    " claim_keys).",
    f"SELECT {SQLITE_COLUMNS} FROM {{messages}} WHERE rowid IN (SELECT rowid FROM (SELECT"
    f" rowid FROM {{messages}} INDEXED BY {{fresh_index}} WHERE {FRESH} AND {READY} ORDER BY"
    f" rowid LIMIT :limit) UNION ALL SELECT rowid FROM (SELECT rowid FROM {{messages}} INDEXED"
    f" BY {{held_index}} WHERE {HELD} AND {READY} ORDER BY visible_at, rowid LIMIT :limit)"
    " ORDER BY rowid LIMIT :limit)",
)
SQLITE_CLAIM_KEYS = Statement(
    "sqlite_claim_keys",
    "Messages, by rowid, claimed under a receive's token.",
    f"{_SQLITE_CLAIM} (:keys*) RETURNING {SQLITE_COLUMNS}",
)
SQLITE_WALK_INDEXED = Statement(
    "sqlite_walk_indexed",
    "A page of an indexed queue's visible rows after a rowid, chosen as"
    " sqlite_ready_indexed chooses them.",
    "SELECT rowid, priority, group_id, visible_at, receive_count, deadline, sent_at"
    " FROM {messages} WHERE rowid IN (SELECT rowid FROM (SELECT rowid FROM {messages}"
    f" INDEXED BY {{fresh_index}} WHERE {FRESH} AND visible_at <= :now AND rowid > :after"
    " ORDER BY rowid LIMIT :page) UNION ALL SELECT rowid FROM (SELECT rowid FROM {messages}"
    f" INDEXED BY {{held_index}} WHERE {HELD} AND visible_at <= :now AND rowid > :after"
    " ORDER BY visible_at, rowid LIMIT :page) ORDER BY rowid LIMIT :page) ORDER BY rowid",
)
SQLITE_DELETE_HELD = Statement(
    "sqlite_delete_held",
    "Messages, by rowid, that their claim's token still holds, deleted.",
    "DELETE FROM {messages} WHERE token = :token AND rowid IN (:keys*)",
)
SQLITE_DELETE_HELD_RETURNING = Statement(
    "sqlite_delete_held_returning",
    "Messages, by rowid, that their claim's token still holds, deleted; their rowids.",
    "DELETE FROM {messages} WHERE token = :token AND rowid IN (:keys*) RETURNING rowid",
)
SQLITE_LEASE_CLAIM = Statement(
    "sqlite_lease_claim",
    "A queue's first ready messages claimed, in rowid order; their rowids alone.",
    f"{_SQLITE_CLAIM} (SELECT rowid FROM {{messages}} WHERE {READY} ORDER BY rowid"
    " LIMIT :limit) RETURNING rowid",
)
SQLITE_RECORD_LEASE = Statement(
    "sqlite_record_lease",
    "The claims of a lease recorded: the rows in a rowid range that hold its token.",
    "INSERT INTO {leases} (queue_id, stream, lease, row_key, message_id, token)"
    " SELECT :qid, :stream, :lease, rowid, id, token FROM {messages}"
    " WHERE rowid BETWEEN :low AND :high AND token = :token ON CONFLICT"
    " (queue_id, stream, lease, row_key) DO UPDATE SET message_id = excluded.message_id,"
    " token = excluded.token",
)


def catalog() -> list[Statement]:
    """Every statement the SQL stores run: those above, then the bulk access's
    (`pipeline_statements.py`) and the servers' (`server_statements.py`), each in the order
    they are written."""
    from . import pipeline_statements, server_statements  # they build on what is here

    found: list[Statement] = []
    for module in (globals(), vars(pipeline_statements), vars(server_statements)):
        for value in list(module.values()):
            if isinstance(value, Statement):
                found.append(value)
            elif isinstance(value, tuple | dict):
                items = value.values() if isinstance(value, dict) else value
                found += [s for s in items if isinstance(s, Statement)]
    return list(dict.fromkeys(found))
