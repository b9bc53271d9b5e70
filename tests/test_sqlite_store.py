"""The SQLite store's own rules: queue ids, remembered queue rows, schema upgrades, how
sends are written."""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest

from conveyor import (
    Client,
    DeadLetterPolicy,
    ManualClock,
    Message,
    QueueDoesNotExist,
    SendEntry,
    StoreUnavailable,
)
from conveyor.backends.sql.schema import QUEUE_COLUMNS, SQLITE_MIGRATIONS
from conveyor.backends.sql.sqlite import BARE_ROWS
from conveyor.backends.sql.sqlite_connections import SQLiteConnections, SQLiteExec
from conveyor.backends.sql.store import QUEUE_CACHE_SECONDS as ROW_CACHE
from conveyor.backends.sql.store import SQLStore

from .support.live import LiveServer
from .support.sqlitefiles import rows_of, sqlite_db

SCHEMA_VERSION = len(SQLITE_MIGRATIONS)


def queue_ids(path: Path) -> dict[str, int]:
    return dict(rows_of(path, "SELECT name, id FROM queues"))


def test_queue_ids_are_never_used_again(tmp_path: Path) -> None:
    with Client(f"sqlite:///{tmp_path}/q.db") as client:
        client.create_queue("a")
        client.create_queue("b")
        client.delete_queue("b")
        client.create_queue("c")
    assert queue_ids(tmp_path / "q.db") == {"a": 1, "c": 3}


def test_a_queue_made_again_elsewhere_is_found_by_a_process_that_remembered_it(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    url = f"sqlite:///{tmp_path}/q.db"
    with Client(url, clock=clock) as here, Client(url, clock=clock) as there:
        mine = here.create_queue("jobs")
        mine.send("first")
        there.delete_queue("jobs")
        with pytest.raises(QueueDoesNotExist):
            mine.send("lost")  # at once, although the row was read a moment ago
        there.create_queue("jobs")
        mine.send("second")
        got = there.queue("jobs").receive(10)
        assert [m.text for m in got] == ["second"]
        assert mine.stats().in_flight == 1


def test_attribute_changes_elsewhere_apply_within_the_row_cache(tmp_path: Path) -> None:
    clock = ManualClock()
    url = f"sqlite:///{tmp_path}/q.db"
    with Client(url, clock=clock) as here, Client(url, clock=clock) as there:
        q = here.create_queue("jobs", visibility_timeout=30)
        q.send("x")
        assert q.receive(1, visibility_timeout=30)
        clock.advance(31)
        there.set_attributes("jobs", delivery="at-most-once")
        # the backend of `here` read the row at most ROW_CACHE seconds ago: once that has
        # passed, it claims at most once (never visible again)
        clock.advance(ROW_CACHE)
        assert here.backend.receive("jobs", 1, 30)
        clock.advance(3600)
        assert here.backend.receive("jobs", 1, 30) == []


def test_an_older_file_is_upgraded_keeping_its_queues(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/old.db"
    with Client(url) as client:
        client.create_queue("a")
        client.create_queue("b").send("kept")
    # make it a file of version 4: queue ids without AUTOINCREMENT, the columns' old names,
    # topics without settings, stages without their count, no stored counts
    conn = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
    conn.executescript(
        f"""
        CREATE TABLE queues_old (id INTEGER PRIMARY KEY, {QUEUE_COLUMNS});
        INSERT INTO queues_old SELECT * FROM queues;
        DROP TABLE queues;
        ALTER TABLE queues_old RENAME TO queues;
        DELETE FROM sqlite_sequence WHERE name = 'queues';
        ALTER TABLE dedup RENAME COLUMN dkey TO key;
        ALTER TABLE archive RENAME COLUMN queue_name TO queue;
        ALTER TABLE consumers RENAME COLUMN queue_name TO queue;
        ALTER TABLE topics DROP COLUMN settings;
        ALTER TABLE subscriptions DROP COLUMN attributes;
        ALTER TABLE stages DROP COLUMN staged;
        DROP TABLE counts;
        PRAGMA user_version = 4;
        """
    )
    conn.close()
    with Client(url) as client:
        assert client.migrate() == (4, SCHEMA_VERSION)
        assert [m.text for m in client.queue("b").receive(10)] == ["kept"]
        client.delete_queue("b")
        client.create_queue("c")
    assert queue_ids(tmp_path / "old.db") == {"a": 1, "c": 3}


def commits_relaxed(client: Client, action: Callable[[], object]) -> bool:
    """Whether `action` committed without waiting for the disk: no fsync of the log after
    its commit (the connections run at synchronous=NORMAL, so SQLite makes none itself)."""
    seen: list[str] = []
    store = client.backend
    assert isinstance(store, SQLStore) and isinstance(store.db, SQLiteConnections)
    ex = store.db.exec()
    assert isinstance(ex, SQLiteExec)
    conn = ex.conn
    synced = store.db.log.syncs
    conn.set_trace_callback(seen.append)
    try:
        action()
    finally:
        conn.set_trace_callback(None)
    assert "COMMIT" in seen
    (mode,) = conn.execute("PRAGMA synchronous").fetchone()
    assert mode == 1  # NORMAL, always
    return store.db.log.syncs == synced


def test_at_full_durability_only_at_least_once_claims_skip_the_disk_wait(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    with Client(f"sqlite:///{tmp_path}/q.db", clock=clock) as client:
        jobs = client.create_queue("jobs")
        once = client.create_queue("once", delivery="at-most-once")
        assert not commits_relaxed(client, lambda: jobs.send("a"))
        assert not commits_relaxed(client, lambda: once.send("b"))
        got: list[Message] = []
        assert commits_relaxed(client, lambda: got.extend(jobs.receive(1)))
        assert not commits_relaxed(client, lambda: jobs.delete(got[0].receipt or ""))
        assert not commits_relaxed(client, lambda: once.receive(1))
        # made at-most-once by another process: once this one reads the queue's row again,
        # its claim finds out and is made durable
        with Client(f"sqlite:///{tmp_path}/q.db", clock=clock) as other:
            other.set_attributes("jobs", delivery="at-most-once")
        jobs.send("c")
        clock.advance(ROW_CACHE)
        assert not commits_relaxed(client, lambda: client.backend.receive("jobs", 1, 30))
    with Client(f"sqlite:///{tmp_path}/n.db?durability=normal") as client:
        q = client.create_queue("jobs")
        q.send("a")
        conn = sqlite_db(client).exec().conn
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        q.receive(1)
        q.send("b")
        conn.set_trace_callback(None)
        assert "COMMIT" in seen and not [s for s in seen if "synchronous" in s]
        assert sqlite_db(client).log.syncs == 0  # durability=normal: the log never fsynced


def test_a_durable_commit_fsyncs_the_log_once_committed_and_first_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At durability=full a thread's durable write is answered after an fsync of the
    write-ahead log made once it has committed; the first such fsync also fsyncs the
    directory that holds the log (as SQLite does when it first syncs a new log), so that a
    log made since is found after a power cut. The log is synced as SQLite syncs it
    (`fdatasync` where the system has it), its directory with `fsync`."""
    synced: list[str] = []
    calls: list[str] = []

    def recording(name: str) -> Callable[[int], None]:
        real = getattr(os, name)

        def sync(fd: int) -> None:
            synced.append("directory" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
            calls.append(name)
            real(fd)

        return sync

    with Client(f"sqlite:///{tmp_path}/q.db") as client:
        q = client.create_queue("jobs")
        store = client.backend
        assert isinstance(store, SQLStore)
        store.accounts.totals.hold()  # no write of the running totals among these
        db = sqlite_db(client)
        db.log.close()  # the log is opened afresh by the next fsync
        monkeypatch.setattr(os, "fsync", recording("fsync"))
        if hasattr(os, "fdatasync"):
            monkeypatch.setattr(os, "fdatasync", recording("fdatasync"))
        seen: list[str] = []
        conn = db.exec().conn
        conn.set_trace_callback(seen.append)
        q.send("a")
        conn.set_trace_callback(None)
        assert synced == ["file", "directory"] and seen[-1] == "COMMIT"
        q.send("b")
        assert synced == ["file", "directory", "file"]
        [m] = q.receive(1)  # an at-least-once claim: not waited for
        assert synced == ["file", "directory", "file"]
        q.delete(m.receipt or "")
        assert synced == ["file", "directory", "file", "file"]
        data = "fdatasync" if hasattr(os, "fdatasync") else "fsync"
        assert calls == [data, "fsync", data, data]


def test_bodies_sent_together_keep_their_order_ids_and_options(tmp_path: Path) -> None:
    """Bare bodies go in by multi-row statements of BARE_ROWS; anything else one by one:
    both keep send order within a priority, and an id finds its row."""
    clock = ManualClock()
    with Client(f"sqlite:///{tmp_path}/q.db", clock=clock) as client:
        q = client.create_queue("jobs", delay=5)
        backend = client.backend
        many = [
            q.sending([SendEntry(entry_id="0", body=f"m{i}")]).messages[0]
            for i in range(2 * BARE_ROWS + 7)
        ]
        sent = backend.send("jobs", many)
        mixed = [
            q.sending([SendEntry(entry_id="0", body="urgent", priority=3)]).messages[0],
            q.sending([SendEntry(entry_id="0", body="later", delay=60)]).messages[0],
            q.sending([SendEntry(entry_id="0", body="tagged", attributes={"k": "v"})]).messages[0],
        ]
        backend.send("jobs", mixed)
        assert q.get(sent[-1].id).text == f"m{len(many) - 1}"  # the id finds its row
        assert q.receive(10, wait=0) == []  # the queue's delay applies to bare bodies too
        clock.advance(5)
        got: list[Message] = []
        while batch := q.receive(10, wait=0):
            got += batch
            assert all(r.ok for r in q.delete_batch([m.receipt or "" for m in batch]))
        texts = [m.text for m in got]
        assert texts == ["urgent"] + [f"m{i}" for i in range(len(many))] + ["tagged"]
        assert [m.id for m in got[1 : len(many) + 1]] == [r.id for r in sent]
        assert got[-1].attributes == {"k": "v"}
        clock.advance(60)
        assert [m.text for m in q.receive(10, wait=0)] == ["later"]


def test_writes_of_many_threads_commit_in_groups_and_fail_alone(tmp_path: Path) -> None:
    """While one write runs, the writes other threads ask for wait and commit together, each
    in a savepoint: one that fails changes nothing, the others are kept."""
    import threading

    db = SQLiteConnections(str(tmp_path / "g.db"), durability="full", busy_timeout=5.0, heap=False)
    db.write(lambda ex: ex.run("CREATE TABLE t (v INTEGER)"))
    holding, release = threading.Event(), threading.Event()

    def first(ex: SQLiteExec) -> None:
        ex.run("INSERT INTO t VALUES (0)")
        holding.set()
        assert release.wait(10)

    def insert(v: int) -> Callable[[SQLiteExec], int]:
        def fn(ex: SQLiteExec) -> int:
            ex.run("INSERT INTO t VALUES (:v)", {"v": v})
            if v == 3:
                raise ValueError("this write fails")
            return v

        return fn

    outcomes: dict[int, object] = {}

    def write(v: int) -> None:
        try:
            outcomes[v] = db.write(insert(v))
        except ValueError as exc:
            outcomes[v] = exc

    leader = threading.Thread(target=db.write, args=(first,))
    leader.start()
    assert holding.wait(10)
    before = db.commits
    threads = [threading.Thread(target=write, args=(v,)) for v in range(1, 7)]
    for t in threads:
        t.start()
    while len(db._waiting) < 6:  # all six wait behind the running write
        threading.Event().wait(0.001)
    release.set()
    for t in [leader, *threads]:
        t.join(10)
    assert db.commits - before == 2  # the first write, then the six as one group
    assert {v: o for v, o in outcomes.items() if v != 3} == {1: 1, 2: 2, 4: 4, 5: 5, 6: 6}
    assert isinstance(outcomes[3], ValueError)
    rows = db.read(lambda ex: sorted(v for (v,) in ex.rows("SELECT v FROM t")))
    assert rows == [0, 1, 2, 4, 5, 6]
    db.close()


def test_a_send_in_another_process_wakes_a_waiting_receive(tmp_path: Path) -> None:
    """Waiters are woken through the wake directory, not only by the store's ticker (here
    made longer than the wait, so that nothing else could return the message in time)."""
    import asyncio
    import subprocess
    import sys

    from conveyor import AsyncClient

    url = f"sqlite:///{tmp_path}/w.db"
    with Client(url) as client:
        client.create_queue("jobs")
        store = client.backend
        assert isinstance(store, SQLStore)
        store._poll_interval = 600.0
        aio = AsyncClient(client=client)

        async def scenario() -> list[Message]:
            waiting = asyncio.ensure_future(aio.queue("jobs").receive(wait=20))
            while not list_wakes(store):
                await asyncio.sleep(0.01)  # until this process listens
            sender = (
                "from conveyor import Client\n"
                f"with Client({url!r}) as c: c.queue('jobs').send('from afar')\n"
            )
            await asyncio.to_thread(
                subprocess.run, [sys.executable, "-c", sender], check=True, timeout=60
            )
            return await asyncio.wait_for(waiting, 15)  # woken, not timed out at 20 s

        got = asyncio.run(scenario())
        assert [m.text for m in got] == ["from afar"]


def list_wakes(store: SQLStore[SQLiteExec]) -> list[str]:
    import os

    assert isinstance(store.db, SQLiteConnections)
    directory = store.db._wakes.directory
    return os.listdir(directory) if os.path.isdir(directory) else []


def test_the_socket_of_a_process_gone_is_removed(tmp_path: Path) -> None:
    import os
    import socket
    import time

    from conveyor.backends.sql.wakes import Wakes

    db = str(tmp_path / "d.db")
    wakes = Wakes(db, time.monotonic)
    os.makedirs(wakes.directory, mode=0o700, exist_ok=True)
    dead = os.path.join(wakes.directory, "dead")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as gone:
        gone.bind(dead)  # bound, then its process went away without unlinking it
    heard: list[str] = []
    assert wakes.listen(heard.append)
    other = Wakes(db, time.monotonic)
    other.announce("jobs")
    assert not os.path.exists(dead)
    deadline = time.monotonic() + 10
    while not heard and time.monotonic() < deadline:
        time.sleep(0.01)
    assert heard == ["jobs"]
    wakes.close()
    other.close()
    assert not os.path.exists(wakes.directory)  # the last listener took it away


def indexes(path: Path) -> set[str]:
    return {n for (n,) in rows_of(path, "SELECT name FROM sqlite_master WHERE type = 'index'")}


def test_a_head_deep_in_messages_in_flight_is_indexed_and_receives_go_on_in_order(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    with Client(f"sqlite:///{tmp_path}/q.db", clock=clock) as client:
        dialect = client.backend.dialect  # type: ignore[attr-defined]
        dialect.held_index_after = 4_000  # about 1,000 rows stepped over
        q = client.create_queue("deep", visibility_timeout=30)
        for start in range(0, 3_000, 10):
            q.send_batch([f"{i}" for i in range(start, start + 10)])
        held = [m for _ in range(200) for m in q.receive(10)]  # 2,000 in flight
        assert [int(m.text) for m in held] == list(range(2_000))
        assert "q1_fresh" in indexes(tmp_path / "q.db")  # a claim stepped over them
        assert dialect.held_indexed == {1}

        q.send("late", delay=5)  # delayed: found by visible_at too
        got = q.receive(10)
        assert [int(m.text) for m in got] == list(range(2_000, 2_010))
        q.change_visibility(held[7].receipt or "", 0)  # visible again at once
        assert [m.text for m in q.receive(1)] == ["7"]
        clock.advance(10)
        assert [m.text for m in q.receive(1)] == ["2010"]  # send order before the delayed
        for _ in range(98):
            q.delete_batch([m.receipt or "" for m in q.receive(10)])
        tail = q.receive(10)
        assert [m.text for m in tail] == [f"{i}" for i in range(2_991, 3_000)] + ["late"]
        q.delete_batch([m.receipt or "" for m in tail])
        assert q.receive(10) == []
        clock.advance(30)  # what is still in flight comes back, first sent first
        back = q.receive(10)
        assert [int(m.text) for m in back] == list(range(10))
        assert [m.receive_count for m in back] == [2] * 7 + [3] + [2] * 2


def test_an_idle_queue_deep_in_messages_in_flight_is_indexed_by_its_next_poll(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    url = f"sqlite:///{tmp_path}/q.db"
    with Client(url, clock=clock) as client, Client(url, clock=clock) as other:
        client.backend.dialect.held_index_after = 2**31 - 1  # type: ignore[attr-defined]
        other.backend.dialect.held_index_after = 4_000  # type: ignore[attr-defined]
        q = client.create_queue("idle", visibility_timeout=30)
        mine = other.queue("idle")
        assert mine.receive(10) == []  # idle here: its receives look before they claim
        for _ in range(200):
            q.send_batch(["x"] * 10)
        while q.receive(10):
            pass  # everything in flight
        assert "q1_held" not in indexes(tmp_path / "q.db")
        # the look stepped over 2,000 rows: it says "maybe", and the claim indexes first
        assert mine.receive(10) == []
        assert {"q1_fresh", "q1_held"} <= indexes(tmp_path / "q.db")
        mine.send("new")
        assert [m.text for m in mine.receive(10)] == ["new"]
        clock.advance(31)
        assert len(mine.receive(10)) == 10


def test_a_queue_with_a_dead_letter_policy_deep_in_flight_is_indexed_too(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    with Client(f"sqlite:///{tmp_path}/q.db", clock=clock) as client:
        client.backend.dialect.held_index_after = 4_000  # type: ignore[attr-defined]
        client.create_queue("dead")
        q = client.create_queue(
            "work",
            visibility_timeout=30,
            dead_letter=DeadLetterPolicy(queue="dead", max_receive_count=1),
        )
        for start in range(0, 2_100, 10):
            q.send_batch([f"{i}" for i in range(start, start + 10)])
        held = [m for _ in range(200) for m in q.receive(10)]
        assert [int(m.text) for m in held] == list(range(2_000))
        assert "q2_held" in indexes(tmp_path / "q.db")  # its walk stepped over them
        assert [int(m.text) for m in q.receive(10)] == list(range(2_000, 2_010))
        clock.advance(30)
        # received once already: each is moved to the dead-letter queue, not delivered
        assert [int(m.text) for m in q.receive(10)] == list(range(2_010, 2_020))
        assert client.queue("dead").stats().ready == 2_010


def test_a_deep_head_is_never_indexed_on_an_event_loop_s_thread(tmp_path: Path) -> None:
    """Indexing reads the whole queue: a claim inline (on an event loop's thread) that steps
    over many rows marks the queue, and the next one raises WouldBlock, changing nothing,
    so that `offload` runs it in a thread, where the queue is indexed."""
    import asyncio

    from conveyor.aio import offload_write
    from conveyor.backends.base import WouldBlock

    with Client(f"sqlite:///{tmp_path}/q.db?durability=normal") as client:
        store = client.backend
        dialect = store.dialect  # type: ignore[attr-defined]
        dialect.held_index_after = 2**31 - 1
        q = client.create_queue("deep", visibility_timeout=600)
        for start in range(0, 2_100, 10):
            q.send_batch([f"{i}" for i in range(start, start + 10)])
        assert len([m for _ in range(200) for m in q.receive(10)]) == 2_000
        dialect.held_index_after = 4_000

        def inline() -> AbstractContextManager[Any]:
            commits = store.loop_commits()
            assert commits is not None
            return commits.inline()

        with inline():
            got = q.receive(10)  # stepped over 2,000 rows: marked, not indexed
        assert [m.text for m in got] == [f"{i}" for i in range(2_000, 2_010)]
        assert "q1_held" not in indexes(tmp_path / "q.db")
        with pytest.raises(WouldBlock), inline():
            q.receive(10)
        assert "q1_held" not in indexes(tmp_path / "q.db")
        assert q.stats().in_flight == 2_010  # the attempt claimed nothing

        async def receive() -> list[Message]:
            return await offload_write(store, q.receive, 10)

        assert [m.text for m in asyncio.run(receive())] == [f"{i}" for i in range(2_010, 2_020)]
        assert {"q1_fresh", "q1_held"} <= indexes(tmp_path / "q.db")
        with inline():  # indexed: claims on the loop again
            assert [m.text for m in q.receive(10)] == [f"{i}" for i in range(2_020, 2_030)]


def test_claims_of_an_indexed_queue_read_only_its_indexes(tmp_path: Path) -> None:
    """The plan of an indexed queue's claim cannot fall back to walking the head: each of
    its two parts searches its own partial index, and a dropped index is done without."""
    with Client(f"sqlite:///{tmp_path}/q.db") as client:
        client.backend.dialect.held_index_after = 0  # type: ignore[attr-defined]
        q = client.create_queue("plan")
        q.send("a")
        assert [m.text for m in q.receive()] == ["a"]
        from conveyor.backends.sql.statement import positional
        from conveyor.backends.sql.statements import SQLITE_READY_INDEXED

        claim = client.backend.dialect.sql(SQLITE_READY_INDEXED, 1)  # type: ignore[attr-defined]
        values = dict.fromkeys(["cut_from", "until", "now", "horizon", "expires", "token"], 0)
        conn = sqlite3.connect(tmp_path / "q.db")
        try:
            bound = positional(claim, {**values, "limit": 10})
            plan = conn.execute(f"EXPLAIN QUERY PLAN {claim}", bound).fetchall()
            details = " | ".join(str(row[-1]) for row in plan)
            assert "USING INDEX q1_fresh" in details and "USING INDEX q1_held" in details
            assert "SCAN q1" not in details.replace("SCAN q1_", "")
            conn.execute("DROP INDEX q1_held")
        finally:
            conn.close()
        q.send("b")
        assert [m.text for m in q.receive()] == ["b"]  # the plain claim, and indexed again
        assert "q1_held" in indexes(tmp_path / "q.db")


def test_a_full_disk_fails_calls_whole_and_the_store_serves_again_after(tmp_path: Path) -> None:
    """SQLITE_FULL (here the file's page limit, as a full disk answers): sends fail with
    StoreUnavailable saying what to do, and store none of their messages, and once there is
    room every message sent before is received."""
    client = Client(f"sqlite:///{tmp_path / 'full.db'}?durability=normal")
    q = client.create_queue("full")
    conn = sqlite_db(client).exec().conn  # this thread's connection: the calls below use it
    (pages,) = conn.execute("PRAGMA page_count").fetchone()
    conn.execute(f"PRAGMA max_page_count = {pages + 8}")
    sent: list[str] = []
    # SQLite's words, and what to do about them
    advice = r"database or disk is full \(its disk is full: free space there or move the store"
    with pytest.raises(StoreUnavailable, match=advice):
        for i in range(1000):
            results = q.send_batch([f"{i:04d}-{j}".encode() + b"x" * 1000 for j in range(10)])
            sent += [f"{i:04d}-{j}" for j, r in enumerate(results) if r.ok]
    assert sent and len(sent) % 10 == 0  # whole batches only
    with pytest.raises(StoreUnavailable, match=advice):
        q.send_batch([b"y" * 1000] * 10)  # still no room for a batch
    assert q.stats().ready == len(sent)
    conn.execute("PRAGMA max_page_count = 1073741823")  # room again
    got: list[str] = []
    while batch := q.receive(10, wait=0):
        got += [m.body[:6].decode() for m in batch]
        q.delete_batch([m.receipt for m in batch if m.receipt])
    assert sorted(got) == sorted(sent)
    client.close()


def test_stats_write_only_what_expired_and_totals_that_are_due(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stats look before they sweep and write only where something expired (the dashboard
    asks every queue's stats, and every write takes the store's write lock); the running
    totals are counted in memory and written at most once a second (a commit with the
    queue's row in it costs a page more), this process's stats adding what it has not
    written yet."""
    clock = ManualClock()
    with Client(f"sqlite:///{tmp_path}/s.db", clock=clock) as client:
        store = client.backend
        assert isinstance(store, SQLStore)
        q = client.create_queue("jobs", retention=120)
        q.send("first")  # the first count is due at once: written
        store.accounts.totals.hold()  # held from here on
        q.send_batch(["a", "b"])
        q.receive(2)
        assert rows_of(tmp_path / "s.db", "SELECT sent, received FROM queues") == [(1, 0)]
        writes: list[str] = []
        write = store.db.write

        def counted(fn: Callable[[SQLiteExec], Any], **options: Any) -> Any:
            writes.append(getattr(fn, "__qualname__", ""))
            return write(fn, **options)

        monkeypatch.setattr(store.db, "write", counted)
        stats = q.stats()
        assert (stats.sent, stats.received, stats.ready, stats.in_flight) == (3, 2, 1, 2)
        assert writes == []
        clock.advance(121)
        assert q.stats().expired == 3 and writes != []  # the sweep wrote
        writes.clear()
        store.accounts.totals.due_now()
        assert q.stats().sent == 3
        assert rows_of(tmp_path / "s.db", "SELECT sent, received FROM queues") == [(3, 2)]
        assert len(writes) == 1  # the totals, due


def test_a_write_lock_held_elsewhere_fails_calls_within_busy_timeout(tmp_path: Path) -> None:
    """A connection of another program holding the file's write lock: a send waits for it
    up to the URL's busy_timeout in all (the SDK's thread, and the server's writer thread
    behind its event loop), then fails with StoreUnavailable (SQS: 503) saying what to do;
    nothing of the failed sends is stored, and sends succeed once the lock is let go."""
    path = tmp_path / "locked.db"
    url = f"sqlite:///{path}?durability=normal&busy_timeout=1"
    with Client(url) as client, LiveServer(client) as live:
        q = client.create_queue("locked")
        queue_url = live.sqs().get_queue_url(QueueName="locked")["QueueUrl"]
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            started = time.monotonic()
            with pytest.raises(StoreUnavailable, match=r"stayed locked .*busy_timeout=1\b"):
                q.send("through the SDK")
            assert 0.9 < time.monotonic() - started < 1.7  # the timeout once, not twice
            started = time.monotonic()
            answer = httpx.post(
                live.url,
                data={"Action": "SendMessage", "QueueUrl": queue_url, "MessageBody": "wire"},
                timeout=30,
            )
            assert 0.9 < time.monotonic() - started < 1.7
            assert answer.status_code == 503
            assert "stayed locked" in answer.text
        finally:
            holder.execute("COMMIT")
            holder.close()
        q.send("after")
        assert [m.body for m in q.receive(10, wait=0)] == [b"after"]


def test_an_in_memory_database_has_no_log_to_fsync() -> None:
    """`sqlite:///:memory:` keeps nothing past its process: its durable writes fsync no
    file (there is none) and work as at durability=normal."""
    with Client("sqlite:///:memory:") as client:
        q = client.create_queue("jobs")
        q.send("a")
        [m] = q.receive(1)
        q.delete(m.receipt or "")
        assert q.stats().total == 0 and sqlite_db(client).log.syncs == 0


def test_a_directory_that_cannot_be_fsynced_fails_no_fsync_of_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The directory's fsync is SQLite's best effort: where its directory cannot be opened,
    the log's own fsync still answers the commit."""
    from conveyor.backends.sql.sqlite_sync import LogFile

    log = tmp_path / "x.db-wal"
    log.write_bytes(b"frames")
    real_open = os.open

    def open_(path: str, flags: int, *args: int) -> int:
        if os.path.isdir(path):
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", open_)
    file = LogFile(str(log))
    assert file.sync() is None and file.sync() is None and file.syncs == 2
    file.close()
