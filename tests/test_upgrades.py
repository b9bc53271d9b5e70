"""Upgrades (docs/deploy.md): every store left by a released schema (tests/fixtures/schema/)
is brought to this version's by `conveyor migrate` and keeps its queues, messages, receipts,
de-duplication and topics; each store has a fixture of its current schema, so a change to a
schema cannot ship without the migration that upgrades the one before; and a store written by
a later version is refused with what to do."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conveyor import Client, ManualClock
from conveyor.backends.dynamodb.table import META_ID
from conveyor.exceptions import StoreUnavailable

from .conftest import STORES
from .support import dynamoservers, sqlstores
from .support.schema_fixtures import HERE, KINDS, WRITTEN_AT, check, load

pytestmark = pytest.mark.slow

FIXTURES = sorted(
    p for p in HERE.iterdir() if p.suffix in (".sql", ".json") and ".receipts" not in p.name
)


def version(fixture: Path) -> int:
    return int(fixture.name.split("-v", 1)[1].split(".", 1)[0])


def kind_of(fixture: Path) -> str:
    return fixture.name.split("-v", 1)[0]


def fresh(kind: str, tmp_path: Path) -> str:
    """An empty store of `kind`, or skip (fail in CI) when its service is missing."""
    if kind == "sqlite":
        return f"sqlite:///{tmp_path}/upgraded.db"
    return STORES[kind](tmp_path)


def migrate(url: str, code: int = 0) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "conveyor", "--store", url, "migrate"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == code, done.stdout + done.stderr
    return done.stdout + done.stderr


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.stem)
def test_a_released_schema_is_upgraded_keeping_everything(fixture: Path, tmp_path: Path) -> None:
    kind = kind_of(fixture)
    url = fresh(kind, tmp_path)
    try:
        load(fixture, url)
        said = migrate(url)
        with Client(url) as client:
            current = client.migrate()
        assert current is not None and current[0] == current[1]
        if version(fixture) == current[1]:
            assert f"schema is up to date (version {current[1]})" in said
        else:
            assert f"schema upgraded from version {version(fixture)} to {current[1]}" in said
        receipts = json.loads(
            fixture.with_name(f"{kind}-v{version(fixture)}.receipts.json").read_text()
        )
        with Client(url, clock=ManualClock(WRITTEN_AT + 60)) as client:
            check(client, receipts)
    finally:
        sqlstores.drop(url)


@pytest.mark.parametrize("kind", KINDS)
def test_each_store_has_a_fixture_of_its_current_schema(kind: str, tmp_path: Path) -> None:
    url = fresh(kind, tmp_path)
    try:
        with Client(url) as client:
            versions = client.migrate()
        assert versions is not None
        mine = [version(f) for f in FIXTURES if kind_of(f) == kind]
        assert max(mine) == versions[1], (
            f"{kind}'s schema is version {versions[1]}, its newest fixture {max(mine)}: run"
            f" `python -m tests.support.schema_fixtures {kind}` and commit the new fixture"
        )
    finally:
        sqlstores.drop(url)


def test_a_redis_store_of_a_later_layout_is_refused(tmp_path: Path) -> None:
    import redis

    url = fresh("redis", tmp_path)
    prefix = url.split("prefix=", 1)[1]
    try:
        with Client(url) as client:
            client.create_queue("q")
        raw = redis.Redis.from_url(url.split("?", 1)[0])
        [layout] = [k for k in raw.scan_iter(match=f"*{prefix}*layout")]
        raw.set(layout, b"3")
        raw.close()
        said = migrate(url, code=1)
        assert "layout 3, newer than this Conveyor's (2): upgrade Conveyor" in said
        with Client(url) as client, pytest.raises(StoreUnavailable, match="upgrade Conveyor"):
            client.list_queues()  # and nothing was rewritten as if it were layout 1
    finally:
        sqlstores.drop(url)


def test_a_dynamodb_table_of_a_later_schema_is_refused(tmp_path: Path) -> None:
    url = fresh("dynamodb", tmp_path)
    table = url.split("://", 1)[1].split("?", 1)[0]
    try:
        with Client(url) as client:
            client.create_queue("q")
        dynamo = dynamoservers.client()
        dynamo.update_item(  # type: ignore[attr-defined]
            TableName=table,
            Key={"id": {"S": META_ID}},
            UpdateExpression="SET #s = :v",
            ExpressionAttributeNames={"#s": "schema"},
            ExpressionAttributeValues={":v": {"N": "2"}},
        )
        said = migrate(url, code=1)
        assert f"the table {table} has schema version 2, newer than this Conveyor (1)" in said
    finally:
        sqlstores.drop(url)
