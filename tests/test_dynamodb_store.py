"""The DynamoDB store on moto's server: processes claiming at once, the cost of a receive
with messages in flight, DynamoMQ's tables opened as they are, and its errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from conveyor import Client, InvalidInput, ManualClock, StoreUnavailable
from conveyor.backends.dynamodb import DynamoStore
from conveyor.cli import cli
from conveyor.models import NewMessage

from .conftest import unavailable
from .support import dynamoservers

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def url() -> Iterator[str]:
    made = dynamoservers.fresh_url()
    if made is None:
        unavailable(dynamoservers.unavailable_reason())
        raise AssertionError
    yield made
    dynamoservers.drop(made)


def _store(client: Client) -> DynamoStore:
    store = client.backend
    assert isinstance(store, DynamoStore)
    return store


@pytest.mark.slow
def test_four_processes_claim_exactly_once(tmp_path: Path, url: str) -> None:
    client = Client(url)
    client.create_queue("bulk")
    ids = [f"m{i:04d}" for i in range(200)]
    for start in range(0, len(ids), 10):
        client.backend.send(
            "bulk", [NewMessage(id=i, body=b"x" * 100) for i in ids[start : start + 10]]
        )
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.procs",
                "drain",
                url,
                "bulk",
                str(tmp_path / f"out{n}"),
            ],
            cwd=ROOT,
            stderr=subprocess.PIPE,
        )
        for n in range(4)
    ]
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"out{n}.ready").exists() for n in range(4)):
        assert time.monotonic() < deadline, "the drainers did not start"
        time.sleep(0.05)
    for n in range(4):
        (tmp_path / f"out{n}.go").touch()
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err.decode()
    received: list[str] = []
    for n in range(4):
        lines = (tmp_path / f"out{n}").read_text().split()
        assert lines, f"process {n} received nothing"
        received += lines
    assert len(received) == len(ids), "a message was delivered twice or lost"
    assert set(received) == set(ids)
    assert client.queue("bulk").stats().total == 0


def test_receive_cost_does_not_grow_with_messages_in_flight(url: str) -> None:
    clock = ManualClock()
    client = Client(url, clock=clock)
    store = _store(client)
    q = client.create_queue("q", visibility_timeout=600)

    def requests_per_receive() -> int:
        """The fewest requests of five receives: the client looks at its queue once a second,
        and the store writes running totals once a second (real time, whatever the clock),
        each at most one receive in a second; on a slow machine two receives in a row can
        each meet one of them."""
        counts = []
        for _ in range(5):
            before = store.table.requests
            assert len(q.receive(1)) == 1
            counts.append(store.table.requests - before)
        return min(counts)

    q.send_batch([f"a{i}" for i in range(10)])
    q.receive(1)  # the first receive looks for due messages to release
    alone = requests_per_receive()  # 6 in flight, 4 ready
    for start in range(0, 210, 10):
        q.send_batch([f"m{start + i}" for i in range(10)])
    while q.stats().in_flight < 206:
        q.receive(10)
    assert q.stats().in_flight == 206
    assert alone == requests_per_receive() == 2  # one query of the ready index, one claim


def _dynamomq_table(client: Any, name: str) -> None:
    """The table as DynamoMQ's dynamomq-table.json makes it."""
    client.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": "id", "AttributeType": "S"},
            {"AttributeName": "queue_type", "AttributeType": "S"},
            {"AttributeName": "sent_at", "AttributeType": "S"},
        ],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "dynamo-mq-index-queue_type-sent_at",
                "KeySchema": [
                    {"AttributeName": "queue_type", "KeyType": "HASH"},
                    {"AttributeName": "sent_at", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
    )


def _go_time(t: datetime) -> str:
    """RFC3339Nano as Go writes it (trailing zeros dropped)."""
    text = t.strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".")
    return text + "Z"


def _dynamomq_send(client: Any, table: str, message_id: str, data: dict[str, Any],
                   sent: datetime) -> None:  # fmt: skip
    """DynamoMQ's SendMessage: GetItem (consistent) on the id, then an unconditional PutItem."""
    got = client.get_item(TableName=table, Key={"id": {"S": message_id}}, ConsistentRead=True)
    assert "Item" not in got
    now = _go_time(datetime.now(UTC))
    client.put_item(
        TableName=table,
        Item={
            "id": {"S": message_id},
            "data": {"M": {k: {"S": str(v)} for k, v in data.items()}},
            "receive_count": {"N": "0"},
            "queue_type": {"S": "STANDARD"},
            "version": {"N": "1"},
            "created_at": {"S": now},
            "updated_at": {"S": now},
            "sent_at": {"S": _go_time(sent)},
            "received_at": {"S": ""},
            "invisible_until_at": {"S": ""},
        },
    )


def _dynamomq_receive(client: Any, table: str) -> dict[str, Any] | None:
    """DynamoMQ's ReceiveMessage: walk the index in sent_at order, claim the first READY item
    with a conditional update on its version."""
    pages = client.get_paginator("query").paginate(
        TableName=table,
        IndexName="dynamo-mq-index-queue_type-sent_at",
        KeyConditionExpression="queue_type = :q",
        ExpressionAttributeValues={":q": {"S": "STANDARD"}},
        PaginationConfig={"PageSize": 250},
    )
    now = datetime.now(UTC)
    for page in pages:
        for item in page["Items"]:
            until = item.get("invisible_until_at", {}).get("S", "")
            if until and datetime.fromisoformat(until.replace("Z", "+00:00")) >= now:
                continue
            try:
                got = client.update_item(
                    TableName=table,
                    Key={"id": item["id"]},
                    UpdateExpression="ADD version :one, receive_count :one SET updated_at = :t,"
                    " received_at = :t, invisible_until_at = :u",
                    ConditionExpression="version = :v",
                    ExpressionAttributeValues={
                        ":one": {"N": "1"},
                        ":v": item["version"],
                        ":t": {"S": _go_time(now)},
                        ":u": {"S": _go_time(now + timedelta(seconds=30))},
                    },
                    ReturnValues="ALL_NEW",
                )
            except client.exceptions.ConditionalCheckFailedException:
                continue
            attrs: dict[str, Any] = got["Attributes"]
            return attrs
    return None


def test_a_dynamomq_table_opens_as_it_is(url: str) -> None:
    endpoint = dynamoservers.endpoint()
    table = f"dynamomq-{uuid.uuid4().hex[:8]}"
    ddb: Any = dynamoservers.client()
    _dynamomq_table(ddb, table)
    try:
        base = datetime.now(UTC) - timedelta(seconds=60)
        for i, mid in enumerate(["A-101", "A-202", "A-303"]):
            _dynamomq_send(ddb, table, mid, {"id": mid, "n": i}, base + timedelta(seconds=i))
        _dynamomq_send(ddb, table, "A-404", {"id": "A-404"}, base + timedelta(hours=1))  # delayed

        client = Client(f"dynamodb://{table}?endpoint_url={endpoint}")
        assert client.list_queues() == ["DLQ", "STANDARD"]
        # the message DynamoMQ delayed (its sent_at ahead) is delayed, an hour to wait
        url = f"dynamodb://{table}?endpoint_url={endpoint}"
        listed = CliRunner().invoke(cli, ["--store", url, "-q", "STANDARD", "ls"]).output
        [row] = [line for line in listed.splitlines() if "A-404" in line]
        assert re.search(r"delayed .*│ - +│ 59\.\dm", row), listed  # no age: a wait, not -59m
        q = client.queue("STANDARD")
        assert (q.stats().ready, q.stats().delayed) == (3, 1)
        got = q.receive(10)
        assert [m.id for m in got] == ["A-101", "A-202", "A-303"]  # sent_at order; delay kept
        assert json.loads(got[0].body) == {"id": "A-101", "n": "0"}
        q.delete(got[0].receipt or "")
        raw = ddb.get_item(TableName=table, Key={"id": {"S": "A-202"}})["Item"]
        assert raw["version"]["N"] == "2" and raw["receive_count"]["N"] == "1"
        assert raw["invisible_until_at"]["S"] > raw["received_at"]["S"]  # DynamoMQ's PROCESSING
        assert q.give_back([got[2].receipt or ""]) == [None]  # claimed, never handled
        raw = ddb.get_item(TableName=table, Key={"id": {"S": "A-303"}})["Item"]
        assert raw["receive_count"]["N"] == "0" and "received_at" not in raw  # as never received
        [again] = q.receive()
        assert (again.id, again.receive_count) == ("A-303", 1)

        moved = q.move_to_dlq("A-202", error="bad payload")
        assert moved.queue == "DLQ" and moved.source_queue == "STANDARD"
        raw = ddb.get_item(TableName=table, Key={"id": {"S": "A-202"}})["Item"]
        assert raw["queue_type"]["S"] == "DLQ"  # moved in place, as DynamoMQ moves it
        assert client.queue("DLQ").redrive(ids=["A-202"]) == ["A-202"]
        assert client.queue("STANDARD").get("A-202").receive_count == 0

        # Conveyor's sends are read by DynamoMQ's consumer beside it, and the other way
        q.send(json.dumps({"id": "C-1", "kind": "conveyor"}), id="C-1")
        taken = [_dynamomq_receive(ddb, table) for _ in range(2)]
        taken_ids = {t["id"]["S"] for t in taken if t is not None}
        assert taken_ids == {"A-202", "C-1"}
        c1 = next(t for t in taken if t is not None and t["id"]["S"] == "C-1")
        assert c1["data"]["M"]["kind"] == {"S": "conveyor"}  # a map, as DynamoMQ stores data
        assert q.receive(10) == []  # what DynamoMQ's consumer holds is in flight here too
        assert q.stats().in_flight == 3
    finally:
        ddb.delete_table(TableName=table)


def test_bad_urls_say_what_to_fix() -> None:
    with pytest.raises(InvalidInput, match="unknown dynamodb store option"):
        Client("dynamodb://t1?regoin=us-east-1")
    with pytest.raises(InvalidInput, match="table name"):
        Client("dynamodb://a")
    with pytest.raises(InvalidInput, match="endpoint_url"):
        Client("dynamodb://table?endpoint_url=127.0.0.1:8000")


def test_an_unreachable_endpoint_is_a_store_error() -> None:
    client = Client("dynamodb://table?endpoint_url=http://127.0.0.1:9&region=us-east-1")
    with pytest.raises(StoreUnavailable, match="cannot reach DynamoDB table 'table'"):
        client.list_queues()


def test_a_failed_write_of_the_totals_fails_no_send_and_loses_no_count(url: str) -> None:
    """The totals item cannot be updated when a send's counts fall due (the table refused
    it): the send, which is stored, is not said to have failed, and its count is written by
    the next write of the totals."""
    with Client(url) as client:
        store = _store(client)
        q = client.create_queue("jobs")
        call = store.table.call
        refused: list[str] = []

        def refusing(operation: str, **kwargs: Any) -> Any:
            totals = operation == "update_item" and "#totals#" in str(kwargs.get("Key"))
            if totals and not refused:
                refused.append(operation)
                raise StoreUnavailable("the totals item refused (as a throttled table)")
            return call(operation, **kwargs)

        store.table.call = refusing  # type: ignore[method-assign]
        q.send("first")  # its count due at once: the write fails, the send stands
        assert refused == ["update_item"]
        q.send("second")
        store.table.call = call  # type: ignore[method-assign]
        assert (q.stats().sent, q.stats().ready) == (2, 2)
