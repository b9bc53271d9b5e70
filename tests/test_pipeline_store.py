"""The stores' pipeline operations (what the Spark source builds on), without Spark: leases
held by token, staged writes published once per (sink, batch), snapshots by row range."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Client, DeadLetterPolicy, ManualClock, SendEntry, StagedWritesLost
from conveyor.backends.base import Pipeline
from conveyor.backends.sql.pipeline import HIDDEN, STAGE_HOURS, SQLPipeline
from conveyor.backends.sql.sqlite_connections import SQLiteConnections
from conveyor.backends.sql.statement import Statement
from conveyor.backends.sql.store import SQLStore
from conveyor.models import NewMessage

from .conftest import STORES
from .support import sqlstores
from .support.sqlstores import drop


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def env(
    request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock
) -> Iterator[tuple[Client, Pipeline]]:
    url = STORES[request.param](tmp_path)
    client = Client(url, clock=clock)
    yield client, client.catalog.pipeline()
    client.close()
    drop(url)


def entries(n: int, prefix: str = "m", ids: bool = False) -> list[SendEntry]:
    return [
        SendEntry(entry_id=str(i), body=f"{prefix}{i}", id=f"{prefix}{i}" if ids else None)
        for i in range(n)
    ]


def test_snapshot_ranges_cover_every_message_once(env: tuple[Client, Pipeline]) -> None:
    client, store = env
    q = client.create_queue("q")
    for i in range(0, 250, 10):
        batch = range(i, i + 10)
        q.send_batch([SendEntry(entry_id=str(j), body=f"m{j}", priority=j % 3) for j in batch])
    q.receive(max_messages=10)
    bounds = store.row_bounds("q")
    assert bounds.count == 250
    seen = [m.text for lo, hi in bounds.split(7) for m in store.scan_messages("q", lo, hi)]
    assert sorted(seen) == sorted(f"m{j}" for j in range(250))
    assert q.stats().received == 10  # scanning received nothing


def test_leases_are_topped_up_read_by_range_and_acknowledged(
    env: tuple[Client, Pipeline], clock: ManualClock
) -> None:
    client, store = env
    q = client.create_queue("q")
    q.send_batch(entries(10))
    q.send_batch(entries(10, "n"))
    assert store.stream_position("q", "s") == 0
    assert store.lease_messages("q", "s", 1, 12, 600) == 12
    assert store.lease_messages("q", "s", 1, 15, 600) == 15  # planning again tops up
    b = store.lease_bounds("q", "s", 1, 1)
    leased = [m.text for lo, hi in b.split(3) for m in store.read_leased("q", "s", 1, 1, lo, hi)]
    assert len(leased) == 15 == len(set(leased))
    assert q.stats().in_flight == 15
    # a message whose lease ran out and that someone else received is no longer the lease's
    clock.advance(601)
    [taken] = q.receive(max_messages=1, visibility_timeout=30)
    again = [m.text for lo, hi in b.split(1) for m in store.read_leased("q", "s", 1, 1, lo, hi)]
    assert taken.text not in again and len(again) == 14
    assert store.acknowledge_leases("q", "s", 1) == 14
    assert store.acknowledge_leases("q", "s", 1) == 0  # idempotent
    assert store.stream_position("q", "s") == 1
    assert taken.receipt is not None
    q.delete(taken.receipt)  # its receipt still works: the lease did not take it
    assert q.stats().ready == 5


# a Spark worker's end: the JVM kills it, or PySpark's daemon ends it with os._exit
_BULK_THEN_EXIT = """
import os, sys
from conveyor import Client, SendEntry
pipeline = Client(sys.argv[1]).pipeline("q")
pipeline.lease("s", 1, 25, 600)
pipeline.acknowledge("s", 1)
pipeline.stage("sink", 1, 0, 0, [SendEntry(entry_id="0", body="staged")])
pipeline.publish("sink", 1, [(0, 0)])
os._exit(0)
"""


@pytest.mark.parametrize("kind", ["sqlite", "postgres", "mysql"])
def test_a_bulk_operation_s_totals_outlive_a_process_that_ends_without_exit_hooks(
    kind: str, tmp_path: Path
) -> None:
    """Leases, acknowledgements and publications write the totals they count before they
    return: a Spark worker ends past the exit hooks that write the store's others."""
    url = STORES[kind](tmp_path)
    try:
        with Client(url) as client:
            q = client.create_queue("q")
            q.send_batch(entries(10))
            q.send_batch(entries(10, "n"))
            q.send_batch(entries(5, "o"))
            done = subprocess.run(
                [sys.executable, "-c", _BULK_THEN_EXIT, url],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr
            stats = q.stats()
            assert (stats.sent, stats.received, stats.deleted) == (26, 25, 25)
            assert (stats.ready, stats.in_flight) == (1, 0)
    finally:
        drop(url)


def test_leases_follow_the_receive_rules_and_archive_what_they_acknowledge(
    env: tuple[Client, Pipeline], clock: ManualClock
) -> None:
    client, store = env
    client.create_queue("dlq")
    policy = DeadLetterPolicy(queue="dlq", max_receive_count=1)
    q = client.create_queue("q", archive=True, dead_letter=policy)
    q.send_batch(entries(4))
    [once] = q.receive(max_messages=1, visibility_timeout=10)
    clock.advance(11)
    # the message at its max receive count goes to the dead-letter queue, not into the lease
    assert store.lease_messages("q", "s", 1, 10, 600) == 3
    assert [m.text for m in client.queue("dlq").peek()] == [once.text]
    assert store.acknowledge_leases("q", "s", 1) == 3
    archived = q.archive()
    assert sorted(a.body.decode() for a in archived) == sorted(
        {"m0", "m1", "m2", "m3"} - {once.text}
    )
    assert {a.outcome for a in archived} == {"deleted"}
    assert q.stats().deleted == 3


def test_staged_writes_publish_once_and_drop_failed_attempts(
    env: tuple[Client, Pipeline],
) -> None:
    client, store = env
    q = client.create_queue("q")
    prepared = [q.sending([e]).messages[0] for e in entries(5, "a")]
    retry = [q.sending([e]).messages[0] for e in entries(5, "b")]
    assert store.stage_messages("q", "job:1", 0, 0, 0, prepared) == 5
    assert store.stage_messages("q", "job:1", 0, 1, 0, retry[:2]) == 2  # attempt 0 failed
    assert store.stage_messages("q", "job:1", 0, 1, 1, retry) == 5
    assert q.stats().ready == 0  # hidden until published
    assert store.publish_staged("q", "job:1", 0, [(0, 0), (1, 1)]) == 10
    texts = sorted(m.text for m in q.peek(limit=100))
    assert texts == sorted([f"a{i}" for i in range(5)] + [f"b{i}" for i in range(5)])
    # a replayed batch publishes nothing and leaves nothing behind
    assert store.stage_messages("q", "job:1", 0, 0, 0, prepared) == 5
    assert store.publish_staged("q", "job:1", 0, [(0, 0)]) is None
    assert q.stats().ready + q.stats().delayed == 10
    # abort removes what was staged
    store.stage_messages(
        "q", "job:2", 0, 0, 0, [q.sending([e]).messages[0] for e in entries(3, "c")]
    )
    assert store.discard_staged("q", "job:2", 0) == 3
    assert q.stats().delayed == 0


def test_a_retry_takes_over_the_ids_an_earlier_attempt_staged(
    env: tuple[Client, Pipeline],
) -> None:
    client, store = env
    q = client.create_queue("q")
    q.send("kept", id="x0")
    first = [q.sending([e]).messages[0] for e in entries(3, "x", ids=True)]
    # x0 is in the queue: skipped as it is staged, or (staging aside) as it is published
    kept = 3 if stages_aside(store) else 2
    assert store.stage_messages("q", "imp", 0, 0, 0, first) == kept
    assert store.stage_messages("q", "imp", 0, 0, 1, first) == kept  # takes over x1, x2
    assert store.publish_staged("q", "imp", 0, [(0, 1)]) == 2
    assert sorted(m.id for m in q.peek(limit=10)) == ["x0", "x1", "x2"]
    assert q.get("x0").text == "kept"


def test_a_bulk_import_skips_the_ids_the_queue_holds_and_repeats(
    env: tuple[Client, Pipeline],
) -> None:
    """Hundreds of rows with chosen ids (PostgreSQL copies them, and falls back to a
    statement that skips held ids when the copy meets one): held ids and a repeated id are
    skipped, the rest staged, nothing of the failed copy left behind."""
    client, store = env
    q = client.create_queue("q")
    for i in range(0, 300, 7):
        q.send("kept", id=f"x{i}")
    held = len(range(0, 300, 7))
    rows = [q.sending([e]).messages[0] for e in entries(300, "x", ids=True)]
    rows.append(q.sending([SendEntry(entry_id="r", body="again", id="x1")]).messages[0])
    staged = 301 if stages_aside(store) else 300 - held
    assert store.stage_messages("q", "imp", 0, 0, 0, rows) == staged
    assert store.publish_staged("q", "imp", 0, [(0, 0)]) == 300 - held
    texts = {m.id: m.text for m in q.peek(limit=1000)}
    assert len(texts) == 300 and texts["x7"] == "kept" and texts["x1"] == "x1"
    # with nothing held, the same rows of another queue are all staged at once
    r = client.create_queue("r")
    fresh = [r.sending([e]).messages[0] for e in entries(300, "x", ids=True)]
    assert store.stage_messages("r", "imp", 0, 0, 0, fresh) == 300
    assert store.publish_staged("r", "imp", 0, [(0, 0)]) == 300
    assert r.stats().ready == 300


def test_an_import_of_a_queue_s_own_messages_skips_those_it_still_holds(
    env: tuple[Client, Pipeline],
) -> None:
    """Messages exported from a queue (ids the store made) imported into it again: those it
    still holds are skipped, as any id it holds; one since deleted comes back. On SQLite and
    PostgreSQL such ids carry their row's key and no index of ids holds them."""
    client, store = env
    q = client.create_queue("q")
    sent = [r.result.id for r in q.send_batch(["a", "b", "c"]) if r.result]
    [gone] = q.receive(max_messages=1)
    assert gone.id == sent[0] and gone.receipt is not None
    q.delete(gone.receipt)
    again = [
        q.sending([SendEntry(entry_id=str(n), body=f"again {n}", id=i)]).messages[0]
        for n, i in enumerate(sent)
    ]
    staged = store.stage_messages("q", "imp", 0, 0, 0, again)
    assert staged in (1, 3)  # skipped as they are staged, or as they are published
    assert store.publish_staged("q", "imp", 0, [(0, 0)]) == 1
    texts = {m.id: m.text for m in q.peek(limit=10)}
    assert texts == {sent[0]: "again 0", sent[1]: "b", sent[2]: "c"}, texts


_STAGED_ROWS = Statement(
    "staged_rows",
    "How many of a queue's rows are staged and not published.",
    "SELECT count(*) FROM {messages} WHERE {scope} AND visible_at >= :hidden",
)
_STAGING_ROWS = Statement(
    "staging_rows",
    "How many rows a queue's stages hold in the staging table.",
    "SELECT count(*) FROM {staging} WHERE tag IN (SELECT tag FROM {stages} WHERE queue_id = :qid)",
)


def stages_aside(store: Pipeline) -> bool:
    """Whether the store stages in a staging table (else in the queue's own table)."""
    assert isinstance(store, SQLPipeline)
    return store.d.stages_aside


def staged_rows(store: Pipeline, queue: str) -> int:
    """Rows of `queue` staged and not published: hidden at visible_at >= HIDDEN in its
    table, and in the staging table."""
    assert isinstance(store, SQLPipeline)
    sql = store.store
    d = sql.dialect

    def count(ex: Any) -> int:
        qid, _ = sql.queue_row(ex, queue)
        (n,) = ex.one(d.sql(_STAGED_ROWS, qid), {"hidden": HIDDEN})
        if d.stages_aside:
            (aside,) = ex.one(d.sql(_STAGING_ROWS), {"qid": qid})
            n += aside
        return int(n)

    return sql.read(count)


def test_publishing_refuses_when_a_stage_is_missing_or_short(
    env: tuple[Client, Pipeline],
) -> None:
    """A stage the job names that the store lacks, or one holding fewer rows than it staged
    (what a PostgreSQL restart does to its unlogged staging table), publishes nothing; the
    job can stage again and publish."""
    client, store = env
    q = client.create_queue("q")
    rows = [q.sending([e]).messages[0] for e in entries(4, "s")]
    assert store.stage_messages("q", "job:a", 0, 0, 0, rows) == 4
    assert store.stage_messages("q", "job:a", 0, 1, 0, []) == 0  # an empty partition
    with pytest.raises(StagedWritesLost, match="run the job again"):
        store.publish_staged("q", "job:a", 0, [(0, 0), (1, 0), (2, 0)])  # no stage (2, 0)
    assert q.stats().ready == 0 and staged_rows(store, "q") == 4
    if stages_aside(store):  # (SQLite's staged rows are in the queue's own table)
        lose_one(store)
        with pytest.raises(StagedWritesLost):
            store.publish_staged("q", "job:a", 0, [(0, 0), (1, 0)])
        assert q.stats().ready == 0
    # the job again: a new attempt of each task, published whole
    assert store.stage_messages("q", "job:a", 0, 0, 1, rows) == 4
    assert store.stage_messages("q", "job:a", 0, 1, 1, []) == 0
    assert store.publish_staged("q", "job:a", 0, [(0, 1), (1, 1)]) == 4
    assert sorted(m.text for m in q.peek(limit=10)) == ["s0", "s1", "s2", "s3"]
    assert staged_rows(store, "q") == 0


def test_postgres_stages_in_an_unlogged_table(tmp_path: Path) -> None:
    """What a job stages writes (next to) no WAL on PostgreSQL: its rows wait in an
    unlogged table until publishing copies them into the queue."""
    url = STORES["postgres"](tmp_path)
    try:
        with Client(url) as client:
            q = client.create_queue("q")
            store = client.backend
            assert isinstance(store, SQLStore)
            table = f"{store.dialect.prefix}staging"

            def persistence(ex: Any) -> str:
                row = ex.one("SELECT relpersistence FROM pg_class WHERE relname = %s", (table,))
                return str(row[0])

            def wal(ex: Any) -> int:
                (lsn,) = ex.one("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
                return int(lsn)

            assert store.read(persistence) == "u"
            pipe = client.catalog.pipeline()
            body = "u" * 200
            sends = [SendEntry(entry_id="0", body=f"{body}{i}", id=f"u{i}") for i in range(2000)]
            rows = [q.sending([e]).messages[0] for e in sends]
            before = store.read(wal)
            assert pipe.stage_messages("q", "job:u", 0, 0, 0, rows) == 2000
            staged = store.read(wal) - before
            assert staged < 2000 * 50, f"{staged} bytes of WAL to stage 2,000 rows of 200 bytes"
            assert pipe.publish_staged("q", "job:u", 0, [(0, 0)]) == 2000
            assert staged_rows(pipe, "q") == 0 and q.stats().ready == 2000
    finally:
        drop(url)


_LOSE_STAGING = Statement(
    "lose_staging",
    "One row of the staging table, gone.",
    "DELETE FROM {staging} WHERE body = :body",
)


def lose_one(store: Pipeline) -> None:
    """One row of the staging table (body s0) gone, as a restart empties PostgreSQL's
    unlogged table."""
    assert isinstance(store, SQLPipeline)
    sql = store.store
    d = sql.dialect

    assert sql.write(lambda ex: ex.run(d.sql(_LOSE_STAGING), {"body": b"s0"})) == 1


def test_a_one_off_job_that_died_unfinished_is_cleared_a_day_later(
    env: tuple[Client, Pipeline], clock: ManualClock
) -> None:
    client, store = env
    q = client.create_queue("q", retention=14 * 86400)
    store.stage_messages(
        "q", "job:dead", 0, 0, 0, [q.sending([e]).messages[0] for e in entries(4, "d")]
    )
    # hidden until their job publishes them: neither counted nor listed
    assert (q.stats().delayed, q.stats().ready, q.peek(limit=10)) == (0, 0, [])
    clock.advance(3600)
    store.stage_messages(
        "q", "job:live", 0, 0, 0, [q.sending([e]).messages[0] for e in entries(2, "l")]
    )
    assert store.publish_staged("q", "job:live", 0, [(0, 0)]) == 2
    assert staged_rows(store, "q") == 4  # an hour old: its job may still be running
    clock.advance(STAGE_HOURS * 3600)
    store.stage_messages(
        "q", "job:next", 0, 0, 0, [q.sending([e]).messages[0] for e in entries(1, "n")]
    )
    assert staged_rows(store, "q") == 1  # the dead job's rows went as the next job began
    assert store.publish_staged("q", "job:next", 0, [(0, 0)]) == 1
    assert staged_rows(store, "q") == 0
    assert sorted(m.text for m in q.peek(limit=10)) == ["l0", "l1", "n0"]
    assert q.stats().delayed == 0


def test_remove_messages_takes_many_ids_at_once(env: tuple[Client, Pipeline]) -> None:
    client, store = env
    q = client.create_queue("q")
    sent = [r.result.id for r in q.send_batch(entries(10, "m"))]
    assert store.remove_messages("q", [*sent[:6], "no-such-id"]) == 6
    assert sorted(m.text for m in q.peek(limit=20)) == [f"m{i}" for i in range(6, 10)]
    assert store.remove_messages("q", sent[:6]) == 0  # gone already: skipped
    assert q.stats().deleted == 0  # moved on by a job, not deleted


@pytest.mark.parametrize("kind", ["sqlite", "postgres", "mysql"])
def test_an_upgrade_drops_what_the_old_staging_left_hidden(kind: str, tmp_path: Path) -> None:
    """Stores before the stages table hid staged messages at visible_at = 1e15 and listed
    them in a staged table: the upgrade removes both, and staging works after it."""
    url = STORES[kind](tmp_path)
    try:
        with Client(url) as client:
            q = client.create_queue("q")
            q.send_batch(entries(2, "kept"))
            q.send("old")
            store = client.backend
            assert isinstance(store, SQLStore)
            d = store.dialect
            p = d.prefix

            def downgrade(ex: Any) -> None:
                qid, _ = store.queue_row(ex, "q")
                hide = Statement(
                    "hide", "A message hidden as staged.",
                    "UPDATE {messages} SET visible_at = 1e15 WHERE {scope} AND body = :body",
                )  # fmt: skip
                ex.run(d.sql(hide, qid), {"body": b"old"})
                ex.run(f"DROP TABLE {p}stages")
                if kind != "sqlite":
                    ex.run(f"DROP TABLE {p}staging")
                ex.run(
                    f"CREATE TABLE {p}staged (queue_id BIGINT, sink VARCHAR(255), batch BIGINT,"
                    " part INTEGER, attempt INTEGER, mkey BIGINT)"
                )
                staged = Statement(
                    "staged", "A stage as version 3 kept it.",
                    f"INSERT INTO {p}staged VALUES (:qid, 'job:x', 0, 0, 0, 1)",
                )  # fmt: skip
                ex.run(d.sql(staged), {"qid": qid})
                # the later versions' columns and tables, which the upgrade adds again
                ex.run(f"DROP TABLE {p}counts")
                ex.run(f"ALTER TABLE {p}topics DROP COLUMN settings")
                ex.run(f"ALTER TABLE {p}subscriptions DROP COLUMN attributes")
                if kind == "sqlite":
                    # version 2, with the column names it had then
                    ex.run("ALTER TABLE dedup RENAME COLUMN dkey TO key")
                    ex.run("ALTER TABLE archive RENAME COLUMN queue_name TO queue")
                    ex.run("ALTER TABLE consumers RENAME COLUMN queue_name TO queue")
                    ex.run("PRAGMA user_version = 2")
                else:
                    if kind == "mysql":
                        ex.run(sqlstores.mysql_version_4_order(p))
                    else:
                        for statement in sqlstores.postgres_every_id_indexed(p):
                            ex.run(statement)
                    ex.run(f"UPDATE {p}schema SET version = 3")

            store.db.write(downgrade)
        with Client(url) as again:
            q = again.queue("q")
            assert sorted(m.text for m in q.peek(limit=10)) == ["kept0", "kept1"]
            assert q.stats().delayed == 0
            upgraded = again.catalog.pipeline()
            upgraded.stage_messages(
                "q", "job:y", 0, 0, 0, [q.sending([e]).messages[0] for e in entries(1, "y")]
            )
            assert upgraded.publish_staged("q", "job:y", 0, [(0, 0)]) == 1
    finally:
        drop(url)


def test_imports_and_redrives_issue_statements_in_proportion_to_their_rows(
    tmp_path: Path,
) -> None:
    """What a job's tasks issue to stage an import (chunks of 5,000, as the data source
    stages) and publish it, and to remove a redrive's dead letters: ten times the rows, at
    most (about) ten times the statements — never a lookup of the whole queue per chunk."""
    chunk = 5000
    counts: dict[str, list[int]] = {"import": [], "redrive": []}
    for n in (5_000, 50_000):
        with Client(f"sqlite:///{tmp_path}/s{n}.db?durability=normal") as client:
            client.create_queue("q")
            client.create_queue("dlq")
            dead = client.backend.send(
                "dlq", [NewMessage(id="", body=b"dead", generated_id=True)] * n
            )
            store = client.backend
            assert isinstance(store, SQLStore) and isinstance(store.db, SQLiteConnections)
            conn = store.db.exec().conn
            seen: list[str] = []
            conn.set_trace_callback(seen.append)
            try:
                bulk = client.pipeline("q")
                entries = [SendEntry(entry_id="0", body=f"m{i}", id=f"id-{i}") for i in range(n)]
                for i in range(0, n, chunk):
                    assert bulk.stage("job:x", 0, 0, 0, entries[i : i + chunk]) == chunk
                assert bulk.publish("job:x", 0, [(0, 0)]) == n
                counts["import"].append(len(seen))
                seen.clear()
                ids = [r.id for r in dead]
                removed = sum(
                    client.pipeline("dlq").remove(ids[i : i + chunk]) for i in range(0, n, chunk)
                )
                assert removed == n
                counts["redrive"].append(len(seen))
            finally:
                conn.set_trace_callback(None)
            assert client.queue("q").stats().ready == n
    for job, (small, large) in counts.items():
        assert large <= 11 * small, f"{job}: {small} statements for 5,000, {large} for 50,000"
    # a few dozen statements per thousand rows staged, a few per thousand removed
    assert counts["import"][1] <= 50 * 30 and counts["redrive"][1] <= 50 * 5, counts


def test_plain_rows_are_checked_and_encoded_as_sends_are(tmp_path: Path) -> None:
    """What a sink's task makes of rows carrying only an id and a body (`sending` of bodies
    with `ids`, taken for an Arrow batch without attributes, groups or priorities) is what
    `sending` makes of the same entries, refusals included."""
    pa = pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark")
    from conveyor.exceptions import InvalidInput
    from conveyor.spark.rows import messages_from

    with Client(f"sqlite:///{tmp_path}/p.db") as client:
        q = client.create_queue("q", compress_over=100, delay=5, max_message_bytes=1024)
        given: list[tuple[str | None, bytes | str]] = [("a", b"x"), (None, "y"), ("b", b"z" * 500)]
        plain = q.sending([b for _, b in given], ids=[i for i, _ in given]).messages
        one_by_one = [
            q.sending([SendEntry(entry_id="0", body=b, id=i)]).messages[0] for i, b in given
        ]
        assert [vars(m) for m in plain] == [vars(m) for m in one_by_one]
        assert plain[2].compressed and plain[0].delay == 5 and plain[1].generated_id
        refused: list[tuple[list[str | None], list[bytes], str]] = [
            (["bad id"], [b"x"], "message id 'bad id'"),
            ([""], [b"x"], "message id ''"),
            ([None], [b""], "empty"),
            ([None], [b"x" * 1025], "1,?024"),
        ]
        for ids, bodies, says in refused:
            with pytest.raises(InvalidInput, match=says):
                q.sending(bodies, ids=ids)
        fifo = client.create_queue("f.fifo", fifo=True)
        with pytest.raises(InvalidInput, match="every message needs a group_id"):
            fifo.sending([b"x"], ids=[None])

        maps = pa.map_(pa.string(), pa.string())
        exported = pa.RecordBatch.from_pydict(
            {
                "id": ["a", "b"], "body": [b"1", b"2"], "body_text": ["1", "2"],
                "attributes": pa.array([[], None], type=maps),
                "group_id": pa.array([None, None], type=pa.string()),
                "priority": pa.array([0, None], type=pa.int32()),
            }
        )  # fmt: skip
        as_plain = messages_from(q, exported)
        assert [m.id for m in as_plain] == ["a", "b"] and as_plain[1].body == b"2"
        tagged = exported.set_column(3, "attributes", pa.array([[("k", "v")], None], type=maps))
        kept = messages_from(q, tagged)
        assert kept[0].attributes == {"k": "v"} and kept[1].attributes == {}
        urgent = exported.set_column(5, "priority", pa.array([0, 3], type=pa.int32()))
        assert [m.priority for m in messages_from(q, urgent)] == [0, 3]
        texts = pa.RecordBatch.from_pydict({"body_text": ["t1", "t2"]})
        assert [m.body for m in messages_from(q, texts)] == [b"t1", b"t2"]
