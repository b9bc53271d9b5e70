"""The DynamoDB store against DynamoMQ's algorithm: ``python -m bench.dynamodb [--quick]``.

Both run on one moto server in the same run (``--endpoint`` names another DynamoDB endpoint;
by default the bench starts moto itself, requests applied one at a time as DynamoDB applies
the writes to one item). The baseline is hand-written boto3 following DynamoMQ: a send is a
consistent GetItem on the id then a PutItem; a receive queries DynamoMQ's index
(queue_type, sent_at) in pages of 250 and claims the first ready item with a conditional
update on its version; a delete is a DeleteItem. Conveyor runs its store through `Client`.

With 0, 100 and 1,000 messages already in flight, each side sends `--messages` messages,
then receives and deletes them one at a time. Printed per side: receive+delete msgs/s with
p50/p99 latency, DynamoDB requests per received message (receive and delete), items the
receives read per message, and the capacity units DynamoDB reported (ReturnConsumedCapacity)
per message. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import platform
import secrets
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3

from conveyor import Client
from conveyor.backends.dynamodb import DynamoStore

from .runs import pct

INDEX = "dynamo-mq-index-queue_type-sent_at"


def go_time(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".") + "Z"


class Counted:
    """A boto3 DynamoDB client that counts requests, items read and capacity units."""

    def __init__(self, endpoint: str) -> None:
        self.client: Any = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")
        self.requests = 0
        self.items = 0
        self.capacity = 0.0

    def __call__(self, operation: str, **kwargs: Any) -> Any:
        self.requests += 1
        kwargs.setdefault("ReturnConsumedCapacity", "TOTAL")
        out = getattr(self.client, operation)(**kwargs)
        self.items += int(out.get("ScannedCount", 0))
        consumed = out.get("ConsumedCapacity")
        if consumed:
            self.capacity += float(consumed.get("CapacityUnits", 0.0))
        return out


class DynamoMQ:
    """DynamoMQ's algorithm on its own table."""

    def __init__(self, endpoint: str) -> None:
        self.db = Counted(endpoint)
        self.table = f"bench-dynamomq-{secrets.token_hex(4)}"
        self.db.client.create_table(
            TableName=self.table,
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[
                {"AttributeName": n, "AttributeType": "S"} for n in ("id", "queue_type", "sent_at")
            ],
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": INDEX,
                    "KeySchema": [
                        {"AttributeName": "queue_type", "KeyType": "HASH"},
                        {"AttributeName": "sent_at", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
        )

    def _item(self, mid: str, body: str, *, in_flight: bool) -> dict[str, Any]:
        now = datetime.now(UTC)
        until = go_time(now + timedelta(minutes=10)) if in_flight else ""
        return {
            "id": {"S": mid},
            "data": {"S": body},
            "receive_count": {"N": "1" if in_flight else "0"},
            "queue_type": {"S": "STANDARD"},
            "version": {"N": "2" if in_flight else "1"},
            "created_at": {"S": go_time(now)},
            "updated_at": {"S": go_time(now)},
            "sent_at": {"S": go_time(now)},
            "received_at": {"S": go_time(now) if in_flight else ""},
            "invisible_until_at": {"S": until},
        }

    def hold(self, count: int) -> None:
        """`count` messages in flight, as DynamoMQ's claim leaves them."""
        for i in range(count):
            self.db.client.put_item(
                TableName=self.table, Item=self._item(f"held-{i}", "x", in_flight=True)
            )

    def send(self, mid: str, body: str) -> None:
        got = self.db("get_item", TableName=self.table, Key={"id": {"S": mid}}, ConsistentRead=True)
        if "Item" in got:
            raise RuntimeError(f"Provided ID was duplicated: {mid}")
        self.db("put_item", TableName=self.table, Item=self._item(mid, body, in_flight=False))

    def receive(self) -> str | None:
        start: dict[str, Any] | None = None
        now = datetime.now(UTC)
        while True:
            page: dict[str, Any] = {"ExclusiveStartKey": start} if start else {}
            out = self.db(
                "query",
                TableName=self.table,
                IndexName=INDEX,
                KeyConditionExpression="queue_type = :q",
                ExpressionAttributeValues={":q": {"S": "STANDARD"}},
                Limit=250,
                **page,
            )
            for item in out["Items"]:
                until = item["invisible_until_at"]["S"]
                if until and datetime.fromisoformat(until.replace("Z", "+00:00")) > now:
                    continue  # PROCESSING
                try:
                    self.db(
                        "update_item",
                        TableName=self.table,
                        Key={"id": item["id"]},
                        UpdateExpression="ADD version :one, receive_count :one SET"
                        " updated_at = :t, received_at = :t, invisible_until_at = :u",
                        ConditionExpression="version = :v",
                        ExpressionAttributeValues={
                            ":one": {"N": "1"},
                            ":v": item["version"],
                            ":t": {"S": go_time(now)},
                            ":u": {"S": go_time(now + timedelta(seconds=30))},
                        },
                        ReturnValues="ALL_NEW",
                    )
                except self.db.client.exceptions.ConditionalCheckFailedException:
                    continue
                mid: str = item["id"]["S"]
                return mid
            start = out.get("LastEvaluatedKey")
            if not start:
                return None

    def delete(self, mid: str) -> None:
        self.db("delete_item", TableName=self.table, Key={"id": {"S": mid}})

    def drop(self) -> None:
        self.db.client.delete_table(TableName=self.table)


def run_dynamomq(endpoint: str, in_flight: int, count: int) -> dict[str, float]:
    b = DynamoMQ(endpoint)
    try:
        b.hold(in_flight)
        for i in range(count):
            b.send(f"m-{i}", "x" * 100)
        return measure(b.db, lambda: b.receive(), b.delete, count)
    finally:
        b.drop()


def run_conveyor(endpoint: str, in_flight: int, count: int) -> dict[str, float]:
    url = f"dynamodb://bench-conveyor-{secrets.token_hex(4)}?endpoint_url={endpoint}"
    client = Client(url)
    store = client.backend
    assert isinstance(store, DynamoStore)
    q = client.create_queue("bench", visibility_timeout=600)
    try:
        for start in range(0, in_flight, 10):
            q.send_batch(["x"] * min(10, in_flight - start))
        held = 0
        while held < in_flight:
            held += len(q.receive(10))
        for _ in range(count):
            q.send("x" * 100)
        table = store.table

        class Probe:
            @property
            def requests(self) -> int:
                return table.requests

            @property
            def capacity(self) -> float:
                return table.capacity

            @property
            def items(self) -> int:
                return table.items

        def receive() -> str | None:
            got = q.receive(1)
            return got[0].receipt if got else None

        return measure(Probe(), receive, q.delete, count)
    finally:
        store.table.client.delete_table(TableName=store.table.name)
        client.close()


def measure(counter: Any, receive: Any, delete: Any, count: int) -> dict[str, float]:
    requests, capacity, items = counter.requests, counter.capacity, counter.items
    latencies: list[float] = []
    started = time.perf_counter()
    done = 0
    while done < count:
        t = time.perf_counter()
        handle = receive()
        if handle is None:
            break
        delete(handle)
        latencies.append(time.perf_counter() - t)
        done += 1
    elapsed = time.perf_counter() - started
    return {
        "msgs": done / elapsed if elapsed else 0.0,
        "p50": pct(latencies, 50),
        "p99": pct(latencies, 99),
        "requests": (counter.requests - requests) / max(done, 1),
        "items": (counter.items - items) / max(done, 1),
        "capacity": (counter.capacity - capacity) / max(done, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer messages (a smoke run)")
    ap.add_argument("--endpoint", help="a DynamoDB endpoint (default: start moto)")
    ap.add_argument("--messages", type=int, default=200, help="messages received per row")
    ap.add_argument("--in-flight", default="0,100,1000", help="comma-separated in-flight counts")
    args = ap.parse_args()
    endpoint = args.endpoint
    if endpoint is None:
        from tests.support import dynamoservers

        endpoint = dynamoservers.endpoint()
        if endpoint is None:
            raise SystemExit(f"cannot start {dynamoservers.unavailable_reason()}")
    count = 40 if args.quick else args.messages
    print(
        f"# DynamoDB store vs DynamoMQ's algorithm — {platform.platform()}, endpoint {endpoint}"
        f" ({'moto, requests serialized' if args.endpoint is None else 'given'});"
        f" {count} messages received and deleted one at a time per row, 100-byte bodies"
    )
    header = (
        f"{'driver':<10} {'in flight':>9} | {'msgs/s':>7} {'p50 ms':>7} {'p99 ms':>7} |"
        f" {'requests/msg':>12} {'items read/msg':>14} {'capacity/msg':>12}"
    )
    print(header)
    print("-" * len(header))
    try:
        for held in (int(x) for x in args.in_flight.split(",")):
            for name, run in (("conveyor", run_conveyor), ("dynamomq", run_dynamomq)):
                r = run(endpoint, held, count)
                items = f"{r['items']:.1f}"
                print(
                    f"{name:<10} {held:>9} | {r['msgs']:>7.1f} {r['p50']:>7.1f} {r['p99']:>7.1f}"
                    f" | {r['requests']:>12.2f} {items:>14} {r['capacity']:>12.2f}",
                    flush=True,
                )
    finally:
        if args.endpoint is None:
            from tests.support import dynamoservers

            dynamoservers.stop()


if __name__ == "__main__":
    main()
