"""Running totals survive the way processes really end: a process that sends, receives and
deletes through the SDK and ends by `os._exit` (as `multiprocessing` children end) without
closing its client leaves the queue's sent, received and deleted totals right."""

from __future__ import annotations

import contextlib
import multiprocessing
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, cast

import pytest

from conveyor import Client
from conveyor.backends.sql.store import SQLStore

from .conftest import STORES
from .support.sqlstores import drop
from .support.waiting import until

ROOT = Path(__file__).resolve().parent.parent
N = 900


def work(url: str, n: int = N) -> None:
    """Send `n` messages (ten a batch), receive and delete every one; no close."""
    q = Client(url).queue("work")
    for start in range(0, n, 10):
        q.send_batch([f"m{i}" for i in range(start, start + 10)])
    done = 0
    while done < n:
        got = q.receive(10)
        q.delete_batch([m.receipt or "" for m in got])
        done += len(got)


def child(url: str, n: int) -> None:  # a multiprocessing child: os._exit once it returns
    work(url, n)


def totals(url: str) -> tuple[int, int, int]:
    with Client(url) as client:
        s = client.queue("work").stats()
    return s.sent, s.received, s.deleted


@pytest.fixture
def url(work_url: str) -> str:
    return work_url


def test_a_multiprocessing_child_leaves_its_totals(url: str) -> None:
    n = 60 if url.startswith("dynamodb") else N  # DynamoDB's emulator: a request a message
    proc = multiprocessing.get_context("fork").Process(target=child, args=(url, n))
    proc.start()
    proc.join(300)
    assert proc.exitcode == 0
    assert totals(url) == (n, n, n)


def test_a_process_ended_by_a_bare_os_exit_loses_counts_never_messages(tmp_path: Path) -> None:
    """A bare `os._exit` (or a kill) skips every hook: the running totals the process held
    (at most a second's) are lost, never more than it counted, and never a message: the
    queue's ready count is counted from its messages, exactly."""
    url = STORES["sqlite"](tmp_path)
    Client(url).create_queue("work")
    script = textwrap.dedent(
        f"""
        import os
        from conveyor import Client
        q = Client({url!r}).queue("work")
        for start in range(0, {N}, 10):
            q.send_batch([f"m{{i}}" for i in range(start, start + 10)])
        os._exit(0)
        """
    )
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=True, timeout=300)
    with Client(url) as client:
        stats = client.queue("work").stats()
    assert stats.ready == N
    assert 10 <= stats.sent <= N  # the first batch's count was due at once: written


def _run_script(body: str) -> None:
    subprocess.run([sys.executable, "-c", textwrap.dedent(body)], cwd=ROOT, check=True, timeout=300)


@pytest.mark.parametrize("imported", ["before", "after"])
def test_a_multiprocessing_child_forked_with_a_store_counts_its_own_not_its_parent_s(
    url: str, imported: str
) -> None:
    """A store made before a `multiprocessing` child is forked with it: the child writes
    what it did, the parent what it did (and had not written at the fork), nothing twice;
    whether the parent imported `multiprocessing` before making the store or only after.
    Making a store imports none (a command line's start would pay for it; boto3, which
    DynamoDB's store uses, imports it itself)."""
    first = "import multiprocessing" if imported == "before" else ""
    already = imported == "before" or url.startswith("dynamodb")
    _run_script(
        f"""
        import sys
        {first}
        from conveyor import Client
        client = Client({url!r})
        q = client.queue("work")
        q.send("first")  # written at once: the first counts are due at once
        q.send_batch([f"p{{i}}" for i in range(10)])  # held
        assert ("multiprocessing" in sys.modules) == {already}, "imported with the store"
        import multiprocessing
        def more():
            q.send_batch([f"c{{i}}" for i in range(10)])
            q.send_batch([f"c{{i}}" for i in range(10, 20)])
        proc = multiprocessing.get_context("fork").Process(target=more)
        proc.start()
        proc.join(120)
        assert proc.exitcode == 0
        client.close()
        """
    )
    assert totals(url)[0] == 31


def test_a_child_of_a_plain_fork_counts_its_own_not_its_parent_s(url: str) -> None:
    """`os.fork` without `multiprocessing` (a pre-forking server's way): the child, ending
    by a normal exit, writes what it did and not what its parent held at the fork."""
    _run_script(
        f"""
        import os, sys
        from conveyor import Client
        client = Client({url!r})
        q = client.queue("work")
        q.send("first")  # written at once: the first counts are due at once
        q.send_batch([f"p{{i}}" for i in range(10)])  # held
        pid = os.fork()
        if pid == 0:
            q.send_batch([f"c{{i}}" for i in range(10)])
            sys.exit(0)  # atexit runs: the child's totals written
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        client.close()
        """
    )
    assert totals(url)[0] == 21


@pytest.mark.parametrize("store", ["sqlite", "postgres", "mysql", "dynamodb"])
def test_an_idle_process_s_totals_reach_the_others_once_due(store: str, tmp_path: Path) -> None:
    """A process that sends and then makes no more calls: the totals it held are written
    once due all the same (within a second or so), so another process's stats show
    them without waiting for the first to call again or exit."""
    url = STORES[store](tmp_path)
    try:
        with Client(url) as idle, Client(url) as other:
            q = idle.create_queue("work")
            q.send("first")  # written at once: the first counts are due at once
            q.send_batch(["a", "b"])  # held: written once due, with no call to write them
            q.receive(2)
            there = other.queue("work")
            until(lambda: (there.stats().sent, there.stats().received) == (3, 2), timeout=10)
    finally:
        drop(url)


def test_totals_a_process_could_not_write_reach_the_others_once_it_is_idle(
    tmp_path: Path,
) -> None:
    """A send whose totals fell due while another connection held SQLite's write lock past
    the busy timeout: the write of the totals fails (the send does not), and the process,
    making no more calls, writes them once the lock is free, from its idle timer."""
    path = tmp_path / "q.db"
    url = f"sqlite:///{path}?busy_timeout=0.2"
    with Client(url) as idle, Client(url) as other:
        q = idle.create_queue("work")
        q.send("first")  # written at once: the first counts are due at once
        accounts = cast(SQLStore[Any], idle.backend).accounts
        accounts.totals.due_now()  # the next send's counts due at once too
        flush = accounts.flush
        blocker = sqlite3.connect(path, isolation_level=None)

        def locked_out() -> None:
            del accounts.flush  # once
            blocker.execute("BEGIN IMMEDIATE")
            try:
                flush()
            finally:
                blocker.execute("ROLLBACK")

        accounts.flush = locked_out  # type: ignore[method-assign]
        q.send("second")  # sent: its totals' write failed
        blocker.close()
        there = other.queue("work")
        assert there.stats().sent == 1
        until(lambda: there.stats().sent == 2, timeout=10, what="the totals written")


def test_an_idle_forked_child_s_totals_reach_the_others(url: str) -> None:
    """A child forked while its parent's idle timer runs (counts held): the timer did not
    come with it, so the child arms its own, and what it did reaches other processes while
    it stays alive and makes no more calls."""
    client = Client(url)
    q = client.queue("work")
    q.send("first")  # written at once: the first counts are due at once
    q.send_batch(["a", "b"])  # held: the parent's timer is armed
    ctx = multiprocessing.get_context("fork")
    leave = ctx.Event()

    def more() -> None:
        q.send_batch([f"c{i}" for i in range(10)])
        q.receive(4)
        leave.wait(60)  # idle, and alive

    proc = ctx.Process(target=more)
    proc.start()
    try:
        with Client(url) as other:
            there = other.queue("work")
            until(lambda: (there.stats().sent, there.stats().received) == (13, 4), timeout=10)
    finally:
        leave.set()
        proc.join(60)
        client.close()
    assert proc.exitcode == 0


def test_a_process_that_ends_while_its_idle_timer_writes_leaves_its_totals(
    tmp_path: Path,
) -> None:
    """A process ends normally while its idle timer's write of the totals it took waits for
    the write lock another process holds: the process's last write waits for that one to
    end (the totals are written), where the exit would have ended the timer's thread with
    the totals it had taken."""
    path = tmp_path / "q.db"
    url = f"sqlite:///{path}"
    Client(url).create_queue("work").send("first")
    script = textwrap.dedent(
        f"""
        import sys, time
        from conveyor import Client
        client = Client({url!r})  # not closed: the process's end writes what it holds
        q = client.queue("work")
        for start in range(0, {N}, 10):
            q.send_batch([f"m{{i}}" for i in range(start, start + 10)])
        print("sent", flush=True)
        sys.stdin.readline()  # the other process holds the write lock
        totals = client.backend.accounts.totals
        deadline = time.monotonic() + 30
        while totals and time.monotonic() < deadline:  # until the idle timer takes them
            time.sleep(0.01)
        print("taken" if not totals else "held", flush=True)
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:  # its pipes closed at the end
        assert proc.stdin is not None and proc.stdout is not None
        blocker = sqlite3.connect(path, isolation_level=None)
        try:
            assert proc.stdout.readline().strip() == "sent"
            blocker.execute("BEGIN IMMEDIATE")
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "taken"
            # the process is ending now, its timer's thread waiting for the lock: hold it a
            # little longer, so that its end comes while that write still waits
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(0.5)
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert proc.wait(30) == 0
    assert totals(url)[0] == N + 1
