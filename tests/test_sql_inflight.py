"""PostgreSQL and MySQL/MariaDB queues deep in messages in flight: once claims step over
many of them, a queue's claims read what is ready from indexes (PostgreSQL: partial
indexes of that queue's own, built in the background by one process at a time and dropped
once it is shallow again; MySQL: the held_at index of every queue), in delivery order."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from conveyor import Client, ManualClock
from conveyor.backends.sql.server_statements import POSTGRES_DEEP_CLAIM, POSTGRES_STILL_DEEP
from conveyor.backends.sql.statement import positional
from conveyor.backends.sql.store import SQLStore

from .support.sqlstores import fresh, run_cursor
from .support.waiting import until


def pg_indexes(backend: SQLStore[Any]) -> set[str]:
    def names(cur: Any) -> set[str]:
        cur.execute("SELECT indexname FROM pg_indexes WHERE indexname LIKE %s", (f"{prefix}%",))
        return {name for (name,) in cur.fetchall()}

    prefix = backend.dialect.prefix
    return set(run_cursor(backend, names))


def test_a_queue_deep_in_messages_in_flight_is_claimed_from_indexes(
    kind: str, urls: list[str]
) -> None:
    """Once slow claims find many messages in flight ahead of what they take, a queue's
    claims read the messages never received and the others from indexes (PostgreSQL:
    partial indexes of that queue's own, built in the background and dropped with it;
    MySQL: the held_at index of every queue), and go on in delivery order."""
    clock = ManualClock()
    with Client(fresh(kind, urls), clock=clock) as client:
        backend = client.backend
        assert isinstance(backend, SQLStore)
        d: Any = backend.dialect
        watch = d.held if kind == "postgres" else d.heads
        watch.check_after = 0.0  # look at the head after every claim
        watch.rows = 500
        q = client.create_queue("deep", visibility_timeout=30)
        client.create_queue("shallow").send("x")
        assert [m.text for m in client.queue("shallow").receive()] == ["x"]
        for start in range(0, 1_000, 10):
            q.send_batch([f"{i}" for i in range(start, start + 10)])
        taken = [m for _ in range(60) for m in q.receive(10)]  # 600 in flight
        assert [int(m.text) for m in taken] == list(range(600))
        if kind == "postgres":
            watch.join()
        qid, _ = backend.lookup("deep")
        assert watch.deep == {qid}  # the shallow queue's claim found nothing ahead
        if kind == "postgres":
            fresh_index, held_index = watch.names(qid)
            assert {fresh_index, held_index} <= pg_indexes(backend)

            def plan(cur: Any) -> str:
                claim = dict.fromkeys(["cut_from", "until", "now", "horizon", "expires"], 0)
                sql = d.sql(POSTGRES_DEEP_CLAIM, qid)
                cur.execute(f"EXPLAIN {sql}", positional(sql, {**claim, "token": "t", "limit": 10}))
                return "\n".join(str(row) for row in cur.fetchall())

            explained = run_cursor(backend, plan)
            assert f"Index Scan using {fresh_index}" in explained, explained
            assert f"Index Scan using {held_index}" in explained, explained

        q.change_visibility(taken[3].receipt or "", 0)
        assert [int(m.text) for m in q.receive(2)] == [3, 600]  # in delivery order
        clock.advance(30)
        back = q.receive(10)
        assert [int(m.text) for m in back] == list(range(10))
        assert [m.receive_count for m in back] == [2, 2, 2, 3, 2, 2, 2, 2, 2, 2]
        client.delete_queue("deep")
        if kind == "postgres":
            watch.join()
            assert not {fresh_index, held_index} & pg_indexes(backend)
            assert watch.deep == set()


@pytest.mark.parametrize("kind", ["postgres"], indirect=True)
def test_processes_that_find_a_queue_deep_at_once_build_its_indexes_in_turn(
    kind: str, urls: list[str]
) -> None:
    """PostgreSQL: two processes that find one queue deep together take turns (an advisory
    lock): the second finds the first's indexes valid and uses them, where it would have taken
    them, half built, for a build that died and dropped them."""
    url = fresh(kind, urls)
    with Client(url) as one, Client(url) as two:
        q = one.create_queue("deep")
        qid, _ = one.backend.lookup("deep")  # type: ignore[attr-defined]
        watches: list[Any] = [c.backend.dialect.held for c in (one, two)]  # type: ignore[attr-defined]
        backend = one.backend
        assert isinstance(backend, SQLStore)
        key = watches[0].lock_key(qid)

        def trying(cur: Any) -> int:
            """Sessions whose last statement tried the lock (and found it taken)."""
            cur.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE"
                " 'SELECT pg_try_advisory_lock%%'"
            )
            return int(cur.fetchone()[0])

        with psycopg.connect(backend.dialect.db.conninfo, autocommit=True) as holder:  # type: ignore[attr-defined]
            holder.execute("SELECT pg_advisory_lock(%(space)s, %(qid)s)", key)
            for watch in watches:
                watch.deepen(qid)
            until(lambda: run_cursor(backend, trying) >= 2, what="both builds at the lock")
            assert not set(watches[0].names(qid)) & pg_indexes(backend)
        for watch in watches:
            watch.join()
        assert [w.deep for w in watches] == [{qid}, {qid}]
        assert set(watches[0].names(qid)) <= pg_indexes(backend)
        q.send("x")
        assert [m.text for m in two.queue("deep").receive()] == ["x"]


@pytest.mark.parametrize("kind", ["postgres"], indirect=True)
def test_a_queue_no_longer_deep_loses_its_indexes_and_other_queues_get_hot_updates_back(
    kind: str, urls: list[str]
) -> None:
    """PostgreSQL: while any queue has its partial indexes of messages in flight, a
    receive's rewrite of a row of any queue touches every index (the indexes' conditions
    name the columns it changes); once the deep queue has few messages in flight again, the
    process claiming from it drops them, and another process that still took the queue for
    deep finds them gone and claims as from any queue, in delivery order."""
    url = fresh(kind, urls)
    clock = ManualClock()
    with Client(url, clock=clock) as one, Client(url, clock=clock) as two:
        watches: list[Any] = []
        for client in (one, two):
            backend = client.backend
            assert isinstance(backend, SQLStore)
            watch: Any = backend.dialect.held  # type: ignore[attr-defined]
            watch.check_after = 0.0
            watch.rows = 500
            watches.append(watch)
        q = one.create_queue("deep", visibility_timeout=30)
        other = one.create_queue("other")
        for start in range(0, 1_000, 10):
            q.send_batch([f"{i}" for i in range(start, start + 10)])
        taken = [m for _ in range(60) for m in q.receive(10)]  # 600 in flight
        assert [m.text for m in two.queue("deep").receive()] == ["600"]  # two looks too
        for watch in watches:
            watch.join()
        qid, _ = one.backend.lookup("deep")  # type: ignore[attr-defined]
        assert [w.deep for w in watches] == [{qid}, {qid}]
        fresh_index, held_index = watches[0].names(qid)
        backend = one.backend
        assert isinstance(backend, SQLStore)
        assert {fresh_index, held_index} <= pg_indexes(backend)

        other.send("x")
        [held] = other.receive()  # a row of another queue, rewritten as a receive does

        def hot(cur: Any) -> int:
            """Whether that rewrite would be a HOT update (undone with the transaction)."""
            table = f"{backend.dialect.prefix}messages"
            found: list[int] = []
            count = "SELECT pg_stat_get_xact_tuples_hot_updated(%s::regclass)"
            cur.execute("SAVEPOINT hot")
            for update in (False, True):
                if update:
                    cur.execute(
                        f"UPDATE {table} SET visible_at = visible_at + 1,"
                        " receive_count = receive_count + 1 WHERE id = %s",
                        (held.id,),
                    )
                cur.execute(count, (table,))  # what this backend has not yet reported
                found.append(int(cur.fetchone()[0]))
            cur.execute("ROLLBACK TO SAVEPOINT hot")
            return found[1] - found[0]

        assert run_cursor(backend, hot) == 0

        def plan(cur: Any) -> str:
            values = {"fresh": fresh_index, "held": held_index, "now": 0, "rows": 100}
            sql = backend.dialect.sql(POSTGRES_STILL_DEEP, qid)
            cur.execute(f"EXPLAIN {sql}", positional(sql, values))
            return "\n".join(str(row) for row in cur.fetchall())

        explained = run_cursor(backend, plan)  # the look counts from the index, not the queue
        assert f"Index Only Scan using {held_index}" in explained, explained
        for watch in watches:
            watch.slow_after = 60.0  # no claim is slow
        q.delete_batch([m.receipt or "" for m in taken])  # 1 left in flight: shallow
        assert [m.text for m in q.receive()] == ["601"]  # not due to look again yet
        assert watches[0].deep == {qid}
        watches[0].recheck_every = 0.0
        assert [m.text for m in q.receive()] == ["602"]
        watches[0].join()
        assert watches[0].deep == set()
        assert not {fresh_index, held_index} & pg_indexes(backend)
        assert run_cursor(backend, hot) == 1

        # the other process claims from where the indexes were (not due to look again)
        assert [m.text for m in two.queue("deep").receive(2)] == ["603", "604"]
        assert watches[1].deep == {qid}
        watches[1].slow_after = 0.0  # its next claim is slow: it looks at once
        assert [m.text for m in two.queue("deep").receive(2)] == ["605", "606"]
        assert watches[1].deep == set()
        assert [m.text for m in two.queue("deep").receive(2)] == ["607", "608"]
