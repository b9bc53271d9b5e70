"""Stats of deep queues on the SQL stores (conveyor/backends/sql/estimates.py): a count
stored for every process, estimates between counts moved on by the running totals, and
changes the totals do not record counted at once, in any process."""

from __future__ import annotations

import multiprocessing
import random
import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor import Client, ConveyorError, ManualClock, Queue
from conveyor.backends.sql.store import SQLStore

from .conftest import unavailable
from .support import sqlstores
from .support.waiting import until


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """A fresh database of each SQL store."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/q.db"
        return
    why = sqlstores.reachable(request.param)
    if why is not None:
        unavailable(why)
    url = sqlstores.fresh_url(request.param)
    try:
        yield url
    finally:
        sqlstores.drop(url)


def burst(sender: Client, clock: ManualClock) -> tuple[Queue, SQLStore[Any]]:
    """Queue "burst", one message sent and its count written, then 40 sent whose counts
    the sender holds (its totals never due), a second ago."""
    sending = sender.backend
    assert isinstance(sending, SQLStore)
    q = sender.create_queue("burst", visibility_timeout=30)
    q.send("first")  # written at once (the first counts are due at once)
    sending.accounts.totals.hold()  # held from here on
    for start in range(0, 40, 10):
        q.send_batch([f"m{i}" for i in range(start, start + 10)])
    clock.advance(1)
    return q, sending


def test_stats_of_a_deep_queue_are_estimated_between_counts(url: str) -> None:
    """A queue counted at `estimate_from` messages or more is not counted again until its
    count is due: its stats are the count moved on by the running totals, which agree with a
    count while only sends, receives and deletes happen. The count is stored: another
    process estimates from it at its first call. A purge made in any process, a due count
    and a queue counted below the threshold are counted; a count begun before a purge is
    not stored after it."""
    _estimates(url)


def test_totals_written_after_a_count_that_saw_them_are_not_taken_twice(url: str) -> None:
    """A process holds the totals of what it did (written within a second) while another
    counts the queue and stores the count: when the first writes them, the count already
    saw what they did, so its estimates move on by what was done after it alone. (Before,
    a burst of sends counted meanwhile was added again: a queue emptied since showed the
    burst as ready until its next count.)"""
    clock = ManualClock()
    with Client(url, clock=clock) as sender, Client(url, clock=clock) as counter:
        counted: list[str] = []
        spied(counter, counted)
        q, sending = burst(sender, clock)
        there = counter.queue("burst")
        assert there.stats().ready == 41 and counted == ["burst"]  # deep: stored
        got = q.receive(10)
        q.delete_batch([m.receipt or "" for m in got[:4]])
        q.send("after")
        sending.accounts.flush()  # what it held before the count, and after
        estimated = there.stats()
        assert counted == ["burst"]  # estimated from the count
        assert (estimated.ready, estimated.in_flight) == (32, 6)
        assert (estimated.sent, estimated.received, estimated.deleted) == (42, 10, 4)


def test_totals_written_while_a_count_is_made_do_not_spoil_it(url: str) -> None:
    """Another process writes the totals it held (of sends made before the count) after the
    count has read the queue and before it is stored: the count saw those sends and its
    totals did not, and the writer found no count to move on, so that count is not stored
    (it cannot tell which of what was written it saw): the next stats count again, and a
    count with no such write meanwhile is stored. (Before, it was stored: the sends were
    taken twice, and a queue emptied since showed them as ready until its next count.)"""
    clock = ManualClock()
    with Client(url, clock=clock) as sender, Client(url, clock=clock) as counter:
        counted: list[str] = []
        backend = spied(counter, counted)
        q, sending = burst(sender, clock)
        count = backend.accounts._count

        def written_meanwhile(*args: Any) -> Any:
            done = count(*args)
            sending.accounts.flush()  # after the count read, before it is stored
            return done

        backend.accounts._count = written_meanwhile
        there = counter.queue("burst")
        assert there.stats().ready == 41 and counted == ["burst"]
        backend.accounts._count = count
        got = q.receive(10)
        q.delete_batch([m.receipt or "" for m in got])
        sending.accounts.flush()
        again = there.stats()
        assert counted == ["burst", "burst"]  # not stored: counted again
        assert (again.ready, again.in_flight, again.total) == (31, 0, 31)
        assert (again.sent, again.received, again.deleted) == (41, 10, 10)
        q.send("after")
        sending.accounts.flush()
        estimated = there.stats()
        assert counted == ["burst", "burst"]  # stored: estimated from it
        assert (estimated.ready, estimated.total, estimated.sent) == (32, 32, 42)


def spied(client: Client, counted: list[str], here: list[bool] | None = None) -> Any:
    """The client's store, its counts appended to `counted` (with, in `here`, whether each
    ran on the caller's thread), estimated from 20 messages on."""
    backend = client.backend
    assert isinstance(backend, SQLStore)
    accounts = backend.accounts
    accounts.counts.estimate_from = 20
    count = accounts._count

    def spy(name: str, *args: Any) -> Any:
        counted.append(name)
        if here is not None:
            here.append(threading.current_thread() is threading.main_thread())
        return count(name, *args)

    accounts._count = spy  # type: ignore[method-assign,assignment]
    return backend


def _estimates(url: str) -> None:
    clock = ManualClock()
    with Client(url, clock=clock) as client, Client(url, clock=clock) as other:
        counted: list[str] = []
        here: list[bool] = []  # each count: made on the caller's thread
        backend = spied(client, counted, here)
        counted_there: list[str] = []
        spied(other, counted_there)
        deep = client.create_queue("deep", visibility_timeout=30)
        small = client.create_queue("small")
        deep.send_batch([f"m{i}" for i in range(10)])
        deep.send_batch([f"m{i}" for i in range(10, 20)])
        deep.send_batch([f"m{i}" for i in range(20, 30)])
        small.send("one")
        assert deep.stats().ready == 30
        assert counted == ["deep"]

        got = deep.receive(5)
        deep.delete_batch([m.receipt or "" for m in got[:2]])
        deep.send_batch(["a", "b", "c", "d"])
        estimated = deep.stats()
        assert counted == ["deep"]  # not counted again
        qid, attrs = backend.lookup("deep")
        exact, _ = backend.accounts._count("deep", qid, attrs, clock.now())
        counted.pop()
        assert (estimated.ready, estimated.delayed, estimated.in_flight) == (29, 0, 3)
        assert estimated == exact
        backend.accounts.flush()  # (each process writes its totals within a second)
        assert other.queue("deep").stats() == exact  # from the stored count, at once
        assert counted_there == []

        small.stats()
        small.stats()
        assert counted == ["deep", "small", "small"]  # a small queue at every call

        clock.advance(61)  # past any count's use
        assert deep.stats().in_flight == 0  # counted: the visibility timeout ended
        assert counted[-1] == "deep" and len(counted) == 4

        clock.advance(1)  # due, and recent: answered from it, and counted in the background
        assert deep.stats().ready == 32
        until(lambda: len(counted) == 5, what="the count made in the background")
        assert counted[-1] == "deep" and not here[-1] and all(here[:-1])
        until(lambda: not backend.accounts.counts._recounting, what="its count stored")

        other.queue("deep").purge()  # in another process
        assert deep.stats().total == 0
        assert len(counted) == 6  # counted at once
        deep.send("after")
        assert deep.stats().ready == 1
        assert len(counted) == 7  # counted below the threshold: no estimate

        # a count begun before a purge (made elsewhere) and stored after it is not used
        deep.send_batch([f"n{i}" for i in range(25)])
        clock.advance(61)
        count = backend.accounts._count

        def purged_meanwhile(*args: Any) -> Any:
            done = count(*args)
            other.queue("deep").purge()
            return done

        backend.accounts._count = purged_meanwhile
        assert deep.stats().ready == 26  # the count, as it was begun
        assert deep.stats().total == 0  # the purge: counted again
        assert len(counted) == 9


def test_a_flush_of_many_queues_finds_their_counts_in_parts(tmp_path: Any) -> None:
    """The totals of hundreds of queues written at once (a process that touched them all
    within a second): their stored counts are looked for 500 queues at a time, and the one
    past the first 500 is moved on like the first."""
    clock = ManualClock()
    with Client(f"sqlite:///{tmp_path}/q.db", clock=clock) as client:
        backend = spied(client, [])
        q = client.create_queue("deep")
        q.send_batch([f"m{i}" for i in range(30)])
        qid, _ = backend.lookup("deep")
        totals = backend.accounts.totals
        totals.hold()
        clock.advance(1)
        before = clock.now()
        clock.advance(1)
        assert q.stats().ready == 30  # counted now (deep): stored
        # as if another process had held 5 more from before the count, with 600 queues'
        # counts (which have none stored), the queue last: in the second part
        totals.add(before, "sent", [(n, 1) for n in range(-600, 0)] + [(qid, 5)])
        totals.due_now()
        backend.accounts.flush()
        stats = q.stats()  # estimated: the 5 were seen by the count
        assert stats.ready == 30


def test_totals_taken_to_go_with_a_count_that_could_not_be_stored_are_kept(tmp_path: Any) -> None:
    """The totals a process held go with its count of a deep queue: where the count cannot
    be stored (another writer held the lock past the busy timeout), the stats call fails
    and the totals are counted again, written by the next write of them."""
    path = tmp_path / "q.db"
    clock = ManualClock()
    with Client(f"sqlite:///{path}?busy_timeout=0.2", clock=clock) as client:
        backend = spied(client, [])
        q, _ = burst(client, clock)
        count = backend.accounts._count
        blocker = sqlite3.connect(path, isolation_level=None)

        def locked_meanwhile(*args: Any) -> Any:
            done = count(*args)
            blocker.execute("BEGIN IMMEDIATE")  # the count made: its store waits, and fails
            return done

        backend.accounts._count = locked_meanwhile
        with pytest.raises(ConveyorError):
            q.stats()
        blocker.execute("ROLLBACK")
        backend.accounts._count = count
        backend.accounts.flush()
        (sent,) = blocker.execute("SELECT sent FROM queues").fetchone()
        blocker.close()
        assert sent == 41


def _busy(url: str, seed: int, ops: int) -> None:
    """A process sending, receiving and deleting on queue "busy" at random (`ops` calls)."""
    rng = random.Random(seed)
    with Client(url) as client:
        q = client.queue("busy")
        held: list[str] = []
        for n in range(ops):
            r = rng.random()
            if r < 0.25:
                q.send(f"w{seed}-{n}")
            elif r < 0.45:
                q.send_batch([f"w{seed}-{n}-{i}" for i in range(rng.randint(2, 10))])
            elif r < 0.75:
                held += [m.receipt or "" for m in q.receive(rng.randint(1, 10))]
            elif held:
                k = rng.randint(1, min(10, len(held)))
                if k == 1:
                    q.delete(held[0])
                else:
                    q.delete_batch(held[:k])
                del held[:k]


def test_estimates_agree_with_a_count_once_processes_that_wrote_at_once_are_done(
    url: str,
) -> None:
    """Three processes send, receive and delete at random on a deep queue while another
    polls its stats (each count stored, made again in the background once due, while
    totals are written). The estimates are approximate meanwhile (what a count saw is told
    by when it was done: a write whose clock was read before the count and committed after
    it is taken as seen), but they never show as delayed a message sent without a delay,
    and once the processes are done (their totals written, as a process does as it ends)
    the next count, made once due, makes them the count, ready and in flight alike."""
    with Client(url) as client:
        counted: list[str] = []
        backend = spied(client, counted)
        q = client.create_queue("busy", visibility_timeout=300)
        for start in range(0, 200, 10):
            q.send_batch([f"m{i}" for i in range(start, start + 10)])
        assert q.stats().total == 200 and counted == ["busy"]  # deep: the count stored
        spawn = multiprocessing.get_context("spawn")
        workers = [spawn.Process(target=_busy, args=(url, seed, 300)) for seed in range(3)]
        for w in workers:
            w.start()
        polls = 0
        try:
            while any(w.is_alive() for w in workers):
                assert q.stats().delayed == 0
                polls += 1
            for w in workers:
                w.join(60)
                assert w.exitcode == 0
        finally:  # none left writing (or making the store again) once the store is dropped
            for w in workers:
                if w.is_alive():
                    w.terminate()
                w.join(10)
        assert polls > 10 and len(counted) > 1, (polls, counted)  # counted again meanwhile
        qid, attrs = backend.lookup("busy")
        exact, _ = backend.accounts._count("busy", qid, attrs, backend.clock.now())
        assert exact.delayed == 0

        def agrees() -> bool:
            got = q.stats()
            assert got.delayed == 0
            return (got.ready, got.in_flight, got.sent, got.received, got.deleted) == (
                exact.ready,
                exact.in_flight,
                exact.sent,
                exact.received,
                exact.deleted,
            )

        until(agrees, timeout=30, what="the estimates the count once the next count is made")
