"""Shared fixtures: a fresh store per test, for every store the contract runs on.

A store whose service is missing skips locally and fails in CI (CI=true).
"""

from __future__ import annotations

import glob
import os
import secrets
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from conveyor import Client, ManualClock
from conveyor.backends.sql.wakes import sweep

from .support import dynamoservers, redisservers, sqlstores

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(what: str) -> NoReturn:
    """Skip locally, fail in CI: a missing service must not pass silently there."""
    if IN_CI:
        pytest.fail(f"{what} is not available in CI")
    pytest.skip(f"{what} is not available")


StoreFactory = Callable[[Path], str]


@pytest.fixture(params=["postgres", "mysql"])
def kind(request: pytest.FixtureRequest) -> str:
    """A server SQL store reachable here: each kind (a test that parametrizes `kind`
    itself, directly or with `indirect=True`, picks its own)."""
    why = sqlstores.reachable(request.param)
    if why is not None:
        unavailable(why)
    return str(request.param)


@pytest.fixture
def urls(kind: str) -> Iterator[list[str]]:
    """The stores a test made of its kind (`sqlstores.fresh`), dropped after it."""
    made: list[str] = []
    yield made
    for url in made:
        sqlstores.drop(url)


def sql_store(kind: str) -> StoreFactory:
    """A fresh table (or key) prefix on the local server; unavailable() if it does not
    answer."""

    def make(tmp: Path) -> str:
        why = sqlstores.reachable(kind)
        if why is not None:
            unavailable(why)
        return sqlstores.fresh_url(kind)

    return make


def redis_cluster(tmp: Path) -> str:
    """A fresh key prefix on the test session's own 3-master Redis Cluster."""
    why = redisservers.available()
    if why is not None:
        unavailable(why)
    return f"{redisservers.cluster_url()}?prefix=t{secrets.token_hex(4)}"


def dynamodb(tmp: Path) -> str:
    """A fresh table on the test session's moto server."""
    url = dynamoservers.fresh_url()
    if url is None:
        unavailable(dynamoservers.unavailable_reason())
        raise AssertionError  # unreachable: unavailable() skips or fails
    return url


STORES: dict[str, StoreFactory] = {
    "memory": lambda tmp: "memory://",
    "sqlite": lambda tmp: f"sqlite:///{tmp}/conveyor.db?durability=normal",
    "postgres": sql_store("postgres"),
    "mysql": sql_store("mysql"),
    "redis": sql_store("redis"),
    "redis-cluster": redis_cluster,
    "dynamodb": dynamodb,
}


WAKE_DIRECTORIES = os.path.join(tempfile.gettempdir(), "conveyor-wake-*")
_wake_directories_before: set[str] = set()
_redis_libraries_before: set[str] = set()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="run the network fault tests' cycle of faults for this long per store",
    )


def _whole_run(config: pytest.Config) -> bool:
    """Whether this process sees the whole run: pytest alone, or the controller of
    pytest-xdist's workers (it starts before them and finishes after the last), not a
    worker, which runs a share of the tests while the others still run theirs."""
    return not hasattr(config, "workerinput")


def pytest_sessionstart(session: pytest.Session) -> None:
    if _whole_run(session.config):
        _wake_directories_before.update(glob.glob(WAKE_DIRECTORIES))
        _redis_libraries_before.update(sqlstores.redis_libraries())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # the servers this process started for its tests (each worker has its own)
    redisservers.stop_cluster()
    dynamoservers.stop()
    if not _whole_run(session.config):
        return  # what the run made in the shared services, others may still be using
    sqlstores.drop_redis_libraries(_redis_libraries_before)  # the stores' Lua functions
    # processes the tests killed leave their wake sockets behind: remove what this session made
    for directory in set(glob.glob(WAKE_DIRECTORIES)) - _wake_directories_before:
        sweep(directory)


SPARK = Path(__file__).parent / "spark"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`--dist loadgroup`), the Spark tests run on one worker, which
    starts the one Spark session they share; the others go to whichever worker is free."""
    for item in items:
        if SPARK in item.path.parents:
            item.add_marker(pytest.mark.xdist_group("spark"))


@pytest.fixture(params=sorted(STORES))
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    url = STORES[request.param](tmp_path)
    yield url
    sqlstores.drop(url)


@pytest.fixture(params=["sqlite", "postgres", "mysql", "redis", "dynamodb"])
def work_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store of each kind several processes share, with a queue "work"."""
    made = STORES[request.param](tmp_path)
    with Client(made) as client:
        client.create_queue("work")
    yield made
    sqlstores.drop(made)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def client(store_url: str, clock: ManualClock) -> Iterator[Client]:
    c = Client(store_url, clock=clock)
    yield c
    c.close()
