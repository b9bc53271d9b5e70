"""PostgreSQL's connections: threads share at most `pool_size` of them, a connection closed
while idle is replaced, those a burst opened go back to the pool, and an operation that
finds every one busy says what to change."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from conveyor import Client, StoreUnavailable
from conveyor.backends.sql.postgres import PostgresConnections
from conveyor.backends.sql.store import SQLStore

from .conftest import unavailable
from .support import sqlstores


def test_threads_share_at_most_pool_size_connections(caplog: pytest.LogCaptureFixture) -> None:
    why = sqlstores.reachable("postgres")
    if why is not None:
        unavailable(why)
    name = f"conveyor-test-{secrets.token_hex(4)}"
    url = sqlstores.fresh_url("postgres", pool_size="3", application_name=name)
    try:
        _share_connections(url, name)
    finally:
        sqlstores.drop(url)
    # threads waited for a free connection; none timed out and "reconnected"
    assert "reconnecting" not in caplog.text


def _share_connections(url: str, name: str) -> None:

    with Client(url) as client:
        q = client.create_queue("threads")
        errors: list[BaseException] = []

        def work(k: int) -> None:
            try:
                for i in range(40):
                    q.send(f"{k}-{i}")
                    for m in q.receive(2, wait=0):
                        q.delete(m.receipt or "")
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(12)]
        for t in threads:
            t.start()
        with psycopg.connect(sqlstores.BASES["postgres"], autocommit=True) as watch:
            peak = 0
            while any(t.is_alive() for t in threads):
                row = watch.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
                ).fetchone()
                peak = max(peak, int(row[0]) if row else 0)
                time.sleep(0.005)
        for t in threads:
            t.join()
        assert errors == []
        assert 1 <= peak <= 3
        assert q.stats().total + q.stats().deleted == 480


def test_a_connection_closed_while_idle_is_replaced() -> None:
    """A held connection that was closed between operations goes back to the pool, which
    replaces it; the store does not lose count of its connections (with pool_size=1, one
    lost would leave nothing to borrow)."""
    with postgres_client(pool_size="1", reconnect_timeout="3") as (client, backend):
        q = client.create_queue("closed")
        for i in range(3):
            [(conn, _)] = backend._held._idle
            conn.close()
            q.send(f"m{i}")
        assert sorted(m.text for m in q.receive(10, wait=0)) == ["m0", "m1", "m2"]


def test_connections_a_burst_opened_go_back_to_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """Idle connections the store holds go back to the pool once older than a minute (the
    pool then closes those that stay idle), one per operation, the least used first."""
    import conveyor.backends.sql.pg_held as pg_held

    now = [1000.0]
    monkeypatch.setattr(pg_held, "monotonic", lambda: now[0])
    with postgres_client(pool_size="3") as (client, backend):
        q = client.create_queue("burst")
        held = backend._held
        burst = [held.borrow() for _ in range(3)]  # three at once, as threads would
        for conn, since in burst:
            held.give_back(conn, since)
        assert len(held._idle) == 3 and held._taken == 3
        q.send("within the minute")
        assert len(held._idle) == 3
        now[0] += 61
        q.send("a minute later")  # each operation hands back the one it used, if old,
        q.send("and again")  # and the oldest idle one
        assert all(now[0] - since < 60 for _, since in held._idle)
        assert held._taken == len(held._idle) <= 1
        q.send("once more")  # on a connection taken afresh from the pool
        assert [now[0] - since < 60 for _, since in held._idle] == [True]
        assert held._taken == 1
        assert sorted(m.text for m in q.receive(10, wait=0)) == [
            "a minute later",
            "and again",
            "once more",
            "within the minute",
        ]


def test_all_connections_busy_says_so(caplog: pytest.LogCaptureFixture) -> None:
    """An operation that finds every connection in use waits, says why, and in the end
    fails with what to change; it is not reported as a lost database."""
    with postgres_client(pool_size="1", reconnect_timeout="0.3") as (client, backend):
        q = client.create_queue("busy")
        held = backend._held
        held._timeout = 0.05
        conn, since = held.borrow()  # the only connection, kept busy
        try:
            with pytest.raises(StoreUnavailable, match="raise pool_size"):
                q.send("waits")
        finally:
            held.give_back(conn, since)
        q.send("goes")
        assert [m.text for m in q.receive(10, wait=0)] == ["goes"]
    assert "all 1 connections of this process stayed busy; waiting" in caplog.text
    assert "lost the connection" not in caplog.text


@contextmanager
def postgres_client(**options: str) -> Iterator[tuple[Client, PostgresConnections]]:
    """A client on a fresh PostgreSQL table prefix (dropped afterwards), and its store's
    connections."""
    why = sqlstores.reachable("postgres")
    if why is not None:
        unavailable(why)
    url = sqlstores.fresh_url("postgres", **options)
    try:
        with Client(url) as client:
            backend = client.backend
            assert isinstance(backend, SQLStore) and isinstance(backend.db, PostgresConnections)
            yield client, backend.db
    finally:
        sqlstores.drop(url)
