"""The DynamoDB table behind a store: the boto3 client, the table's schema (created on first
use), and the boundary where DynamoDB's errors become Conveyor's.

Throttling and server errors are retried by botocore's standard retry mode (10 attempts, as
DynamoMQ); transaction conflicts are retried here with back-off; a conditional check that
fails is the caller's business (`ConditionFailed`, `Cancelled`); anything else becomes a
`StoreUnavailable` or `InvalidInput` that names the table and says what to check.
"""

from __future__ import annotations

import logging
import random
import re
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from ...exceptions import InvalidInput, StoreUnavailable
from ...forks import renew_after_fork

log = logging.getLogger("conveyor.dynamodb")

Item = dict[str, dict[str, Any]]

DYNAMOMQ_INDEX = "dynamo-mq-index-queue_type-sent_at"  # DynamoMQ's index: every item of a queue
READY_INDEX = "conveyor-ready"  # sparse: messages a receive may claim, in delivery order
WAITING_INDEX = "conveyor-waiting"  # sparse: messages invisible until fk (delayed, in flight)
META_ID = "conveyor#meta"
SCHEMA_VERSION = 1

# what the sparse indexes carry besides their keys: enough to decide a claim without a read
INDEX_ATTRIBUTES = ["mid", "version", "vis", "sat", "dl", "receive_count", "grp", "seq", "pri"]

CONFLICT_ATTEMPTS = 8


_NAME = re.compile(r"#(\w+)")


def expr(**parts: Any) -> dict[str, Any]:
    """Request parameters with every `#name` in the expressions aliased (DynamoDB reserves
    hundreds of words, `data` and `ttl` among them)."""
    names: dict[str, str] = {}
    for key in ("UpdateExpression", "ConditionExpression", "KeyConditionExpression",
                "ProjectionExpression", "FilterExpression"):  # fmt: skip
        if key in parts:
            names.update((f"#{m}", m) for m in _NAME.findall(parts[key]))
    if names:
        parts["ExpressionAttributeNames"] = names
    return parts


class ConditionFailed(Exception):
    """A conditional write whose condition did not hold; `item` is the item as it was."""

    def __init__(self, item: Item | None) -> None:
        super().__init__("condition failed")
        self.item = item


class Cancelled(Exception):
    """A transaction cancelled because conditions failed; `failed` holds the indexes of the
    actions whose condition did not hold."""

    def __init__(self, failed: list[int]) -> None:
        super().__init__(f"transaction cancelled: actions {failed} failed their conditions")
        self.failed = failed


class Table:
    """One DynamoDB table, opened lazily; thread-safe. Counts requests, items read by
    queries and consumed capacity units (`requests`, `items`, `capacity`) for benchmarks."""

    def __init__(
        self,
        name: str,
        *,
        region: str,
        endpoint_url: str | None,
        index: str = DYNAMOMQ_INDEX,
    ) -> None:
        self.name = name
        self.region = region
        self.endpoint_url = endpoint_url
        self.index = index
        self._client: Any = None
        self._lock = threading.Lock()  # the client
        self._schema_lock = threading.Lock()
        renew_after_fork(self)
        self._ready = False
        self.created = False  # this store created the table
        self.requests = 0
        self.items = 0  # items queries read
        self.capacity = 0.0

    def forked(self) -> None:
        """A forked child: a client of its own, not its parent's connections (forks.py)."""
        self._client = None
        self._lock = threading.Lock()
        self._schema_lock = threading.Lock()

    @property
    def where(self) -> str:
        return f"DynamoDB table {self.name!r} at {self.endpoint_url or f'AWS {self.region}'}"

    @property
    def client(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = boto3.client(
                        "dynamodb",
                        region_name=self.region,
                        endpoint_url=self.endpoint_url,
                        config=Config(
                            retries={"mode": "standard", "max_attempts": 10},
                            max_pool_connections=32,
                            connect_timeout=5,
                            read_timeout=30,
                        ),
                    )
        return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    # -- calls ----------------------------------------------------------------------------

    def call(self, operation: str, **kwargs: Any) -> Any:
        """One DynamoDB request on this table (the table is made ready first)."""
        if not self._ready:
            self.ensure()
        return self._call(operation, **kwargs)

    def _call(self, operation: str, **kwargs: Any) -> Any:
        fn = getattr(self.client, operation)
        if operation in _CAPACITY_OPS:
            kwargs.setdefault("ReturnConsumedCapacity", "TOTAL")
        try:
            self.requests += 1
            out = fn(**kwargs)
        except ClientError as exc:
            raise self._translate(operation, exc) from exc
        except BotoCoreError as exc:
            raise StoreUnavailable(
                f"cannot reach {self.where}: {exc}; check endpoint_url, region and credentials"
            ) from exc
        self.items += int(out.get("ScannedCount", 0))
        consumed = out.get("ConsumedCapacity")
        if consumed:
            for c in consumed if isinstance(consumed, list) else [consumed]:
                self.capacity += float(c.get("CapacityUnits", 0.0))
        return out

    def _translate(self, operation: str, exc: ClientError) -> Exception:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        message = str(error.get("Message", ""))
        if code == "ConditionalCheckFailedException":
            return ConditionFailed(exc.response.get("Item"))
        if code == "TransactionCanceledException":
            reasons = exc.response.get("CancellationReasons") or []
            codes = [str(r.get("Code", "None")) for r in reasons]
            if any(c in ("TransactionConflict", "ThrottlingError") for c in codes):
                return _Conflict(message)
            failed = [i for i, c in enumerate(codes) if c == "ConditionalCheckFailed"]
            if failed and all(c in ("None", "ConditionalCheckFailed") for c in codes):
                return Cancelled(failed)
            return StoreUnavailable(f"{self.where}: {operation} cancelled: {message}")
        if code == "ResourceNotFoundException":
            self._ready = False
            return _NotFound(
                f"{self.where} does not exist or is not active ({message}): run `conveyor"
                " migrate` or let the store create it on first use"
            )
        if code in ("ValidationException", "SerializationException"):
            return InvalidInput(f"{self.where} refused {operation}: {message}")
        if code in ("AccessDeniedException", "UnrecognizedClientException"):
            return StoreUnavailable(
                f"{self.where} refused the credentials ({code}: {message}): check"
                " AWS_ACCESS_KEY_ID/AWS_PROFILE and the table's IAM policy"
            )
        return StoreUnavailable(f"{self.where}: {operation} failed: {code}: {message}")

    def transact(self, actions: list[dict[str, Any]]) -> None:
        """TransactWriteItems, retried with back-off while it conflicts with another
        transaction; `Cancelled` when conditions fail. Each attempt carries a client token
        of its own, which the SDK's retries of a request whose answer was lost send again:
        DynamoDB then answers without writing a second time (what the first wrote may have
        been received and deleted since)."""
        delay = 0.02
        for attempt in range(CONFLICT_ATTEMPTS):
            try:
                self.call(
                    "transact_write_items",
                    TransactItems=actions,
                    ClientRequestToken=secrets.token_hex(16),
                )
                return
            except _Conflict:
                if attempt == CONFLICT_ATTEMPTS - 1:
                    raise StoreUnavailable(
                        f"{self.where}: a transaction kept conflicting with others; retry"
                    ) from None
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 1.0)

    def query(self, **kwargs: Any) -> Iterator[Item]:
        """Every item a Query finds, page by page."""
        while True:
            out = self.call("query", TableName=self.name, **kwargs)
            yield from out.get("Items", [])
            last = out.get("LastEvaluatedKey")
            if not last:
                return
            kwargs["ExclusiveStartKey"] = last

    # -- schema ---------------------------------------------------------------------------

    def ensure(self) -> None:
        """Create the table (on-demand capacity) or add Conveyor's indexes to a DynamoMQ
        table; wait until it is active."""
        with self._schema_lock:
            if self._ready:
                return
            try:
                desc = self._call("describe_table", TableName=self.name)["Table"]
            except _NotFound:
                desc = self._create()
            self._add_indexes(desc)
            self._ready = True

    def _create(self) -> dict[str, Any]:
        attributes = [
            ("id", "S"),
            ("queue_type", "S"),
            ("sent_at", "S"),
            ("rq", "S"),
            ("rk", "S"),
            ("fq", "S"),
            ("fk", "N"),
        ]
        try:
            self._call(
                "create_table",
                TableName=self.name,
                BillingMode="PAY_PER_REQUEST",
                AttributeDefinitions=[
                    {"AttributeName": n, "AttributeType": t} for n, t in attributes
                ],
                KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
                GlobalSecondaryIndexes=[
                    _index(self.index, "queue_type", "sent_at", None),
                    _index(READY_INDEX, "rq", "rk", INDEX_ATTRIBUTES),
                    _index(WAITING_INDEX, "fq", "fk", INDEX_ATTRIBUTES),
                ],
            )
            self.created = True
            log.info("created %s", self.where)
        except StoreUnavailable as exc:
            if "ResourceInUse" not in str(exc):  # another process is creating it
                raise
        desc = self._wait_active()
        try:
            self._call(
                "update_time_to_live",
                TableName=self.name,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"},
            )
        except StoreUnavailable as exc:
            log.debug("time to live on %s not enabled now: %s", self.where, exc)
        return desc

    def _wait_active(self) -> dict[str, Any]:
        deadline = time.monotonic() + 300
        while True:
            desc: dict[str, Any] = self._call("describe_table", TableName=self.name)["Table"]
            indexes = desc.get("GlobalSecondaryIndexes", [])
            if desc.get("TableStatus") == "ACTIVE" and all(
                i.get("IndexStatus", "ACTIVE") == "ACTIVE" for i in indexes
            ):
                return desc
            if time.monotonic() > deadline:
                raise StoreUnavailable(f"{self.where} did not become active in 5 minutes")
            time.sleep(1.0)

    def _add_indexes(self, desc: dict[str, Any]) -> None:
        """A DynamoMQ table gets Conveyor's two sparse indexes, one at a time (DynamoDB
        builds one new index per UpdateTable)."""
        have = {i["IndexName"] for i in desc.get("GlobalSecondaryIndexes", [])}
        if self.index not in have:
            raise InvalidInput(
                f"{self.where} has no index {self.index!r}: name DynamoMQ's queueing index"
                f" with ?index=NAME (it has {', '.join(sorted(have)) or 'none'})"
            )
        for name, hash_key, range_key, kind in (
            (READY_INDEX, "rq", "rk", "S"),
            (WAITING_INDEX, "fq", "fk", "N"),
        ):
            if name in have:
                continue
            log.info("adding index %s to %s", name, self.where)
            self._call(
                "update_table",
                TableName=self.name,
                AttributeDefinitions=[
                    {"AttributeName": hash_key, "AttributeType": "S"},
                    {"AttributeName": range_key, "AttributeType": kind},
                ],
                GlobalSecondaryIndexUpdates=[
                    {"Create": _index(name, hash_key, range_key, INDEX_ATTRIBUTES)}
                ],
            )
            self._wait_active()


class _NotFound(StoreUnavailable):
    """The table (or an index) does not exist."""


class _Conflict(Exception):
    """A transaction that conflicted with another one (retried)."""


_CAPACITY_OPS = {
    "get_item",
    "put_item",
    "update_item",
    "delete_item",
    "query",
    "transact_write_items",
    "batch_write_item",
}


def _index(name: str, hash_key: str, range_key: str, include: list[str] | None) -> dict[str, Any]:
    projection: dict[str, Any] = (
        {"ProjectionType": "ALL"}
        if include is None
        else {"ProjectionType": "INCLUDE", "NonKeyAttributes": include}
    )
    return {
        "IndexName": name,
        "KeySchema": [
            {"AttributeName": hash_key, "KeyType": "HASH"},
            {"AttributeName": range_key, "KeyType": "RANGE"},
        ],
        "Projection": projection,
    }
