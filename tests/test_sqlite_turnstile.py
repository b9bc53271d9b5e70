"""How a SQLite write waits for the lock: short steps after 5 ms, then a turn."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conveyor import Client, Queue
from conveyor.backends.sql import sqlite_turnstile
from conveyor.backends.sql.sqlite_connections import SQLiteConnections, SQLiteExec
from conveyor.backends.sql.sqlite_turnstile import Turnstile
from conveyor.backends.sql.store import SQLStore
from conveyor.exceptions import StoreUnavailable

from .support import waiting

ROOT = Path(__file__).resolve().parent.parent


def test_the_writer_that_waited_long_goes_before_one_that_just_came(tmp_path: Path) -> None:
    """Another connection holds the lock; a send waits, past `TURN_AFTER`, so it takes the
    turn; then a second store on the file (as another process) sends. When the lock is let
    go, the first goes first: the second held back while the first had the turn. Without
    turns the first sleeps in SQLite's busy handler (20-25 ms between tries by then) while
    the second, just come, tries after 1, 2, 5 ms, and is in first."""
    path = str(tmp_path / "q.db")
    first = Client(f"sqlite:///{path}").create_queue("q")
    second = Client(f"sqlite:///{path}").queue("q")
    second.stats()  # its connection open: a store object of its own, its own turnstile
    watcher = Turnstile(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the write lock, held by another connection
    errors: list[BaseException] = []

    def send(q: Queue, body: str) -> None:
        try:
            q.send(body)
        except BaseException as exc:
            errors.append(exc)

    waited = threading.Thread(target=send, args=(first, "waited"))
    came = threading.Thread(target=send, args=(second, "came"))
    try:
        waited.start()
        waiting.until(lambda: watcher.flag[0] != 0 or bool(errors), 10)  # it took the turn
        came.start()
        time.sleep(0.005)  # the second is giving way, or about to ask for the lock
    finally:
        holder.execute("COMMIT")
        holder.close()
    waited.join(30)
    came.join(30)
    assert not errors
    assert watcher.flag[0] == 0, "the flag is lowered once the writer has the lock"
    assert [m.body for m in first.peek(10)] == [b"waited", b"came"]
    watcher.close()


def test_a_writer_gives_way_while_another_process_has_the_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For `HOLD_BACK` at most, then it asks for the lock all the same: a process stopped
    with the turn (SIGSTOP) does not stop the others."""
    monkeypatch.setattr(sqlite_turnstile, "HOLD_BACK", 0.3)
    q = Client(f"sqlite:///{tmp_path}/q.db").create_queue("q")
    other = Turnstile(str(tmp_path / "q.db"))  # its own flock, as another process's
    try:
        assert other.take(time.monotonic() + 5)
        started = time.monotonic()
        q.send("held back")
        assert time.monotonic() - started >= 0.3
        assert other.flag[0] == 1
        other.leave()
        started = time.monotonic()
        q.send("let in")
        assert time.monotonic() - started < 0.3
        assert [m.body for m in q.peek(10)] == [b"held back", b"let in"]
    finally:
        other.close()


def test_a_writer_gives_way_for_its_busy_timeout_at_most(tmp_path: Path) -> None:
    q = Client(f"sqlite:///{tmp_path}/q.db?busy_timeout=0.2").create_queue("q")
    other = Turnstile(str(tmp_path / "q.db"))
    holder = sqlite3.connect(str(tmp_path / "q.db"), isolation_level=None)
    try:
        assert other.take(time.monotonic() + 5)
        holder.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="busy_timeout"):
            q.send("held back")
        assert 0.2 <= time.monotonic() - started < 5
        holder.execute("ROLLBACK")
        assert q.stats().total == 0, "nothing is written by a send that failed"
    finally:
        holder.close()
        other.leave()
        other.close()


def test_a_turn_left_by_a_process_that_died_is_lowered(tmp_path: Path) -> None:
    path = str(tmp_path / "q.db")
    q = Client(f"sqlite:///{path}?busy_timeout=30").create_queue("q")
    q.send("before")
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys, time\n"
            "from conveyor.backends.sql.sqlite_turnstile import Turnstile\n"
            "t = Turnstile(sys.argv[1])\n"
            "assert t.take(time.monotonic() + 5)\n"
            "os._exit(0)  # dies holding the turn: its flock goes, the flag stays\n",
            path,
        ],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    assert killed.returncode == 0, killed.stderr.decode()
    watcher = Turnstile(path)
    assert watcher.flag[0] == 1
    started = time.monotonic()
    q.send("after")
    assert time.monotonic() - started < 10, "the flag of a dead process held the send back"
    assert watcher.flag[0] == 0
    assert [m.body for m in q.peek(10)] == [b"before", b"after"]
    watcher.close()


def test_without_a_turn_file_writes_wait_in_sqlites_busy_handler_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_turnstile, "SIZE", 0)  # mmap of 0 bytes fails: no turnstile
    assert Turnstile.open(str(tmp_path / "x.db")) is None
    q = Client(f"sqlite:///{tmp_path}/q.db").create_queue("q")
    q.send("a")
    assert [m.body for m in q.peek(10)] == [b"a"]


def test_a_read_that_meets_the_lock_waits_the_whole_busy_timeout(tmp_path: Path) -> None:
    """A write's first tries wait 5 ms in SQLite's busy handler (`FINE_AFTER`); a read that
    meets a lock (in WAL, another connection's recovery) is made again with the store's
    whole busy timeout, as reads waited before."""
    client = Client(f"sqlite:///{tmp_path}/q.db?busy_timeout=7")
    backend = client.backend
    assert isinstance(backend, SQLStore)
    db = backend.db
    assert isinstance(db, SQLiteConnections)
    timeouts: list[int] = []

    def read(ex: SQLiteExec) -> str:
        (ms,) = ex.conn.execute("PRAGMA busy_timeout").fetchone()
        timeouts.append(ms)
        if len(timeouts) == 1:
            raise sqlite3.OperationalError("database is locked")
        return "read"

    assert db.read(read) == "read"
    assert timeouts == [5, 7000]
    (ms,) = db.exec().conn.execute("PRAGMA busy_timeout").fetchone()
    assert ms == 5, "the write's first tries wait 5 ms again"


def test_a_process_stopped_with_the_turn_holds_the_others_back_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process stopped (SIGSTOP) while it has the turn: the first write gives way for
    `HOLD_BACK`, the later ones do not wait for that turn again; once it goes on and gives
    the turn back, turns are waited for again."""
    monkeypatch.setattr(sqlite_turnstile, "HOLD_BACK", 0.3)
    path = str(tmp_path / "q.db")
    q = Client(f"sqlite:///{path}").create_queue("q")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, signal, sys, time\n"
            "from conveyor.backends.sql.sqlite_turnstile import Turnstile\n"
            "t = Turnstile(sys.argv[1])\n"
            "assert t.take(time.monotonic() + 5)\n"
            "os.kill(os.getpid(), signal.SIGSTOP)  # stopped with the turn\n"
            "t.leave()\n",
            path,
        ],
        cwd=ROOT,
    )
    watcher = Turnstile(path)
    try:
        waiting.until(lambda: watcher.flag[0] != 0 and holder.poll() is None, 30)
        started = time.monotonic()
        q.send("first")
        assert time.monotonic() - started >= 0.3, "the first write gives way"
        started = time.monotonic()
        for i in range(5):
            q.send(f"later {i}")
        assert time.monotonic() - started < 0.3 * 5, "later writes waited for it again"
        assert watcher.flag[0] != 0, "the stopped process still has the turn"
        holder.send_signal(signal.SIGCONT)
        assert holder.wait(30) == 0
        assert watcher.flag[0] == 0
        assert q.stats().total == 6
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        watcher.close()
