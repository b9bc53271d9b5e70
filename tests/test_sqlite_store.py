"""The SQLite store's own rules: queue ids, remembered queue rows, schema upgrades, how
sends are written."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

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

from .waiting import until

SCHEMA_VERSION = len(SQLITE_MIGRATIONS)


def rows_of(path: Path, sql: str) -> list[Any]:
    """A query's rows, read by a connection of the test's own."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def queue_ids(path: Path) -> dict[str, int]:
    return dict(rows_of(path, "SELECT name, id FROM queues"))


def sqlite_db(client: Client) -> SQLiteConnections:
    """The SQLite file behind a client's store."""
    store = client.backend
    assert isinstance(store, SQLStore) and isinstance(store.db, SQLiteConnections)
    return store.db


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
    # and topics without settings
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
    """Whether `action` committed with the disk wait relaxed (synchronous NORMAL; the mode
    is set before a transaction begins and kept until another is needed)."""
    seen: list[str] = []
    store = client.backend
    assert isinstance(store, SQLStore) and isinstance(store.db, SQLiteConnections)
    ex = store.db.exec()
    assert isinstance(ex, SQLiteExec)
    conn = ex.conn
    conn.set_trace_callback(seen.append)
    try:
        action()
    finally:
        conn.set_trace_callback(None)
    assert "COMMIT" in seen
    (mode,) = conn.execute("PRAGMA synchronous").fetchone()
    return bool(mode == 1)  # 1 NORMAL, 2 FULL


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
        conn.set_trace_callback(None)
        assert "COMMIT" in seen and not [s for s in seen if "synchronous" in s]


def test_bodies_sent_together_keep_their_order_ids_and_options(tmp_path: Path) -> None:
    """Bare bodies go in by multi-row statements of BARE_ROWS; anything else one by one:
    both keep send order within a priority, and an id finds its row."""
    clock = ManualClock()
    with Client(f"sqlite:///{tmp_path}/q.db", clock=clock) as client:
        q = client.create_queue("jobs", delay=5)
        backend = client.backend
        many = [q.prepare(SendEntry(entry_id="0", body=f"m{i}")) for i in range(2 * BARE_ROWS + 7)]
        sent = backend.send("jobs", many)
        mixed = [
            q.prepare(SendEntry(entry_id="0", body="urgent", priority=3)),
            q.prepare(SendEntry(entry_id="0", body="later", delay=60)),
            q.prepare(SendEntry(entry_id="0", body="tagged", attributes={"k": "v"})),
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
            ex.run("INSERT INTO t VALUES (%s)", (v,))
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


def test_inline_calls_raise_would_block_instead_of_waiting(tmp_path: Path) -> None:
    """On an event loop's thread (`inline`) a write that would wait for another writer, or
    for the disk at durability=full, raises WouldBlock before it changes anything; `offload`
    then runs the call in a thread."""
    import asyncio

    from conveyor.aio import offload
    from conveyor.backends.base import Inline, WouldBlock

    path = tmp_path / "i.db"
    with Client(f"sqlite:///{path}?durability=normal") as client:
        q = client.create_queue("jobs")
        store = client.backend

        def inline() -> AbstractContextManager[Inline]:
            context = store.inline()
            assert context is not None
            return context

        with inline():
            q.send("fast")  # nothing to wait for: runs on this thread
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        with pytest.raises(WouldBlock), inline():
            q.send("blocked")

        async def scenario() -> None:
            task = asyncio.ensure_future(offload(store, q.send, "offloaded"))
            await asyncio.sleep(0.2)  # the loop runs on: the send waits in a thread
            assert not task.done()
            other.execute("COMMIT")
            await asyncio.wait_for(task, 10)

        asyncio.run(scenario())
        assert sorted(m.text for m in q.receive(10)) == ["fast", "offloaded"]
    with Client(f"sqlite:///{tmp_path}/full.db") as full:
        q = full.create_queue("jobs")
        store = full.backend

        async def durable_send() -> Inline:
            with inline() as call:
                q.send("durable")  # committed at once; the log's fsync is awaited
            assert call.durable is not None
            await call.durable
            return call

        assert q.receive() == []  # (a first receive sweeps the queue, a durable write)
        asyncio.run(durable_send())

        async def claim() -> None:
            with inline() as call:
                assert [m.text for m in q.receive()] == ["durable"]
            assert call.durable is None  # a claim need not wait for the disk

        asyncio.run(claim())
        with pytest.raises(WouldBlock), inline():
            q.send("no loop")  # nothing to await the disk on: a thread must wait


def test_durable_sends_of_one_loop_turn_share_one_fsync(tmp_path: Path) -> None:
    """At durability=full, sends an event loop commits in one turn of it wait for one fsync
    of the log, made after the last of them committed; none is answered before it."""
    import asyncio

    from conveyor.aio import AsyncClient

    with Client(f"sqlite:///{tmp_path}/f.db") as client:
        client.create_queue("jobs")
        db = sqlite_db(client)
        q = AsyncClient(client=client).queue("jobs")

        async def send(text: str) -> int:
            await q.send(text)
            return db.fsyncs  # when it was answered

        async def scenario() -> None:
            await send("first")
            before = db.fsyncs
            assert before >= 1
            answered = await asyncio.gather(*(send(f"m{i}") for i in range(8)))
            assert db.fsyncs == before + 1
            assert answered == [before + 1] * 8

        asyncio.run(scenario())
        assert len(client.queue("jobs").receive(10)) == 9


def test_short_writes_of_one_loop_turn_share_a_transaction_committed_before_any_answer(
    tmp_path: Path,
) -> None:
    """Sends, receives, deletes and visibility changes an event loop makes in one turn share
    one transaction, committed at its next turn: none of them, nor a read of that turn, is
    answered before that commit, nor is a waiting receive woken."""
    import asyncio

    from conveyor.aio import AsyncClient
    from conveyor.notify import HUB

    path = tmp_path / "t.db"
    with Client(f"sqlite:///{path}?durability=normal") as client:
        client.create_queue("jobs")
        store = client.backend
        assert isinstance(store, SQLStore) and isinstance(store.db, SQLiteConnections)
        db = store.db
        aio = AsyncClient(client=client)
        q = aio.queue("jobs")

        async def scenario() -> None:
            await q.send("first")
            [first] = await q.receive(visibility_timeout=600)
            before, version = db.commits, HUB.version(store.key, "jobs")
            tasks: list[asyncio.Task[Any]] = [
                asyncio.create_task(q.send(f"m{i}")) for i in range(5)
            ]
            tasks += [
                asyncio.create_task(q.send_batch(["b1", "b2"])),
                asyncio.create_task(q.receive(max_messages=3, visibility_timeout=600)),
                asyncio.create_task(q.change_visibility(first.receipt or "", 0)),
                asyncio.create_task(q.peek(20)),
                asyncio.create_task(aio.queue("missing").send("nowhere")),
            ]
            await asyncio.sleep(0)  # every task ran to its wait; the commit comes next
            assert [i for i, t in enumerate(tasks) if t.done()] == [9]  # wrote nothing
            assert rows_of(path, "SELECT count(*) FROM q1") == [(1,)]  # not committed yet
            assert HUB.version(store.key, "jobs") == version
            done = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
            assert db.commits == before + 1
            assert HUB.version(store.key, "jobs") > version
            received, peeked = done[6], done[8]
            assert isinstance(received, list) and isinstance(peeked, list)
            assert [m.text for m in received] == ["m0", "m1", "m2"]  # it saw the turn's sends
            assert len(peeked) == 8  # it saw them too
            assert isinstance(done[9], QueueDoesNotExist)

        asyncio.run(scenario())
        assert rows_of(path, "SELECT count(*) FROM q1") == [(8,)]
        got = client.queue("jobs").receive(10)
        assert sorted(m.text for m in got) == ["b1", "b2", "first", "m3", "m4"]


def test_a_write_that_fails_in_a_loop_turn_is_undone_alone_and_a_failed_commit_fails_all(
    tmp_path: Path,
) -> None:
    """A short write that fails inside the loop turn's transaction is undone alone (the
    first of the turn, with the transaction, before any other joined it); a commit that
    fails is the error of every write of the turn, none of which is kept; threads' writes
    wait for the turn's commit, and the loop's thread outside `inline` commits it first."""
    import asyncio

    path = tmp_path / "f.db"
    db = SQLiteConnections(str(path), durability="normal", busy_timeout=5, heap=False)
    db.exec().conn.executescript(
        "PRAGMA foreign_keys = ON; CREATE TABLE parent (id INTEGER PRIMARY KEY);"
        " CREATE TABLE t (v INTEGER, p INTEGER"
        " REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)"
    )

    def insert(v: int, parent: int | None = None, fail: bool = False) -> Callable[[Any], None]:
        def fn(ex: SQLiteExec) -> None:
            ex.run("INSERT INTO t VALUES (%s, %s)", (v, parent))
            if fail:
                raise ValueError(v)

        return fn

    def short(fn: Callable[[Any], None]) -> asyncio.Future[None]:
        context = db.inline()
        with context as call:
            call.short = True
            db.write(fn)
        assert isinstance(call.durable, asyncio.Future)
        return call.durable

    def kept() -> list[int]:
        return [v for (v,) in rows_of(path, "SELECT v FROM t ORDER BY v")]

    async def scenario() -> None:
        before = db.commits
        with pytest.raises(ValueError):
            short(insert(1, fail=True))
        a = short(insert(2))
        with pytest.raises(ValueError):
            short(insert(3, fail=True))
        b = short(insert(4))
        assert a is b
        await a
        assert kept() == [2, 4] and db.commits == before + 1

        c, d = short(insert(5)), short(insert(6, parent=99))  # 6's parent is missing
        for wait in (c, d):
            with pytest.raises(StoreUnavailable, match="FOREIGN KEY"):
                await wait
        await short(insert(7))
        assert kept() == [2, 4, 7]

        e = short(insert(8))
        threaded = asyncio.to_thread(db.write, insert(9))  # waits for the turn's commit
        await asyncio.wait_for(threaded, 10)
        assert e.done()
        f = short(insert(10))
        db.write(insert(11))  # on the loop's thread, not inline: the turn commits first
        assert f.done()
        assert kept() == [2, 4, 7, 8, 9, 10, 11]

    try:
        asyncio.run(scenario())
    finally:
        db.close()


def test_a_failed_fsync_of_the_log_is_the_waiting_senders_error_and_the_next_one_opens_it_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Where the fsync helper cannot be started, a thread fsyncs the log (and keeps it open
    between fsyncs); when one fails, the sends that waited for it get the store's error
    (committed, not known durable: the caller may send again) and the next fsync opens the
    log afresh."""
    import asyncio
    import os
    import subprocess
    from unittest import mock

    from conveyor.aio import AsyncClient

    opened: list[str] = []
    real_open, real_fsync = os.open, os.fsync
    failing = [True]

    def open_(path: str, flags: int, *args: int) -> int:
        opened.append(path)
        return real_open(path, flags, *args)

    def fsync(fd: int) -> None:
        if failing[0]:
            failing[0] = False
            raise OSError(5, "Input/output error")
        real_fsync(fd)

    def refused(*args: Any, **kwargs: Any) -> None:
        raise OSError(11, "Resource temporarily unavailable")

    with (
        Client(f"sqlite:///{tmp_path}/f.db") as client,
        mock.patch.object(subprocess, "Popen", refused),
        mock.patch.object(os, "open", open_),
        mock.patch.object(os, "fsync", fsync),
    ):
        client.create_queue("jobs")
        q = AsyncClient(client=client).queue("jobs")

        async def scenario() -> None:
            with pytest.raises(StoreUnavailable, match=r"cannot fsync .*f\.db-wal"):
                await q.send("first")
            for i in range(3):
                await q.send(f"m{i}")

        asyncio.run(scenario())
    assert opened.count(f"{tmp_path}/f.db-wal") == 2  # once, and again after the failure
    assert "cannot start the fsync helper" in caplog.text


def test_the_fsync_helper_answers_each_read_of_requests_with_one_fsync(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The helper program fsyncs the log once for all the requests it reads at once and
    answers each; a failed fsync is the answer to every request it served, its reason goes
    to standard error, and the next fsync opens the log afresh."""
    import os
    import threading
    from unittest import mock

    from conveyor.backends.sql import fsyncd

    log = tmp_path / "x.db-wal"
    log.write_bytes(b"frames")
    asks, ask = os.pipe()
    answers, answer = os.pipe()
    fsyncs: list[int] = []
    opened: list[str] = []
    real_open = os.open
    outcomes = iter([OSError(5, "Input/output error"), None, None])

    def fsync(fd: int) -> None:
        fsyncs.append(fd)
        error = next(outcomes)
        if error is not None:
            raise error

    def open_(path: str, flags: int, *args: int) -> int:
        opened.append(path)
        return real_open(path, flags, *args)

    with mock.patch.object(os, "fsync", fsync), mock.patch.object(os, "open", open_):
        helper = threading.Thread(target=fsyncd.serve, args=(str(log), asks, answer))
        helper.start()
        os.write(ask, b"??")
        assert os.read(answers, 10) == b"Ee"
        os.write(ask, b"???")
        assert os.read(answers, 10) == b"F++"
        os.write(ask, b"?")
        assert os.read(answers, 10) == b"F"
        os.close(ask)  # the end of its input ends it
        helper.join(10)
    assert not helper.is_alive() and len(fsyncs) == 3
    assert opened == [str(log), str(log)]
    assert f"cannot fsync {log}: [Errno 5] Input/output error" in capfd.readouterr().err
    for fd in (asks, answers, answer):
        os.close(fd)


def test_a_helper_that_ends_fails_the_sends_waiting_for_it_and_another_starts(
    tmp_path: Path,
) -> None:
    """At durability=full the store's fsync helper, a process started at the first durable
    commit on an event loop, outlives a Ctrl-C to the process group (the server drains its
    requests then); killed, it fails the sends that wait for it (committed, not known
    durable) and the next starts another. Closing the store ends it."""
    import asyncio
    import os
    import signal

    from conveyor.aio import AsyncClient

    with Client(f"sqlite:///{tmp_path}/k.db") as client:
        client.create_queue("jobs")
        syncer = sqlite_db(client)._syncer
        q = AsyncClient(client=client).queue("jobs")

        async def scenario() -> None:
            await q.send("first")
            helper = syncer._process
            assert helper is not None and helper.proc.poll() is None
            helper.proc.send_signal(signal.SIGINT)
            await q.send("after a Ctrl-C")
            assert helper.proc.poll() is None and syncer.fsyncs == 2
            helper.proc.send_signal(signal.SIGSTOP)
            waiting = asyncio.create_task(q.send("lost helper"))
            for _ in range(5):
                await asyncio.sleep(0)
            assert not waiting.done()  # committed, waiting for the fsync
            helper.proc.kill()
            with pytest.raises(StoreUnavailable, match=r"fsync helper .* ended"):
                await asyncio.wait_for(waiting, 10)
            await q.send("new helper")
            assert syncer._process is not helper and helper.proc.poll() is not None
            assert syncer.fsyncs == 3

        asyncio.run(scenario())
        assert sorted(m.text for m in client.queue("jobs").receive(10)) == [
            "after a Ctrl-C",
            "first",
            "lost helper",
            "new helper",
        ]
        current = syncer._process
        assert current is not None
    assert current.proc.poll() == 0  # the store closed: it ended with its input
    assert not os.path.exists(f"{tmp_path}/k.db-wal")


def test_writes_that_meet_the_lock_taken_on_a_loop_commit_together_after_it(
    tmp_path: Path,
) -> None:
    """Sends, deletes and visibility changes an event loop cannot make at once (another
    process holds the write lock) are gathered: one transaction of the store's thread runs
    them all once the lock is free, each in a savepoint (one that fails fails alone),
    nothing is answered before that commit, and a receive waiting in the loop is woken by
    it."""
    import asyncio

    from conveyor.aio import AsyncClient

    path = tmp_path / "g.db"
    with Client(f"sqlite:///{path}?durability=full&busy_timeout=20") as client:
        client.create_queue("jobs")
        client.create_queue("other")
        store = client.backend
        assert isinstance(store, SQLStore)
        db = store.db
        assert isinstance(db, SQLiteConnections)
        aio = AsyncClient(client=client)
        q = aio.queue("jobs")
        client.queue("other").send("held")
        [held] = client.queue("other").receive(visibility_timeout=600)
        receipt = held.receipt
        assert receipt is not None

        def hold() -> sqlite3.Connection:
            other = sqlite3.connect(path, isolation_level=None)
            other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
            return other

        async def scenario() -> None:
            other = hold()
            writes: list[asyncio.Task[Any]] = [
                asyncio.create_task(q.send(f"m{i}")) for i in range(5)
            ]
            writes += [
                asyncio.create_task(q.send_batch(["b1", "b2"])),
                asyncio.create_task(aio.queue("missing").send("nowhere")),
                asyncio.create_task(aio.queue("other").change_visibility(receipt, 0)),
            ]
            for _ in range(3):
                await asyncio.sleep(0)  # each write tried the lock and was handed over
            # only the send to a queue that does not exist is answered (it wrote nothing)
            assert [i for i, t in enumerate(writes) if t.done()] in ([], [6])
            before = db.commits
            other.execute("COMMIT")
            other.close()
            done = await asyncio.wait_for(asyncio.gather(*writes, return_exceptions=True), 20)
            assert db.commits - before == 1  # one transaction for the eight
            assert isinstance(done[6], QueueDoesNotExist)
            batch = done[5]
            assert isinstance(batch, list) and [r.ok for r in batch] == [True, True]

        async def woken() -> None:
            store._poll_interval = 600.0  # only a wake-up can return the message in time
            waiter = asyncio.create_task(q.receive(wait=20))
            for _ in range(3):
                await asyncio.sleep(0)  # the receive found nothing and waits
            other = hold()
            send = asyncio.create_task(q.send("late"))
            await asyncio.sleep(0)
            other.execute("COMMIT")
            other.close()
            await asyncio.wait_for(send, 20)
            got = await asyncio.wait_for(waiter, 15)  # woken after the commit, not before
            assert [m.text for m in got] == ["late"]

        asyncio.run(scenario())
        texts = sorted(m.text for m in client.queue("jobs").receive(10))
        assert texts == ["b1", "b2", "m0", "m1", "m2", "m3", "m4"]
        assert [m.text for m in client.queue("other").receive()] == ["held"]
        asyncio.run(woken())


def test_commits_on_an_event_loop_leave_checkpoints_to_a_thread_and_the_log_stays_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commits on an event loop's thread do not copy the write-ahead log back into the
    database (SQLite would, inside the COMMIT that takes the log past 1,000 pages); the
    store's checkpoint thread does, and a log that writes kept ahead of it starts again
    from its beginning once past its limit. A reader keeping an old snapshot makes that
    wait give up rather than hold writers back."""
    import asyncio

    from conveyor.aio import AsyncClient
    from conveyor.backends.sql.sqlite_connections import _Checkpointer

    monkeypatch.setattr(_Checkpointer, "EVERY", 10**9)  # no checkpoint asked for, at first
    monkeypatch.setattr(_Checkpointer, "LIMIT", 1000)
    path = tmp_path / "c.db"
    frame = 4096 + 24  # a page of log and its header

    def log_frames() -> int:
        return int(rows_of(path, "PRAGMA wal_checkpoint(PASSIVE)")[0][1])

    with Client(f"sqlite:///{path}?durability=normal") as client:
        client.create_queue("jobs")
        checkpointer = sqlite_db(client).checkpointer
        q = AsyncClient(client=client).queue("jobs")

        async def sends(n: int) -> None:
            for i in range(n):
                await q.send_batch([f"m{i}-{j}-" + "x" * 300 for j in range(10)])

        asyncio.run(sends(1000))
        # ~3 pages of log a commit, none copied back by the loop's commits
        assert (tmp_path / "c.db-wal").stat().st_size > 2000 * frame
        checkpointer.every = 1
        checkpointer.committed()
        until(lambda: checkpointer.restarts >= 1, what="a RESTART checkpoint")
        assert checkpointer.gave_up == 0
        copy = tmp_path / "copy.db"  # the database file alone, without its log
        copy.write_bytes(path.read_bytes())
        assert rows_of(copy, "SELECT count(*) FROM q1") == [(10_000,)]
        asyncio.run(sends(1))
        assert log_frames() < 20  # the next write started the log again

        reader = sqlite3.connect(path, isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM q1").fetchone()  # keeps this snapshot
        asyncio.run(sends(800))  # past the limit again, the RESTART meets the reader
        until(lambda: checkpointer.gave_up >= 1, what="a RESTART that gave up")
        reader.execute("COMMIT")
        reader.close()
        jobs = client.queue("jobs")
        assert sum(len(got) for got in iter(lambda: jobs.receive(10), [])) == 18_010


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
            context = store.inline()
            assert context is not None
            return context

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
        from conveyor.backends.sql.sqlite import _held_claim

        conn = sqlite3.connect(tmp_path / "q.db")
        try:
            plan = conn.execute(
                f"EXPLAIN QUERY PLAN {_held_claim('q1')}", (0, 0, 0, 10, 0, 0, 0, 10, 10)
            ).fetchall()
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
    StoreUnavailable and store none of their messages, and once there is room every message
    sent before is received."""
    client = Client(f"sqlite:///{tmp_path / 'full.db'}?durability=normal")
    q = client.create_queue("full")
    conn = sqlite_db(client).exec().conn  # this thread's connection: the calls below use it
    (pages,) = conn.execute("PRAGMA page_count").fetchone()
    conn.execute(f"PRAGMA max_page_count = {pages + 8}")
    sent: list[str] = []
    with pytest.raises(StoreUnavailable, match="full"):
        for i in range(1000):
            results = q.send_batch([f"{i:04d}-{j}".encode() + b"x" * 1000 for j in range(10)])
            sent += [f"{i:04d}-{j}" for j, r in enumerate(results) if r.ok]
    assert sent and len(sent) % 10 == 0  # whole batches only
    with pytest.raises(StoreUnavailable, match="full"):
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
    asks every queue's stats, and every write takes the store's write lock); the totals this
    process has not written yet are added to its stats, and written once due."""
    clock = ManualClock()
    with Client(f"sqlite:///{tmp_path}/s.db", clock=clock) as client:
        store = client.backend
        assert isinstance(store, SQLStore)
        q = client.create_queue("jobs", retention=120)
        q.send("first")  # the first count is due at once: written
        store._totals._interval = 3600.0
        q.send_batch(["a", "b"])
        q.receive(2)
        writes: list[str] = []
        write = store.db.write

        def counted(fn: Callable[[SQLiteExec], Any], **options: Any) -> Any:
            writes.append(getattr(fn, "__qualname__", ""))
            return write(fn, **options)

        monkeypatch.setattr(store.db, "write", counted)
        stats = q.stats()
        assert (stats.sent, stats.received, stats.ready, stats.in_flight) == (3, 2, 1, 2)
        assert writes == []
        assert rows_of(tmp_path / "s.db", "SELECT sent, received FROM queues") == [(1, 0)]
        clock.advance(121)
        assert q.stats().expired == 3 and writes != []  # the sweep wrote
        writes.clear()
        store._totals._due_at = 0.0
        assert q.stats().sent == 3
        assert rows_of(tmp_path / "s.db", "SELECT sent, received FROM queues") == [(3, 2)]
        assert len(writes) == 1  # the totals, due


def test_writes_handed_over_while_the_lock_was_free_go_back_to_the_loop(
    tmp_path: Path,
) -> None:
    """A write handed to the store's writer thread while its transaction runs waits for the
    next; once a transaction found the lock free at once, those are handed back and the
    loop writes itself again (without this, a loop that hands over one write, say while a
    checkpoint held the lock, hands over every write for as long as writes keep coming).
    Where the lock was taken (another process), they stay for the writer's next one."""
    import asyncio
    import threading

    from conveyor.aio import offload_write

    path = tmp_path / "h.db"
    with Client(f"sqlite:///{path}?durability=normal&busy_timeout=20") as client:
        store = client.backend
        db = sqlite_db(client)
        db.exec().conn.execute("CREATE TABLE t (v TEXT, thread TEXT)")
        started, proceed = threading.Event(), threading.Event()

        def insert(v: str, hold: bool = False) -> None:
            def fn(ex: SQLiteExec) -> None:
                ex.run("INSERT INTO t VALUES (%s, %s)", (v, threading.current_thread().name))

            db.write(fn)
            if hold:
                started.set()
                proceed.wait(10)

        async def scenario(contended: bool) -> None:
            started.clear()
            proceed.clear()
            other = sqlite3.connect(path, isolation_level=None)
            if contended:
                other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
            first = asyncio.create_task(offload_write(store, insert, "first", contended))
            if contended:
                await asyncio.sleep(0.05)  # it met the lock: the writer waits for it
                other.execute("COMMIT")
            else:
                await asyncio.sleep(0)
                assert not first.done()  # ran on the loop, waits for the turn's commit
                await first
                first = asyncio.create_task(asyncio.to_thread(lambda: None))
                db._gathered.submit(lambda: insert("held", True))
            await asyncio.to_thread(started.wait, 10)  # the writer's transaction runs
            assert db.gathering()
            later = asyncio.create_task(offload_write(store, insert, "later"))
            await asyncio.sleep(0)  # the loop hands it over: a transaction runs
            proceed.set()
            await asyncio.wait_for(asyncio.gather(first, later), 10)
            assert not db.gathering()
            other.close()

        asyncio.run(scenario(contended=False))
        asyncio.run(scenario(contended=True))
        rows = rows_of(path, "SELECT v, thread FROM t")
        loop_thread = threading.current_thread().name
        assert rows == [
            ("first", loop_thread),
            ("held", "conveyor-sqlite-writer"),
            ("later", loop_thread),  # handed back: the lock had been free at once
            ("first", "conveyor-sqlite-writer"),
            ("later", "conveyor-sqlite-writer"),  # the writer had waited for the lock
        ]
