"""The SQLite store's writes from a server's event loop: calls on the loop's own thread, the
transaction a turn of the loop shares, the log's fsync (the helper process, and the thread
where none can start), writes handed to the store's writer thread, and checkpoints."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from conveyor import Client, DeadLetterPolicy, QueueDoesNotExist, StoreUnavailable
from conveyor.backends.sql.sqlite_connections import SQLiteConnections, SQLiteExec
from conveyor.backends.sql.store import SQLStore

from .support.sqlitefiles import rows_of, sqlite_db
from .support.waiting import until


def loop_sends(client: Client) -> Callable[[int], None]:
    """Sends to queue "jobs" from an event loop: n batches of ten 300-byte bodies, each its
    own commit (about three pages of log)."""
    import asyncio

    from conveyor.aio import AsyncClient

    q = AsyncClient(client=client).queue("jobs")

    async def sends(n: int) -> None:
        for i in range(n):
            await q.send_batch([f"m{i}-{j}-" + "x" * 300 for j in range(10)])

    return lambda n: asyncio.run(sends(n))


def drained(client: Client) -> int:
    """How many messages queue "jobs" held, received until it is empty."""
    jobs = client.queue("jobs")
    return sum(len(got) for got in iter(lambda: jobs.receive(10), []))


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
            commits = store.loop_commits()
            assert commits is not None
            return commits.inline()

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


def test_a_deep_queue_is_never_counted_on_the_loop(tmp_path: Path) -> None:
    """On an event loop's thread stats of a queue that may be deep (its running totals say
    so, or it was deep at its last count) raise WouldBlock before counting, and `offload`
    counts it in a thread; its estimates, and small queues' counts, are made on the loop. A
    count made there whose store write would wait for another process's lock is answered,
    and written from a thread once the lock is free."""
    import asyncio
    import threading

    from conveyor.aio import offload
    from conveyor.backends.base import WouldBlock

    path = tmp_path / "c.db"
    with Client(f"sqlite:///{path}?durability=normal") as client:
        store = client.backend
        assert isinstance(store, SQLStore)
        accounts = store.accounts
        accounts.counts.estimate_from = 20
        counted: list[bool] = []  # each count: on the loop's thread
        count = accounts._count

        def spy(*args: Any) -> Any:
            counted.append(threading.current_thread() is threading.main_thread())
            return count(*args)

        accounts._count = spy  # type: ignore[method-assign,assignment]
        q = client.create_queue("deep")
        commits = store.loop_commits()
        assert commits is not None

        def inline_stats() -> Any:
            with commits.inline():
                return q.stats()

        q.send_batch([f"m{i}" for i in range(10)])
        assert inline_stats().ready == 10 and counted == [True]  # small: counted on the loop
        q.send_batch([f"m{i}" for i in range(10, 30)])
        with pytest.raises(WouldBlock):
            inline_stats()
        assert counted == [True]
        assert asyncio.run(offload(store, q.stats)).ready == 30
        assert counted == [True, False]  # in a thread
        assert inline_stats().ready == 30 and len(counted) == 2  # estimated on the loop

        # a dead-letter queue's totals leave out what is dead-lettered into it: counted on
        # the loop, and its count stored from a thread once another writer lets go
        client.create_queue("dead")
        src = client.create_queue(
            "src", dead_letter=DeadLetterPolicy(queue="dead", max_receive_count=5)
        )
        src.send_batch([f"d{i}" for i in range(10)])
        src.send_batch([f"d{i}" for i in range(10, 30)])
        for m in src.peek(30):
            src.move_to_dlq(m.id)
        dead = client.queue("dead")
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")

        def dead_stats() -> Any:
            with commits.inline():
                return dead.stats()

        assert dead_stats().ready == 30 and counted[-1] is True
        assert other.execute(
            "SELECT count(*) FROM counts WHERE counted_at IS NOT NULL"
        ).fetchone() == (1,)
        other.execute("COMMIT")
        until(
            lambda: (
                other.execute(
                    "SELECT ready_count FROM counts WHERE counted_at IS NOT NULL"
                    " ORDER BY ready_count"
                ).fetchall()
                == [(30,), (30,)]
            ),
            what="the dead-letter queue's count stored",
        )
        other.close()


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


def test_a_lazy_write_on_the_loop_is_committed_at_once_and_waits_for_no_fsync(
    tmp_path: Path,
) -> None:
    """At durability=full a write made lazily (`offload_lazy_to`: the push gateway's
    acknowledgements) is committed before it returns, so every other connection sees it,
    and waits for no fsync of the log; the next durable commit's fsync takes it to the
    disk. The same delete made plainly waits for an fsync."""
    import asyncio

    from conveyor.aio import offload_lazy_to, offload_to

    path = tmp_path / "lazy.db"
    with Client(f"sqlite:///{path}") as client:
        q = client.create_queue("jobs")
        db = sqlite_db(client)
        q.send_batch(["a", "b"])
        first, second = (m.receipt for m in q.receive(2))
        assert first is not None and second is not None

        async def scenario() -> None:
            before = db.fsyncs
            await offload_lazy_to(None, client.backend, q.delete, first)
            assert db.fsyncs == before  # answered without an fsync
            with Client(f"sqlite:///{path}") as other:  # committed: another store sees it
                assert other.queue("jobs").stats().in_flight == 1
            await offload_to(None, client.backend, q.delete, second)
            assert db.fsyncs == before + 1  # a plain delete waits for one

        asyncio.run(scenario())
        assert q.stats().total == 0


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
            ex.run("INSERT INTO t VALUES (:v, :parent)", {"v": v, "parent": parent})
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
    failing = [False]  # from the first send on

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
        mock.patch.object(os, "fdatasync", fsync, create=True),  # the log's sync (Linux)
    ):
        client.create_queue("jobs")
        backend = client.backend
        assert isinstance(backend, SQLStore)
        # no write but the sends' (the running totals held back): a write from another
        # thread meanwhile would hand a send to the writer thread, which fsyncs on its own
        backend.accounts.totals.hold()
        q = AsyncClient(client=client).queue("jobs")
        wal = f"{tmp_path}/f.db-wal"
        before = opened.count(wal)  # (the thread that made the queue fsynced the log too)
        failing[0] = True

        async def scenario() -> None:
            with pytest.raises(StoreUnavailable, match=r"cannot fsync .*f\.db-wal"):
                await q.send("first")
            for i in range(3):
                await q.send(f"m{i}")

        asyncio.run(scenario())
    assert opened.count(wal) - before == 2  # once, and again after the failure
    assert "cannot start the fsync helper" in caplog.text


def test_the_fsync_helper_answers_each_read_of_requests_with_one_fsync(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The helper program fsyncs the log once for all the requests it reads at once and
    answers each; a failed fsync is the answer to every request it served, its reason goes
    to standard error, and the next fsync opens the log afresh (and, as the first fsync of
    a log opened, fsyncs its directory too)."""
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
    # the first fsync fails; the next opens the log afresh, and its directory is fsynced too
    outcomes = iter([OSError(5, "Input/output error"), None, None, None])

    def fsync(fd: int) -> None:
        fsyncs.append(fd)
        error = next(outcomes)
        if error is not None:
            raise error

    def open_(path: str, flags: int, *args: int) -> int:
        opened.append(path)
        return real_open(path, flags, *args)

    with (
        mock.patch.object(os, "fsync", fsync),
        mock.patch.object(os, "fdatasync", fsync, create=True),  # the log's sync (Linux)
        mock.patch.object(os, "open", open_),
    ):
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
    assert not helper.is_alive() and len(fsyncs) == 4
    assert opened == [str(log), str(log), str(tmp_path)]
    assert f"cannot fsync {log}: [Errno 5] Input/output error" in capfd.readouterr().err
    for fd in (asks, answers, answer):
        os.close(fd)


HELPER_PRIORITY = """
import asyncio, os, sys
from conveyor import Client
from conveyor.aio import AsyncClient
from tests.support.sqlitefiles import sqlite_db

with Client(f"sqlite:///{sys.argv[1]}") as client:
    q = AsyncClient(client=client).queue(client.create_queue("jobs").name)
    asyncio.run(q.send("durable"))  # a commit on the loop: the helper starts and fsyncs it
    helper = sqlite_db(client)._syncer._process
    assert helper is not None and client.queue("jobs").stats().ready == 1
    print(os.getpriority(os.PRIO_PROCESS, 0), os.getpriority(os.PRIO_PROCESS, helper.proc.pid))
"""


@pytest.mark.parametrize("allowed", ["as it is", "without CAP_SYS_NICE"])
def test_the_fsync_helper_runs_above_its_servers_priority_where_it_may(
    tmp_path: Path, allowed: str
) -> None:
    """The helper asks for ten nice levels above the process that started it (each send
    waiting for it waits less for the scheduler); where the system refuses, it runs at that
    process's level and serves all the same."""
    import os
    import shutil
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    wrap: list[str] = []
    if allowed != "as it is":
        setpriv = shutil.which("setpriv")
        if setpriv is None or os.geteuid() != 0:
            pytest.skip("dropping CAP_SYS_NICE needs root and setpriv (util-linux)")
        wrap = [setpriv, "--bounding-set=-sys_nice", "--inh-caps=-sys_nice", "--"]
    may = subprocess.run([*wrap, sys.executable, "-c", "import os; os.nice(-1)"]).returncode == 0
    if allowed != "as it is":
        assert not may  # the capability is gone: no raise at all
    done = subprocess.run(
        [*wrap, sys.executable, "-c", HELPER_PRIORITY, str(tmp_path / "p.db")],
        capture_output=True, text=True, cwd=root, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    server, helper = map(int, done.stdout.split())
    assert helper == (max(-20, server - 10) if may else server)


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
    from conveyor.backends.sql.sqlite_checkpoints import Checkpointer

    monkeypatch.setattr(Checkpointer, "EVERY", 10**9)  # no checkpoint asked for, at first
    monkeypatch.setattr(Checkpointer, "LIMIT", 1000)
    path = tmp_path / "c.db"
    frame = 4096 + 24  # a page of log and its header

    def log_frames() -> int:
        return int(rows_of(path, "PRAGMA wal_checkpoint(PASSIVE)")[0][1])

    with Client(f"sqlite:///{path}?durability=normal") as client:
        client.create_queue("jobs")
        checkpointer = sqlite_db(client).checkpointer
        sends = loop_sends(client)
        sends(1000)
        # ~3 pages of log a commit, none copied back by the loop's commits
        assert (tmp_path / "c.db-wal").stat().st_size > 2000 * frame
        checkpointer.every = 1
        checkpointer.committed()
        until(lambda: checkpointer.restarts >= 1, what="a RESTART checkpoint")
        assert checkpointer.gave_up == 0
        copy = tmp_path / "copy.db"  # the database file alone, without its log
        copy.write_bytes(path.read_bytes())
        assert rows_of(copy, "SELECT count(*) FROM q1") == [(10_000,)]
        sends(1)
        assert log_frames() < 20  # the next write started the log again

        reader = sqlite3.connect(path, isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM q1").fetchone()  # keeps this snapshot
        sends(800)  # past the limit again, the RESTART meets the reader

        def gave_up() -> bool:
            # asked again as the next commits would ask (an attempt that failed to run,
            # or a checkpoint pace the writes stretched, is not the last)
            checkpointer.every = 1
            checkpointer.committed()
            return checkpointer.gave_up >= 1

        until(gave_up, what="a RESTART that gave up")
        reader.execute("COMMIT")
        reader.close()
        assert drained(client) == 18_010


def test_the_log_starts_anew_between_two_turns_of_a_loop_that_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a loop writes, the RESTART checkpoint that starts the log anew is made on the
    loop's thread between two of its turns, where it need not wait for the write lock
    (from the checkpoint thread it waited in SQLite's busy handler against the loop, then
    held every write back); the log stays bounded and nothing written is lost."""
    from conveyor.backends.sql.sqlite_checkpoints import Checkpointer

    monkeypatch.setattr(Checkpointer, "EVERY", 16)  # a checkpoint every 16 commits
    monkeypatch.setattr(Checkpointer, "MOST", 16)
    monkeypatch.setattr(Checkpointer, "LIMIT", 300)
    path = tmp_path / "r.db"
    with Client(f"sqlite:///{path}?durability=normal") as client:
        client.create_queue("jobs")
        checkpointer = sqlite_db(client).checkpointer
        loop_sends(client)(1500)
        # ~3 pages of log a commit: past the limit every hundred commits or so
        assert checkpointer.restarts_on_loop >= 5, (checkpointer.restarts, checkpointer.gave_up)
        assert checkpointer.gave_up == 0
        # the log file's size is its high-water mark: the limit, and what the loop wrote
        # while a checkpoint waited for its thread's turn (a loaded machine: hundreds of
        # pages); without the RESTARTs it holds all ~4,600 pages written (measured)
        assert (tmp_path / "r.db-wal").stat().st_size < 2000 * (4096 + 24)
        assert drained(client) == 15_000


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
                ex.run(
                    "INSERT INTO t VALUES (:v, :thread)",
                    {"v": v, "thread": threading.current_thread().name},
                )

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


def test_totals_written_in_a_loop_turn_that_fails_to_commit_are_counted_again(
    tmp_path: Path,
) -> None:
    """The running totals a process held, written in the transaction of an event loop's
    turn (they fell due there), are counted again when that turn's commit fails: the
    turn's own send is undone, and the earlier send it counted is kept."""
    import asyncio

    from conveyor.aio import AsyncClient

    path = tmp_path / "t.db"
    setup = sqlite3.connect(path, isolation_level=None)
    setup.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    setup.execute(
        "CREATE TABLE child (pid INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)"
    )
    with Client(f"sqlite:///{path}?durability=normal") as client:
        client.create_queue("jobs")
        store = client.backend
        assert isinstance(store, SQLStore) and isinstance(store.db, SQLiteConnections)
        db, totals = store.db, store.accounts.totals
        q = AsyncClient(client=client).queue("jobs")

        async def scenario() -> None:
            db.exec().conn.execute("PRAGMA foreign_keys = ON")  # the loop's connection
            totals.hold()  # held: neither written by the next send nor a timer
            await q.send("first")
            assert totals.pending(store.lookup("jobs")[0]) == (1, 0, 0)
            totals.due_now()  # due: the next write in a turn writes them
            send = asyncio.create_task(q.send("second"))
            await asyncio.sleep(0)  # the send wrote in the turn's transaction, not committed
            turn = db._local.s.turn
            assert turn is not None
            turn.conn.execute("INSERT INTO child VALUES (99)")  # its COMMIT fails now
            with pytest.raises(StoreUnavailable):
                await send

        asyncio.run(scenario())
        qid = store.lookup("jobs")[0]
        assert totals.pending(qid) == (1, 0, 0)  # the first send's, counted again
        store.accounts.flush()
        assert rows_of(path, "SELECT sent FROM queues") == [(1,)]
        assert [m.text for m in client.queue("jobs").receive(10)] == ["first"]
    setup.close()
