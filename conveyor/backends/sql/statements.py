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

Sections run from what every store runs to what one database runs alone; a statement a
database words its own way carries that text beside the common one (`Statement.mysql`).
The schema's versions are in `schema.py`.
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

# -- bulk access for parallel jobs (pipeline.py) -------------------------------------------

MESSAGE_BOUNDS = Statement(
    "message_bounds",
    "How many messages a queue holds (not those a job staged) and its lowest and highest key.",
    "SELECT count(*), min({key}), max({key}) FROM {messages} WHERE {scope}"
    " AND visible_at < :hidden",
)
ARCHIVE_BOUNDS = Statement(
    "archive_bounds",
    "How many messages a queue's archive holds and its lowest and highest key.",
    "SELECT count(*), min(seq), max(seq) FROM {archive} WHERE queue_name = :queue",
)
SCAN_MESSAGES = Statement(
    "scan_messages",
    "A page of a queue's messages in a key range, in key order (not those a job staged).",
    "SELECT {columns} FROM {messages} WHERE {scope} AND {key} > :after AND {key} <= :high"
    " AND visible_at < :hidden ORDER BY {key} LIMIT :page",
)
SCAN_ARCHIVE = Statement(
    "scan_archive",
    "A page of a queue's archived messages in a key range, in key order.",
    f"SELECT seq, {ARCHIVE_COLUMNS} FROM {{archive}} WHERE queue_name = :queue"
    " AND seq > :after AND seq <= :high ORDER BY seq LIMIT :page",
)
STREAM_POSITION = Statement(
    "stream_position",
    "The last lease a stream acknowledged.",
    "SELECT acked FROM {streams} WHERE queue_id = :qid AND stream = :stream",
)
SET_STREAM_POSITION = Statement(
    "set_stream_position",
    "The last lease a stream acknowledged, written.",
    "INSERT INTO {streams} (queue_id, stream, acked, updated_at)"
    " VALUES (:qid, :stream, :acked, :now) ON CONFLICT (queue_id, stream) DO UPDATE SET"
    " acked = excluded.acked, updated_at = excluded.updated_at",
    mysql="INSERT INTO {streams} (queue_id, stream, acked, updated_at)"
    " VALUES (:qid, :stream, :acked, :now) ON DUPLICATE KEY UPDATE acked = VALUES(acked),"
    " updated_at = VALUES(updated_at)",
)
RECORD_LEASES = Statement(
    "record_leases",
    "Claims recorded under a lease: the row key and message id of each, one token for all.",
    "INSERT INTO {leases} (queue_id, stream, lease, row_key, message_id, token)"
    " VALUES (:qid, :stream, :lease, :row_key*, :message_id*, :token)* ON CONFLICT"
    " (queue_id, stream, lease, row_key) DO UPDATE SET message_id = excluded.message_id,"
    " token = excluded.token",
    postgresql="INSERT INTO {leases} (queue_id, stream, lease, row_key, message_id, token)"
    " SELECT :qid, :stream, :lease, k, m, :token FROM unnest(:row_keys::bigint[],"
    " :message_ids::text[]) AS u(k, m) ON CONFLICT (queue_id, stream, lease, row_key)"
    " DO UPDATE SET message_id = excluded.message_id, token = excluded.token",
    mysql="INSERT INTO {leases} (queue_id, stream, lease, row_key, message_id, token)"
    " VALUES (:qid, :stream, :lease, :row_key*, :message_id*, :token)* ON DUPLICATE KEY"
    " UPDATE message_id = VALUES(message_id), token = VALUES(token)",
)
LEASE_ROWS = Statement(
    "lease_rows",
    "The row key and claim token of what a stream's leases up to one hold.",
    "SELECT row_key, token FROM {leases} WHERE queue_id = :qid AND stream = :stream"
    " AND lease <= :upto",
)
LEASE_BOUNDS = Statement(
    "lease_bounds",
    "How many claims a range of a stream's leases holds, and their lowest and highest key.",
    "SELECT count(*), min(row_key), max(row_key) FROM {leases} WHERE queue_id = :qid"
    " AND stream = :stream AND lease >= :first AND lease <= :last",
)
LEASE_PAGE = Statement(
    "lease_page",
    "A page of one lease's claims in a key range, in key order.",
    "SELECT row_key, token FROM {leases} WHERE queue_id = :qid AND stream = :stream"
    " AND lease = :lease AND row_key > :after AND row_key <= :high ORDER BY row_key"
    " LIMIT :page",
)
LEASED_ROWS = Statement(
    "leased_rows",
    "Messages' rows and claim tokens, by key alone (keys are unique in the table).",
    "SELECT {columns}, token FROM {messages} WHERE {key} IN (:keys*) ORDER BY {key}",
)
DELETE_LEASES = Statement(
    "delete_leases",
    "A stream's leases up to one, deleted.",
    "DELETE FROM {leases} WHERE queue_id = :qid AND stream = :stream AND lease <= :upto",
)
# the messages a stream's leases up to one still hold (with the lease's claim token): by
# row key and token (SQLite); by key from arrays, so the plan is by key however large the
# queue (PostgreSQL); MySQL deletes them by token (`Dialect.deletes_leased`)
_LEASED = (
    "(rowid, token) IN (SELECT row_key, token FROM {leases} WHERE queue_id = :qid"
    " AND stream = :stream AND lease <= :upto)"
)
_PG_LEASED = (
    "queue_id + 0 = :qid AND seq = ANY(ARRAY(SELECT row_key FROM {leases}"
    " WHERE queue_id = :qid AND stream = :stream AND lease <= :upto))"
    " AND token = ANY(ARRAY(SELECT DISTINCT token FROM {leases} WHERE queue_id = :qid"
    " AND stream = :stream AND lease <= :upto))"
)
DELETE_LEASED = Statement(
    "delete_leased",
    "The messages a stream's leases up to one still hold, deleted.",
    f"DELETE FROM {{messages}} WHERE {_LEASED}",
    postgresql=f"DELETE FROM {{messages}} WHERE {_PG_LEASED}",
)
_ARCHIVED_FROM = (
    f"INSERT INTO {{archive}} ({ARCHIVE_COLUMNS}) SELECT :queue, id, body, attributes,"
    " group_id, {priority}, sent_at, first_received_at, :now, receive_count, :outcome,"
    " compressed FROM {messages} WHERE"
)
ARCHIVE_LEASED = Statement(
    "archive_leased",
    "The messages a stream's leases up to one still hold, copied to the archive.",
    f"{_ARCHIVED_FROM} {_LEASED}",
    postgresql=f"{_ARCHIVED_FROM} {_PG_LEASED}",
)
CREATE_STAGE = Statement(
    "create_stage",
    "A task attempt's stage (its tag is made by the database).",
    "INSERT INTO {stages} (queue_id, sink, batch, part, attempt, created_at)"
    " VALUES (:qid, :sink, :batch, :part, :attempt, :now)",
)
_STAGE = "SELECT tag, part, attempt, low, high, staged FROM {stages} WHERE queue_id = :qid"
STAGES_OF_BATCH = Statement(
    "stages_of_batch",
    "The stages of a sink's batch.",
    f"{_STAGE} AND sink = :sink AND batch = :batch",
)
ABANDONED_STAGES = Statement(
    "abandoned_stages",
    "The stages of one-off jobs (sinks named by a pattern) created before a time.",
    f"{_STAGE} AND sink LIKE :pattern AND created_at < :before",
)
SET_STAGE_RANGE = Statement(
    "set_stage_range",
    "The key range a stage's messages lie in.",
    "UPDATE {stages} SET low = :low, high = :high WHERE tag = :tag",
)
RESTAGE = Statement(
    "restage",
    "Messages an earlier attempt staged, by key, taken over by another stage.",
    "UPDATE {messages} SET visible_at = :hidden WHERE {key_scope} AND {key} IN (:keys*)",
)
# the messages of stages: their key range and tags (tags are unique across queues, so the
# range and the tags select the rows alone)
_STAGED = "{key_scope} AND {key} >= :low AND {key} <= :high AND visible_at IN (:tags*)"
PUBLISH_STAGED = Statement(
    "publish_staged",
    "Stages' messages made visible, as sent now.",
    f"UPDATE {{messages}} SET visible_at = :now, sent_at = :now WHERE {_STAGED}",
)
DROP_STAGED = Statement(
    "drop_staged",
    "Stages' messages still hidden, deleted.",
    f"DELETE FROM {{messages}} WHERE {_STAGED}",
)
DROP_STAGES = Statement(
    "drop_stages",
    "Stages, by tag, deleted.",
    "DELETE FROM {stages} WHERE tag IN (:tags*)",
)
ADD_STAGED = Statement(
    "add_staged",
    "A stage's count of the rows it staged, raised.",
    "UPDATE {stages} SET staged = staged + :n WHERE tag = :tag",
)
SINK_BATCH = Statement(
    "sink_batch",
    "The last batch a sink published to a queue.",
    "SELECT batch FROM {sinks} WHERE queue_id = :qid AND sink = :sink",
)
SET_SINK_BATCH = Statement(
    "set_sink_batch",
    "The last batch a sink published to a queue, written.",
    "INSERT INTO {sinks} (queue_id, sink, batch, committed_at) VALUES (:qid, :sink, :batch,"
    " :now) ON CONFLICT (queue_id, sink) DO UPDATE SET batch = excluded.batch,"
    " committed_at = excluded.committed_at",
    mysql="INSERT INTO {sinks} (queue_id, sink, batch, committed_at) VALUES (:qid, :sink,"
    " :batch, :now) ON DUPLICATE KEY UPDATE batch = VALUES(batch),"
    " committed_at = VALUES(committed_at)",
)
FORGET_JOB_SINKS = Statement(
    "forget_job_sinks",
    "The commit records of one-off jobs (sinks named by a pattern) older than a time.",
    "DELETE FROM {sinks} WHERE sink LIKE :pattern AND committed_at < :before",
)


# -- PostgreSQL and MySQL: every queue in one messages table, seq the row key --------------

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


def catalog() -> list[Statement]:
    """Every statement above, in the order they are written."""
    found: list[Statement] = []
    for value in list(globals().values()):
        if isinstance(value, Statement):
            found.append(value)
        elif isinstance(value, tuple | dict):
            items = value.values() if isinstance(value, dict) else value
            found += [s for s in items if isinstance(s, Statement)]
    return list(dict.fromkeys(found))
