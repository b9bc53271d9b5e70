"""The PostgreSQL store behind PgBouncer, the connection pooler PostgreSQL users put in
front of their databases: in session mode it works as on the database itself (its session
settings are made after connecting, which PgBouncer allows, not as startup options, which
it refuses); in transaction mode, which shares a session among clients transaction by
transaction, its calls fail saying so and what to do, rather than with the driver's words."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor import Client, StoreUnavailable
from conveyor.notify import HUB

from .conftest import unavailable
from .support import pgbouncer, sqlstores
from .support.pgbouncer import PgBouncer
from .support.waiting import until

pytestmark = pytest.mark.slow


def bouncer(mode: str, pool_size: int = 20) -> Iterator[PgBouncer]:
    why = sqlstores.reachable("postgres") or pgbouncer.unavailable_reason()
    if why is not None:
        unavailable(why)
    running = PgBouncer(sqlstores.PG_URL, mode=mode, pool_size=pool_size).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def session_pool() -> Iterator[PgBouncer]:
    yield from bouncer("session")


@pytest.fixture
def transaction_pool() -> Iterator[PgBouncer]:
    yield from bouncer("transaction", pool_size=1)


@pytest.fixture
def direct() -> Iterator[str]:
    """A store of its own on the machine's PostgreSQL (dropped after)."""
    url = sqlstores.fresh_url("postgres", lock_timeout="7", poll_interval="30")
    yield url
    sqlstores.drop(url)


def test_the_store_works_through_pgbouncer_in_session_mode(
    session_pool: PgBouncer, direct: str
) -> None:
    """Sends, receives, deletes and a long poll woken by another process's send (LISTEN, on
    a session of its own), through PgBouncer; the store's settings hold on its sessions."""
    url = direct.replace(sqlstores.PG_URL, session_pool.url, 1)
    with Client(url) as client:
        q = client.create_queue("jobs", visibility_timeout=30)
        q.send_batch([f"m{i}" for i in range(20)])
        for _ in range(2):
            got = q.receive(10, wait=0)
            assert all(r.ok for r in q.delete_batch([m.receipt or "" for m in got]))
        assert q.stats().total == 0
        woken: list[Any] = []
        waiter = threading.Thread(target=lambda: woken.extend(q.receive(1, wait=20)))
        waiter.start()
        key = (client.backend.key, "jobs")
        until(lambda: key in HUB._conditions, 10, "the receive waiting")
        started = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "conveyor", "--store", url, "-q", "jobs", "send", "wake"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        waiter.join(20)
        assert [m.text for m in woken] == ["wake"]
        assert time.monotonic() - started < 10  # a wake-up, not the 30 s poll
        backend = sqlstores.sql_backend(url)
        try:
            settings = sqlstores.run_cursor(
                backend,
                lambda cur: cur.execute(
                    "SELECT current_setting('lock_timeout'), current_setting('plan_cache_mode'),"
                    " current_setting('enable_bitmapscan')"
                ).fetchone(),
            )
        finally:
            backend.close()
        assert tuple(settings) == ("7s", "force_generic_plan", "off")


def test_pgbouncer_in_transaction_mode_is_refused_saying_what_to_do(
    transaction_pool: PgBouncer, direct: str
) -> None:
    """Two clients share PgBouncer's one server connection transaction by transaction: the
    statements the driver prepares on what it takes for its own session meet each other's.
    The call that meets one fails with StoreUnavailable naming the pool mode and what to
    use instead, and nothing of it is written."""
    url = direct.replace(sqlstores.PG_URL, transaction_pool.url, 1)
    with Client(direct) as setup:
        setup.create_queue("jobs")
    sent = 0
    with (
        Client(url) as first,
        Client(url) as second,
        pytest.raises(StoreUnavailable, match=r"transaction mode .*session mode"),
    ):
        for i in range(20):
            for client in (first, second):
                client.queue("jobs").send(f"m{i}")
                sent += 1
    with Client(direct) as check:
        assert check.queue("jobs").stats().ready == sent
