"""What the PostgreSQL and MySQL/MariaDB stores do beyond the contract: schema versions and
table prefixes, hostile values kept as data, options checked up front, and long polls woken
across processes (LISTEN/NOTIFY on PostgreSQL, a bounded poll on MySQL)."""

from __future__ import annotations

import functools
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from conveyor import (
    Client,
    DeadLetterPolicy,
    InvalidInput,
    ManualClock,
    Message,
    MessageNotFound,
    OutcomeUnknown,
    Producer,
    SendEntry,
    StoreUnavailable,
    Worker,
)
from conveyor.backends.sql import accounts as sql_accounts
from conveyor.backends.sql.connections import CursorExec, Params, ServerConnections
from conveyor.backends.sql.postgres import PostgresConnections
from conveyor.backends.sql.schema import SERVER_MIGRATIONS
from conveyor.backends.sql.server_statements import PG_ROW_ID
from conveyor.backends.sql.statement import positional
from conveyor.backends.sql.statements import WALK
from conveyor.backends.sql.store import SQLStore
from conveyor.ids import row_id, rowid_of
from conveyor.models import NewMessage
from conveyor.urls import open_backend

from .support import sqlstores
from .support.sqlstores import fresh, run_cursor, sql_backend
from .support.waiting import until

SCHEMA_VERSION = len(SERVER_MIGRATIONS)


def test_migrations_are_versioned_and_applied_once(kind: str, urls: list[str]) -> None:
    url = fresh(kind, urls)
    backend = sql_backend(url)
    try:
        assert backend.migrate() == (0, SCHEMA_VERSION)
        assert backend.migrate() == (SCHEMA_VERSION, SCHEMA_VERSION)

        def version(cur: Any) -> int:
            cur.execute(f"SELECT version FROM {backend.dialect.prefix}schema")
            return int(cur.fetchone()[0])

        assert run_cursor(backend, version) == SCHEMA_VERSION
    finally:
        backend.close()


def test_upgrade_from_an_older_schema(kind: str, urls: list[str]) -> None:
    """A database at version 1 is brought to the current version, keeping its queues."""
    url = fresh(kind, urls)
    old = sql_backend(url)
    with Client(backend=old) as client:
        client.create_queue("kept").send("still here")

    def downgrade(cur: Any) -> None:
        p = old.dialect.prefix
        for table in ("listeners", "leases", "streams", "stages", "sinks", "staging", "counts"):
            cur.execute(f"DROP TABLE {p}{table}")
        cur.execute(f"ALTER TABLE {p}topics DROP COLUMN settings")
        cur.execute(f"ALTER TABLE {p}subscriptions DROP COLUMN attributes")
        if kind == "mysql":
            cur.execute(sqlstores.mysql_version_4_order(old.dialect.prefix))
        else:
            for statement in sqlstores.postgres_every_id_indexed(p):
                cur.execute(statement)
        cur.execute(f"UPDATE {old.dialect.prefix}schema SET version = 1")

    again = sql_backend(url)
    run_cursor(again, downgrade)
    again.close()
    upgraded = sql_backend(url)
    try:
        assert upgraded.migrate() == (1, SCHEMA_VERSION)
        with Client(backend=upgraded) as client:
            [m] = client.queue("kept").receive()
            assert m.body == b"still here"
    finally:
        upgraded.close()


def test_a_newer_schema_is_refused(kind: str, urls: list[str]) -> None:
    url = fresh(kind, urls)
    backend = sql_backend(url)
    backend.migrate()

    def bump(cur: Any) -> None:
        cur.execute(f"UPDATE {backend.dialect.prefix}schema SET version = 999")

    run_cursor(backend, bump)
    backend.close()
    with Client(url) as client, pytest.raises(StoreUnavailable, match="upgrade Conveyor"):
        client.list_queues()


def test_prefixes_keep_deployments_apart(kind: str, urls: list[str]) -> None:
    a, b = fresh(kind, urls), fresh(kind, urls)
    with Client(a) as ca, Client(b) as cb:
        ca.create_queue("orders").send("for a")
        cb.create_queue("orders", visibility_timeout=5)
        assert ca.list_queues() == cb.list_queues() == ["orders"]
        assert [m.body for m in cb.queue("orders").receive()] == []
        assert [m.body for m in ca.queue("orders").receive()] == [b"for a"]


def test_hostile_values_are_stored_as_data(kind: str, urls: list[str]) -> None:
    hostile = "x');DROP_TABLE--\\\"%s%%"
    with Client(fresh(kind, urls)) as client:
        q = client.create_queue("hostile.fifo", fifo=True)
        q.send(
            hostile.encode() + b"\x00\xff",
            id=hostile,
            group_id=hostile,
            dedup_id=hostile,
            attributes={"k": hostile},
        )
        [m] = q.receive()
        assert (m.id, m.group_id, m.dedup_id) == (hostile, hostile, hostile)
        assert m.body == hostile.encode() + b"\x00\xff"
        assert m.attributes == {"k": hostile}
        assert q.get(hostile).id == hostile
        assert client.list_queues() == ["hostile.fifo"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"prefix": "Bad-Prefix"}, "table prefix"),
        ({"pool_size": "0"}, "pool_size"),
        ({"pool_size": "many"}, "option"),
        ({"lock_timeout": "0"}, "lock_timeout must be a number of seconds from 1 to 3600"),
        ({"lock_timeout": "soon"}, "lock_timeout"),
    ],
)
def test_bad_options_are_refused_before_connecting(
    kind: str, options: dict[str, str], message: str
) -> None:
    query = "&".join(f"{k}={v}" for k, v in options.items())
    with pytest.raises(InvalidInput, match=message):
        open_backend(f"{sqlstores.BASES[kind]}?{query}")


def test_an_unreachable_server_fails_at_once(kind: str) -> None:
    url = {
        "postgres": "postgresql://postgres@127.0.0.1:1/test",
        "mysql": "mysql://root@127.0.0.1:1/test",
    }[kind]
    started = time.monotonic()
    with Client(url) as client, pytest.raises(StoreUnavailable, match="cannot connect"):
        client.list_queues()
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("kind", ["postgres"], indirect=True)
def test_notify_wakes_a_waiter_in_another_process(kind: str, urls: list[str]) -> None:
    """Two stores with different keys share nothing in this process: only the database's
    NOTIFY can wake the waiter, whose own polling is set to once a minute."""
    url = fresh(kind, urls)
    sender = Client(url)
    waiter = Client(f"{url}&application_name=waiter")
    try:
        sender.create_queue("wake")
        assert sender.backend.key != waiter.backend.key
        token = waiter.backend.change_token("wake")
        woke: list[float] = []
        started = threading.Event()

        def wait() -> None:
            started.set()
            waiter.backend.wait_for_messages("wake", token, 60.0)
            woke.append(time.monotonic())

        thread = threading.Thread(target=wait)
        thread.start()
        started.wait()
        waiting = waiter.backend
        assert isinstance(waiting, SQLStore) and isinstance(waiting.db, PostgresConnections)
        waiting.db._listening.wait(5)
        sending = sender.backend
        assert isinstance(sending, SQLStore) and isinstance(sending.db, PostgresConnections)
        deadline = time.monotonic() + 5
        sent_at = 0.0
        while not woke and time.monotonic() < deadline:
            # the sender reads the listener registry at most once a second
            sending.db._listened_at = -1e18
            sent_at = time.monotonic()
            sender.queue("wake").send("hello")
            thread.join(0.5)
        thread.join(5)
        assert woke, "the waiter was not woken by the send"
        assert woke[0] - sent_at < 0.5
    finally:
        sender.close()
        waiter.close()


@pytest.mark.parametrize("kind", ["mysql"], indirect=True)
def test_mysql_long_poll_finds_another_process_send(kind: str, urls: list[str]) -> None:
    """MySQL has no LISTEN: a waiter polls with a back-off bounded by poll_interval."""
    url = fresh(kind, urls)
    with Client(url) as client:
        client.create_queue("poll")
        got: list[float] = []

        def receive() -> None:
            client.queue("poll").receive(wait=20)
            got.append(time.time())

        thread = threading.Thread(target=receive)
        thread.start()
        time.sleep(1.0)  # long enough for the waiter's back-off to reach its bound
        sender = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys, time; from conveyor import Client;"
                " Client(sys.argv[1]).queue('poll').send('hi'); print(time.time())",
                url,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        thread.join(20)
        assert got, "the long poll did not return"
        assert got[0] - float(sender.stdout) < client.backend.poll_interval + 0.3


def test_producer_batches_are_one_insert_and_workers_pop_batches(
    kind: str, urls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = fresh(kind, urls)
    with Client(url) as client:
        q = client.create_queue("push")
        backend = client.backend
        assert isinstance(backend, SQLStore) and isinstance(backend.db, ServerConnections)
        statements: list[str] = []
        real_transaction = backend.db._transaction

        class Spy:
            def __init__(self, cur: Any) -> None:
                self._cur = cur

            def execute(self, sql: str, params: Any = None) -> Any:
                statements.append(sql)
                return self._cur.execute(sql, params)

            def __getattr__(self, name: str) -> Any:
                return getattr(self._cur, name)

        @contextmanager
        def spying(tx: bool) -> Iterator[Any]:
            with real_transaction(tx) as cur:
                yield Spy(cur)

        monkeypatch.setattr(backend.db, "_transaction", spying)
        with Producer(q, batch_size=10, linger=5) as producer:
            futures = [producer.send(f"m{i}") for i in range(100)]
            producer.flush()
        assert len({f.result().id for f in futures}) == 100
        table = backend.dialect.sql.style.quote(f"{backend.dialect.prefix}messages")
        inserts = [s for s in statements if f"INSERT INTO {table}" in s]
        assert len(inserts) == 10  # ten multi-row inserts, not a hundred
        assert q.stats().ready == 100

        popped: list[int] = []
        seen: list[str] = []
        worker = Worker(q, lambda m: seen.append(m.text), concurrency=10, batch_size=10)
        real_receive = backend.receive

        def counting_receive(queue: str, n: int, vt: float) -> list[Message]:
            got = real_receive(queue, n, vt)
            popped.append(len(got))
            return got

        monkeypatch.setattr(backend, "receive", counting_receive)
        assert worker.run(until_empty=True, handle_signals=False) == 100
        assert sorted(seen) == sorted(f"m{i}" for i in range(100))
        assert max(popped) == 10


def _lost_connection(kind: str) -> Exception:
    """What the driver raises when the connection drops (after the server committed)."""
    if kind == "postgres":
        import psycopg

        return psycopg.OperationalError("server closed the connection unexpectedly")
    import pymysql

    return pymysql.err.OperationalError(2013, "Lost connection to server during query")


@pytest.mark.parametrize("bare", [True, False], ids=["bodies", "with-attributes"])
def test_a_send_retried_after_an_unconfirmed_commit_stores_each_message_once(
    kind: str, urls: list[str], monkeypatch: pytest.MonkeyPatch, bare: bool
) -> None:
    with Client(fresh(kind, urls)) as client:
        q = client.create_queue("retry")
        backend = client.backend
        assert isinstance(backend, SQLStore)
        method = "insert_bare" if bare else "insert"
        real = getattr(backend.dialect, method)
        calls: list[int] = []

        def commit_then_lose_the_answer(*args: Any, **options: Any) -> Any:
            result = real(*args, **options)  # autocommit: the rows are stored
            calls.append(1)
            if len(calls) == 1:
                raise _lost_connection(kind)
            return result

        monkeypatch.setattr(backend.dialect, method, commit_then_lose_the_answer)
        if bare:
            results = q.send_batch([f"m{i}" for i in range(5)])
        else:
            results = q.send_batch(
                [SendEntry(entry_id=str(i), body=f"m{i}", attributes={"n": i}) for i in range(5)]
            )
        # the first attempt's answer was lost; the second found its rows and stored nothing
        assert len(calls) == 1
        assert all(r.error is None for r in results)
        assert q.stats().ready == 5
        got = q.receive(10, wait=0)
        assert sorted(m.text for m in got) == [f"m{i}" for i in range(5)]
        assert {m.id for m in got} == {r.result.id for r in results if r.result is not None}


def test_a_publish_whose_commit_answer_was_lost_is_not_stored_again(
    kind: str, urls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A publish commits its copies, a consumer takes and deletes its copy, and then the
    answer to the commit is lost: the retry cannot know what the first attempt did, and says
    so (OutcomeUnknown) rather than storing the copies again."""
    url = fresh(kind, urls)
    with Client(url) as client, Client(url) as other:
        q = client.create_queue("news-copies")
        client.create_topic("news")
        client.subscribe("news", "news-copies")
        backend = client.backend
        assert isinstance(backend, SQLStore) and isinstance(backend.db, ServerConnections)
        db = backend.db
        real = db._transaction
        lost: list[int] = []

        @contextmanager
        def commit_then_lose_the_answer(tx: bool) -> Iterator[Any]:
            with real(tx) as cur:
                yield cur
            if tx and not lost:  # committed; a consumer is quick
                lost.append(1)
                consumer = other.queue("news-copies")
                [m] = consumer.receive(wait=0)
                consumer.delete(m.receipt or "")
                raise _lost_connection(kind)

        monkeypatch.setattr(db, "_transaction", commit_then_lose_the_answer)
        with pytest.raises(OutcomeUnknown, match="may have been stored"):
            client.publish("news", "hello")
        assert lost == [1]
        assert q.receive(wait=0) == [] and q.stats().total == 0


@contextmanager
def another_transaction(kind: str, url: str) -> Iterator[tuple[Any, Callable[[str], bool]]]:
    """A cursor of a transaction of its own on the store's database (commit it with
    `cursor.connection.commit()`), and `waits(statement)`: whether a statement that starts
    so (MySQL; on PostgreSQL any statement) waits for a lock, as one waits for a row or a key
    that transaction holds (the statements it can wait at take microseconds otherwise)."""
    if kind == "postgres":
        holder: Any = psycopg.connect(sqlstores.PG_URL)
        watcher: Any = psycopg.connect(sqlstores.PG_URL, autocommit=True)
        query = (
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s"
        )
    else:
        holder = sqlstores.mysql_connect(url)
        watcher = sqlstores.mysql_connect(url)
        holder.cursor().execute("BEGIN")
        query = (
            "SELECT count(*) FROM information_schema.processlist WHERE info LIKE %s"
            " AND info LIKE %s"
        )
    mine = sqlstores.statements_of(url)  # the server's other sessions are other tests'

    def waits(statement: str) -> bool:
        cur = watcher.cursor()
        cur.execute(query, (mine,) if kind == "postgres" else (f"{statement}%", mine))
        return int(cur.fetchone()[0]) > 0

    try:
        yield holder.cursor(), waits
    finally:
        holder.close()
        watcher.close()


def in_thread(call: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    """`call` started in a thread; what it returned or raised, once it ends."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_a_message_deleted_while_it_is_moved_or_removed_stays_deleted(
    kind: str, urls: list[str]
) -> None:
    """A move to the dead-letter queue, or an admin's remove, that found a message which
    another call deletes while it waits for the message's row fails with MessageNotFound and
    changes nothing: the deleted message does not come back in the dead-letter queue, and
    its delete is counted once."""
    url = fresh(kind, urls)
    with Client(url) as client:
        client.create_queue("dead")
        q = client.create_queue(
            "work",
            dead_letter=DeadLetterPolicy(queue="dead", max_receive_count=5),
            archive=True,
        )
        backend = client.backend
        assert isinstance(backend, SQLStore)
        table = f"{backend.dialect.prefix}messages"
        for edit in (q.move_to_dlq, q.remove):
            sent = q.send("x")
            with another_transaction(kind, url) as (other, waits):
                other.execute(f"SELECT id FROM {table} WHERE id = %s FOR UPDATE", (sent.id,))
                thread, outcome = in_thread(functools.partial(edit, sent.id))
                until(lambda: waits(f"DELETE FROM `{table}`"), what="the edit waiting for the row")
                other.execute(f"DELETE FROM {table} WHERE id = %s", (sent.id,))
                other.connection.commit()
                thread.join(30)
            assert [type(e) for e in outcome] == [MessageNotFound], outcome
            assert client.queue("dead").peek(10) == [] and q.peek(10) == []
            assert q.archive() == []
        backend.accounts.flush()
        assert q.stats().deleted == 0  # the deletes made behind the store's back


def test_a_redrive_replaces_a_copy_another_call_writes_to_the_destination_meanwhile(
    kind: str, urls: list[str]
) -> None:
    """A redrive that looked for the message's id in the destination before another call
    wrote a message of that id there (committed while the redrive's insert waited for it)
    replaces that one too: one message of the id is left, the redriven one."""
    url = fresh(kind, urls)
    with Client(url) as client:
        dead = client.create_queue("dead")
        work = client.create_queue("work")
        sent = dead.send("redriven")
        backend = client.backend
        assert isinstance(backend, SQLStore)
        table = f"{backend.dialect.prefix}messages"
        work_id, _ = backend.lookup("work")
        with another_transaction(kind, url) as (other, waits):
            now = time.time()
            other.execute(
                f"INSERT INTO {table} (queue_id, nprio, id, body, sent_at, visible_at)"
                " VALUES (%s, 0, %s, %s, %s, %s)",
                (work_id, sent.id, b"written meanwhile", now, now),
            )
            thread, outcome = in_thread(lambda: dead.redrive(to="work"))
            until(
                lambda: waits(f"INSERT IGNORE INTO `{table}`"),
                what="the redrive's insert waiting for the other",
            )
            other.connection.commit()
            thread.join(30)
        assert outcome == [[sent.id]]
        assert [m.text for m in work.peek(10)] == ["redriven"] and dead.peek(10) == []


def test_the_periodic_sweep_costs_what_it_removes(
    kind: str, urls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A receive sweeps once a minute: messages past their deadline (by the deadline index)
    and past retention at the queue's head, a bounded number of rows at a time; stats sweep
    the whole queue."""
    monkeypatch.setattr(sql_accounts, "SWEEP_ROWS", 3)
    clock = ManualClock()
    with Client(fresh(kind, urls), clock=clock) as client:
        # at most once: there a message past its deadline expires (gq's rule)
        q = client.create_queue(
            "sweep", retention=120, visibility_timeout=300, delivery="at-most-once"
        )
        backend = client.backend
        assert isinstance(backend, SQLStore)
        q.send_batch([f"old{i}" for i in range(5)])
        q.send("late", deadline=clock.now() + 30)
        clock.advance(121)
        q.send("young")

        def rows() -> int:
            def count(cur: Any) -> int:
                cur.execute(f"SELECT count(*) FROM {backend.dialect.prefix}messages")
                return int(cur.fetchone()[0])

            return int(run_cursor(backend, count))

        [m] = q.receive(10)  # sweeps: three old messages from the head, and "late"
        assert m.text == "young"
        assert rows() == 3  # two old ones wait for the next sweep; "young" in flight
        clock.advance(61)
        assert q.receive(10) == []  # sweeps again
        assert rows() == 1
        assert q.stats().expired == 6


def test_paging_reads_one_range_of_the_order_index(kind: str, urls: list[str]) -> None:
    """A page of `peek` after a place in delivery order is one range of the order index,
    whatever the planner's statistics say: never a walk from the queue's head."""
    with Client(fresh(kind, urls)) as client:
        q = client.create_queue("deep")
        for start in range(0, 3000, 500):
            q.backend.send("deep", [q.sending([SendEntry(entry_id="0", body=f"m{i}")]).messages[0]
                                    for i in range(start, start + 500)])  # fmt: skip
        backend = client.backend
        assert isinstance(backend, SQLStore)
        d = backend.dialect
        qid, _ = backend.lookup("deep")
        middle = q.peek(limit=1500)[-1].sequence or 0
        values = {"page": 100, **d.after_values(middle)}

        def plan(cur: Any) -> str:
            sql = d.sql(WALK, qid)
            cur.execute(f"EXPLAIN {sql}", positional(sql, values))
            return "\n".join(str(row) for row in cur.fetchall())

        explained = run_cursor(backend, plan)
        if kind == "postgres":
            assert "Index Cond" in explained and "nprio, seq" in explained.replace("ROW(", "")
            assert "Sort" not in explained and "Filter" not in explained, explained
        else:  # MySQL/MariaDB: a range on the primary key, delivery order, no filesort
            assert "range" in explained and "filesort" not in explained, explained
        assert [m.text for m in q.peek(limit=3, after=middle)] == ["m1500", "m1501", "m1502"]


def test_ids_are_found_through_the_id_index_whatever_the_statistics(
    kind: str, urls: list[str]
) -> None:
    """A lookup of many message ids (redrive, import) probes the (id, queue_id) index (on
    PostgreSQL, the primary key for the ids the store made, which carry their row's key, and
    the index of ids chosen by senders for the others), even where the planner's statistics,
    gathered before a queue grew, call that queue empty: never a walk of the queue through
    its order index, never a scan of the table."""
    with Client(fresh(kind, urls)) as client:
        backend = client.backend
        assert isinstance(backend, SQLStore)
        d = backend.dialect
        table = f"{d.prefix}messages"
        client.create_queue("small")
        big = client.create_queue("big")
        backend.send("small", [NewMessage(id="", body=b"s", generated_id=True)] * 2000)
        if kind == "postgres":
            no_autovacuum = f"ALTER TABLE {table} SET (autovacuum_enabled = false)"
            run_cursor(backend, lambda cur: cur.execute(no_autovacuum))
        analyze = f"ANALYZE {table}" if kind == "postgres" else f"ANALYZE TABLE {table}"
        run_cursor(backend, lambda cur: cur.execute(analyze))
        for _ in range(6):  # the statistics say nothing of these
            backend.send("big", [NewMessage(id="", body=b"b", generated_id=True)] * 5000)
        chosen = [NewMessage(id=f"chosen-{i}", body=b"c") for i in range(500)]
        backend.send("big", chosen)
        wanted = [m.id for m in big.peek(limit=1000, after=0)][::2] + [m.id for m in chosen]
        qid, _ = backend.lookup("big")

        class Explain(CursorExec):
            plans: list[str] = []

            def rows(self, sql: str, params: Params = ()) -> list[Any]:
                explain = super().rows("EXPLAIN " + sql, positional(sql, params))
                self.plans.append("\n".join(str(r) for r in explain))
                return super().rows(sql, params)

        found = run_cursor(backend, lambda cur: d.find_many(Explain(cur), qid, wanted))
        assert len(found) == len(wanted)
        plan = "\n".join(Explain.plans)
        assert "messages_order" not in plan, plan
        if kind == "postgres":
            assert "messages_pkey" in plan and "messages_by_chosen_id" in plan, plan
        else:
            assert "by_id" in plan, plan
        if kind == "postgres":
            assert "Seq Scan" not in plan, plan


@pytest.mark.parametrize("kind", ["postgres"], indirect=True)
def test_ids_the_store_makes_carry_their_row_key_and_stay_out_of_the_id_index(
    kind: str, urls: list[str]
) -> None:
    """PostgreSQL: every way a standard queue's send inserts makes its ids from the row's
    key, outside the index of ids; an id chosen by a sender is in it. Both are found by id,
    a sender's id equal to one the queue holds (an id the store made, sent again) is a
    duplicate, and the same id goes into another queue."""
    with Client(fresh(kind, urls)) as client:
        backend = client.backend
        assert isinstance(backend, SQLStore)
        table = f"{backend.dialect.prefix}messages"
        q, other = client.create_queue("made"), client.create_queue("other")
        one = q.send("one").id
        batch = [r.result.id for r in q.send_batch(["a", "b", "c"]) if r.result]
        urgent = q.send_batch([SendEntry(entry_id=str(i), body="u", priority=3) for i in range(12)])
        tagged = q.send("t", attributes={"k": "v"}).id
        [chosen] = backend.send("made", [NewMessage(id="chosen-1", body=b"c")])
        made = [one, *batch, *(r.result.id for r in urgent if r.result), tagged]

        def rows(cur: Any) -> dict[str, tuple[int, bool]]:
            cur.execute(f"SELECT id, seq, indexed FROM {table}")
            return {str(i): (int(seq), bool(ix)) for i, seq, ix in cur.fetchall()}

        stored = run_cursor(backend, rows)
        assert len(stored) == len(made) + 1 and chosen.id == "chosen-1"
        for message_id in made:
            seq, indexed = stored[message_id]
            assert rowid_of(message_id) == seq and not indexed, message_id
        assert stored["chosen-1"][1] and rowid_of("chosen-1") is None
        for message_id in [*made, "chosen-1"]:
            assert q.get(message_id).id == message_id
        again = backend.send("made", [NewMessage(id=one, body=b"again")])
        assert again[0].duplicate and len(run_cursor(backend, rows)) == len(stored)
        assert not backend.send("other", [NewMessage(id=one, body=b"copy")])[0].duplicate
        assert other.get(one).text == "copy" and q.get(one).text == "one"
        qid, _ = backend.lookup("made")
        d = backend.dialect
        found = run_cursor(backend, lambda cur: d.find_many(CursorExec(cur), qid, made))
        assert sorted(key for key, _ in found) == sorted(stored[i][0] for i in made)


@pytest.mark.parametrize("kind", ["postgres"], indirect=True)
def test_the_insert_makes_the_ids_conveyor_ids_makes(kind: str, urls: list[str]) -> None:
    """PostgreSQL's SQL for an id made from a row's key (server_statements.py's PG_ROW_ID) gives
    `conveyor.ids.row_id`'s id for keys up to the sequence's last and any random bits, and
    `rowid_of` reads the key back."""
    keys = [1, 7, 8, 32767, 32768, 2**31 - 1, 2**31, 2**40 + 12345, 2**47 + 3, 2**62 + 5]
    rands = [0, 1, 2**48 - 1, 2**48, 2**59 - 1, random.getrandbits(59)]
    with Client(fresh(kind, urls)) as client:
        backend = client.backend
        assert isinstance(backend, SQLStore)

        def made(cur: Any) -> list[str]:
            cur.execute(
                f"SELECT {PG_ROW_ID} FROM unnest(%s::int8[], %s::int8[]) AS v(s, r)",
                ([k for k in keys for _ in rands], [r for _ in keys for r in rands]),
            )
            return [str(i) for (i,) in cur.fetchall()]

        ids = run_cursor(backend, made)
    assert ids == [row_id(k, r) for k in keys for r in rands]
    assert [rowid_of(i) for i in ids] == [k for k in keys for _ in rands]


@pytest.mark.parametrize("kind", ["postgres"], indirect=True)
def test_a_receive_rewrites_its_rows_on_their_own_pages(kind: str, urls: list[str]) -> None:
    """PostgreSQL: a receive rewrites its rows' visible time, count and token, none of them
    indexed, and the messages table leaves room on each page for those new versions, so
    that even ten rows of one full page stay on it (a HOT update: no index entries are
    written). A database made with less room gets it as it upgrades."""
    url = fresh(kind, urls)
    with Client(url) as client:
        backend = client.backend
        assert isinstance(backend, SQLStore)
        table = f"{backend.dialect.prefix}messages"
        q = client.create_queue("hot")
        for _ in range(10):
            q.send_batch(["x" * 100] * 10)

        def pages(cur: Any) -> dict[str, int]:
            cur.execute(f"SELECT id, (ctid::text::point)[0]::int FROM {table}")
            return {str(id_): int(page) for id_, page in cur.fetchall()}

        before = run_cursor(backend, pages)
        assert len(set(before.values())) > 2  # the queue fills pages, the first one full
        taken = q.receive(10)
        assert len(taken) == 10 and len({before[m.id] for m in taken}) == 1
        after = run_cursor(backend, pages)
        assert [after[m.id] for m in taken] == [before[m.id] for m in taken]

        def older(cur: Any) -> None:  # as the versions before made it
            p = backend.dialect.prefix
            cur.execute(f"ALTER TABLE {table} SET (fillfactor = 70)")
            cur.execute(f"DROP TABLE {p}counts")  # the versions after
            for statement in sqlstores.postgres_every_id_indexed(p):
                cur.execute(statement)
            cur.execute(f"UPDATE {p}schema SET version = version - 3")

        run_cursor(backend, older)

    def options(cur: Any) -> list[str]:
        cur.execute("SELECT reloptions FROM pg_class WHERE relname = %s", (table,))
        return list(cur.fetchone()[0])

    upgraded = sql_backend(url)
    try:
        assert upgraded.migrate() == (SCHEMA_VERSION - 3, SCHEMA_VERSION)
        assert run_cursor(upgraded, options) == ["fillfactor=50"]
    finally:
        upgraded.close()


@pytest.mark.parametrize("kind", ["postgres"], indirect=True)
def test_prepared_statements_run_with_generic_plans(kind: str, urls: list[str]) -> None:
    """PostgreSQL: the statements the driver prepares (a receive's claim among them) run
    with generic plans from the first, never planned again for each call's values."""
    with Client(fresh(kind, urls, pool_size="1")) as client:  # one session: its statements
        backend = client.backend
        assert isinstance(backend, SQLStore)
        q = client.create_queue("plans")
        for _ in range(8):
            q.send("x")
            [m] = q.receive()
            q.delete(m.receipt or "")

        def plans(cur: Any) -> list[tuple[str, int, int]]:
            cur.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
            return [(str(text), int(generic), int(custom)) for text, generic, custom in cur]

        prepared = run_cursor(backend, plans)
        claims = [p for p in prepared if "SKIP LOCKED" in p[0]]
        assert claims, prepared
        assert all(generic > 0 and custom == 0 for _, generic, custom in prepared), prepared


def test_a_store_says_what_the_server_should_change(
    kind: str, urls: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL without autovacuum keeps deleted messages as dead rows forever and never
    gathers statistics: the store says so as it migrates, naming its table."""
    url = fresh(kind, urls)
    backend = sql_backend(url)
    try:
        with caplog.at_level("WARNING", logger="conveyor.backends.sql.store"):
            backend.migrate()
        said = [r.getMessage() for r in caplog.records if "autovacuum" in r.getMessage()]
        if kind != "postgres":
            assert said == []
            return

        def autovacuum(cur: Any) -> str:
            cur.execute("SHOW autovacuum")
            return str(cur.fetchone()[0])

        setting = run_cursor(backend, autovacuum)
        if setting == "on":
            assert said == []
        else:
            assert len(said) == 1 and f"{backend.dialect.prefix}messages" in said[0], said
    finally:
        backend.close()
