"""Failover: the store's primary dies mid-run and a replica takes over; the servers follow
without a restart, and the history checker (tests/support/history.py) says what was lost.

PostgreSQL: a primary and a streaming replica (throwaway servers of the test's own), the
servers given both addresses with `target_session_attrs=read-write`. Mid-run the primary is
killed and the replica promoted. With synchronous replication (`synchronous_standby_names`)
a commit is acknowledged once the replica has it: nothing acknowledged is lost, nothing
deleted comes back. With asynchronous replication the last commits before the crash may be
lost, and deletes undone: the test reports them, and docs/stores.md gives measured figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from .conftest import unavailable
from .support import mariadbserver, pgserver, redisservers
from .support.faultload import run
from .support.mariadbserver import ThrowawayMariaDB
from .support.pgserver import ThrowawayPostgres

pytestmark = pytest.mark.slow


ASYNCHRONOUS = ("lost", "after_delete", "concurrent")
"""What a failover to a replica that lacked the primary's last commits may show."""


def run_failover(
    name: str, url: str, tmp_path: Path, fail: Callable[[], None], allowed: Sequence[str] = ()
) -> None:
    """Three servers and their clients on `url`; after 3 s `fail()` kills the primary and
    returns once a replica has taken over; 4 s later the queues are drained and the history
    checked: the servers followed, and nothing but the `allowed` problems is found."""
    moments: list[float] = []

    def faults() -> None:
        time.sleep(3)
        moments.append(time.monotonic())
        fail()
        moments.append(time.monotonic())
        time.sleep(4)

    result = run(url, tmp_path, faults)
    failed_at, promoted = moments
    history, report = result.history, result.report
    logs, remaining = result.logs, result.remaining
    after = [o for o in history.ops if o.kind == "send" and o.start > promoted]
    print(f"\nfailover ({name}): promoted in {promoted - failed_at:.2f} s;")
    print(f"ops {history.counts()}; {report.row()}")
    assert report.sent_ok > 50, (history.counts(), logs)
    assert any(o.outcome == "ok" for o in after), f"the servers never followed:\n{logs}"
    problems = {k: v for k, v in report.problems().items() if k not in allowed}
    assert problems == {}, (report.row(), problems)
    assert remaining == [], "the consumers did not drain the queues"


@pytest.fixture
def replicated(request: pytest.FixtureRequest) -> Iterator[tuple[ThrowawayPostgres, ...]]:
    why = pgserver.unavailable_reason()
    if why is not None:
        unavailable(why)
    if request.param == "asynchronous" and not request.config.getoption("--soak"):
        pytest.skip("asynchronous replication's failover runs with --soak SECONDS")
    settings = "-c synchronous_standby_names=*" if request.param == "synchronous" else ""
    primary = ThrowawayPostgres(settings).start()
    replica = None
    try:
        replica = ThrowawayPostgres.replica_of(primary).start()
        yield primary, replica
    finally:
        primary.stop()
        if replica is not None:
            replica.stop()


@pytest.mark.parametrize("replicated", ["synchronous", "asynchronous"], indirect=True)
def test_postgres_failover_to_a_promoted_replica_loses_nothing_acknowledged(
    replicated: tuple[ThrowawayPostgres, ThrowawayPostgres],
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    primary, replica = replicated
    url = (
        f"postgresql://postgres@127.0.0.1:{primary.port},127.0.0.1:{replica.port}/postgres"
        "?target_session_attrs=read-write&reconnect_timeout=60"
    )

    def fail() -> None:
        primary.kill()
        replica.promote()

    mode = request.node.callspec.id
    run_failover(mode, url, tmp_path, fail, ASYNCHRONOUS[:2] if mode == "asynchronous" else ())


@pytest.fixture
def sentinels() -> Iterator[redisservers.Sentinels]:
    why = redisservers.available()
    if why is not None:
        unavailable(why)
    made = redisservers.Sentinels()
    try:
        made.start()
        yield made
    finally:
        made.stop()


def test_redis_failover_by_sentinel_is_followed_without_a_restart(
    sentinels: redisservers.Sentinels, tmp_path: Path
) -> None:
    """Redis replicates asynchronously: writes acknowledged by the master but not yet on the
    replica are lost with it (sends, deletes, claims), as Redis documents; the test says how
    many, and asserts the rest (the servers follow, nothing duplicated or out of order)."""
    url = sentinels.url("reconnect_timeout=60")
    old = sentinels.master_port()

    def fail() -> None:
        sentinels.master.kill()
        deadline = time.monotonic() + 60
        while sentinels.master_port() == old:  # the Sentinels agree the master is down
            assert time.monotonic() < deadline, f"no failover in 60 s:\n{sentinels.logs()}"
            time.sleep(0.1)

    run_failover("sentinel", url, tmp_path, fail, ASYNCHRONOUS)


@pytest.fixture
def mariadb_pair() -> Iterator[tuple[ThrowawayMariaDB, ThrowawayMariaDB]]:
    why = mariadbserver.unavailable_reason()
    if why is not None:
        unavailable(why)
    primary = ThrowawayMariaDB()
    replica = ThrowawayMariaDB()
    try:
        for server in (primary, replica):
            server.start().allow_tcp_root()
        replica.follow(primary)
        yield primary, replica
    finally:
        primary.stop()
        replica.stop()


def test_mariadb_failover_to_a_promoted_replica_is_followed_without_a_restart(
    mariadb_pair: tuple[ThrowawayMariaDB, ThrowawayMariaDB], tmp_path: Path
) -> None:
    """MariaDB's replication is asynchronous: the primary's last commits may not have reached
    the replica when it dies. The servers, given both hosts, follow the promotion; the
    checker counts what the replica lacked, and the rest must hold."""
    primary, replica = mariadb_pair
    url = f"mysql://root@127.0.0.1:{primary.port},127.0.0.1:{replica.port}/test"

    def fail() -> None:
        primary.kill()
        replica.promote()

    run_failover("mariadb", url, tmp_path, fail, ASYNCHRONOUS)
