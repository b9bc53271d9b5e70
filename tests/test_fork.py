"""A client made before a `fork` (a pre-forking server, a `multiprocessing` pool, a Celery
prefork worker): the child makes connections of its own, parent and child use the client at
once without crossing each other's, and the child closing it leaves the parent's open."""

from __future__ import annotations

import multiprocessing
import threading

import pytest

from conveyor import Client
from conveyor.backends.sql.connections import ServerConnections
from conveyor.backends.sql.store import SQLStore
from conveyor.notify import HUB

pytestmark = pytest.mark.slow


@pytest.fixture
def url(work_url: str) -> str:
    return work_url


SESSION = {"postgresql": "SELECT pg_backend_pid()", "mysql": "SELECT CONNECTION_ID()"}


def session(client: Client) -> object:
    """The server's id of the session a SQL store's next call runs on (None: another store)."""
    backend = client.backend
    if not isinstance(backend, SQLStore) or not isinstance(backend.db, ServerConnections):
        return None
    sql = SESSION[backend.db.scheme]
    return backend.db.read(lambda ex: ex.one(sql))


def test_parent_and_child_use_a_client_made_before_the_fork_at_once(url: str) -> None:
    n = 30 if url.startswith("dynamodb") else 200  # DynamoDB's emulator: slow requests
    client = Client(url)
    q = client.queue("work")
    q.send("before")  # connections made, and held idle at the fork
    parent_s = session(client)
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()

    def child() -> None:
        mine = session(client)
        assert mine is None or mine != parent_s, "the child took its parent's session"
        go.wait(30)
        for i in range(n):
            q.send(f"c{i}")
        got = q.receive(10)
        q.delete_batch([m.receipt or "" for m in got])
        assert all(m.text.startswith(("c", "p", "b")) for m in got)
        client.close()  # its own connections: the parent's stay open

    proc = ctx.Process(target=child)
    proc.start()
    go.set()
    for i in range(n):
        q.send(f"p{i}")
    proc.join(120)
    assert proc.exitcode == 0
    q.send("after")  # on the connections the parent held before the fork
    client.close()
    with Client(url) as fresh:
        there = fresh.queue("work")
        bodies: list[str] = []
        while got := there.receive(10):
            bodies += [m.text for m in got]
            there.delete_batch([m.receipt or "" for m in got])
    expected = {"before", "after"} | {f"c{i}" for i in range(n)} | {f"p{i}" for i in range(n)}
    assert len(bodies) == len(set(bodies)) == 2 * n + 2 - 10
    assert set(bodies) < expected


def test_a_child_forked_while_a_thread_held_the_wake_hub_wakes_its_own() -> None:
    """A thread of the parent holds the in-process wake hub's lock at the fork (a send
    waking receivers, at that moment): the child's own wake-ups are not stuck behind it."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with HUB._lock:
            held.set()
            release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    assert held.wait(10)
    proc = multiprocessing.get_context("fork").Process(target=HUB.notify, args=("s", "q"))
    proc.start()
    proc.join(10)
    release.set()
    thread.join()
    stuck = proc.exitcode is None
    if stuck:
        proc.kill()
        proc.join()
    assert not stuck and proc.exitcode == 0
