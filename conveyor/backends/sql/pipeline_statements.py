"""The statements of the SQL stores' bulk access for parallel jobs (`pipeline.py`, the Spark
data source and jobs): a queue's bounds and scans, leases of streams, the stages of a sink's
batches and its commit records. Named once, as every statement (`statements.py`)."""

from __future__ import annotations

from .rows import ARCHIVE_COLUMNS
from .statement import Statement

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
