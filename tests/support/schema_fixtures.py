"""Stores as a released schema left them: the fixtures in tests/fixtures/schema/, how they
are made, and how they are put into a fresh store again (tests/test_upgrades.py).

Each fixture holds the same few queues, messages and a topic, written at a fixed time by
`populate`, as the store's own database keeps them: SQL dumps for SQLite, PostgreSQL and
MariaDB, every key of the prefix for Redis, the table's items for DynamoDB. When a store's
schema changes, run `python -m tests.support.schema_fixtures` (with the services up) to add the new
version's fixture beside the earlier ones, which stay: each is upgraded by the test.
"""

from __future__ import annotations

import base64
import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from conveyor import Capability, Client, DeadLetterPolicy, ManualClock

from . import dynamoservers, sqlstores

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "schema"
WRITTEN_AT = 1_795_000_000.0  # when populate ran, on its clock (2026-11-18)
PREFIX = "fixture"  # the prefix (SQL: "fixture_") a fixture's names carry; a load renames it
KINDS = ("sqlite", "postgres", "mysql", "redis", "dynamodb")
EXTENSIONS = {
    "sqlite": "sql",
    "postgres": "sql",
    "mysql": "sql",
    "redis": "json",
    "dynamodb": "json",
}


def populate(client: Client) -> dict[str, str]:
    """What every fixture holds (`client` on a ManualClock at WRITTEN_AT): a queue with a
    message ready, one in flight, one delayed and one moved to its dead-letter queue; a FIFO
    queue with a message of a group; a topic the queue is subscribed to. The receipt of the
    message in flight comes back, to be used after the upgrade."""
    clock = client.clock
    assert isinstance(clock, ManualClock)
    client.create_queue("orders-dlq")
    orders = client.create_queue(
        "orders",
        visibility_timeout=600,
        dead_letter=DeadLetterPolicy(queue="orders-dlq", max_receive_count=1),
    )
    orders.send("dead")
    [dead] = orders.receive(1, visibility_timeout=1)
    clock.advance(2)
    assert orders.receive(1) == []  # received once already: moved to orders-dlq
    orders.send("held")
    [held] = orders.receive(1)
    orders.send("ready", attributes={"kind": "plain"})
    orders.send("later", delay=900)
    if Capability.FIFO in client.capabilities:
        client.create_queue("jobs.fifo").send("first", group_id="g", dedup_id="d1")
    if Capability.TOPICS in client.capabilities:
        client.create_topic("events")
        client.subscribe("events", "orders")
    assert dead.receipt and held.receipt
    return {"held": held.receipt, "held_id": held.id}


def check(client: Client, receipts: dict[str, str]) -> None:
    """What an upgraded fixture must still hold and do (`client` at WRITTEN_AT + 60)."""
    assert sorted(client.list_queues()) == sorted(
        ["orders", "orders-dlq"] + (["jobs.fifo"] if Capability.FIFO in client.capabilities else [])
    )
    orders = client.queue("orders")
    stats = orders.stats()
    assert (stats.ready, stats.in_flight, stats.delayed) == (1, 1, 1), stats
    assert orders.info.attributes.dead_letter == DeadLetterPolicy(
        queue="orders-dlq", max_receive_count=1
    )
    [dead] = client.queue("orders-dlq").receive(1)
    assert dead.text == "dead"
    [ready] = orders.receive(1)
    assert ready.text == "ready" and ready.attributes == {"kind": "plain"}
    orders.delete(receipts["held"])  # a receipt given before the upgrade still deletes
    assert orders.stats().in_flight == 1  # the one just received
    if Capability.FIFO in client.capabilities:
        jobs = client.queue("jobs.fifo")
        again = jobs.send("first", group_id="g", dedup_id="d1")  # still within 5 minutes
        [first] = jobs.receive(10)
        assert first.text == "first" and first.group_id == "g" and again.id == first.id
    if Capability.TOPICS in client.capabilities:
        client.publish("events", "published after the upgrade")
        texts = [m.text for m in orders.receive(10, visibility_timeout=0)]
        assert "published after the upgrade" in texts, texts


# -- writing fixtures --------------------------------------------------------------------


def fixture_url(kind: str, where: Path) -> str:
    """A store URL of `kind` whose names carry PREFIX, for `populate` to write."""
    if kind == "sqlite":
        return f"sqlite:///{where}/fixture.db"
    if kind == "dynamodb":
        endpoint = dynamoservers.endpoint()
        assert endpoint is not None, dynamoservers.unavailable_reason()
        return f"dynamodb://{PREFIX}?endpoint_url={endpoint}"
    prefix = PREFIX if kind == "redis" else f"{PREFIX}_"
    return f"{sqlstores.BASES[kind]}?prefix={prefix}"


def dump(kind: str, url: str) -> str:
    """The fixture's text: the store's data as its database keeps it."""
    if kind == "sqlite":
        return sqlite_dump(urlsplit(url).path)
    if kind == "postgres":
        out = subprocess.run(
            ["pg_dump", "--no-owner", "--no-privileges", "--inserts", "--table", f"{PREFIX}_*",
             sqlstores.PG_URL],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        return (
            "\n".join(
                line
                for line in out.splitlines()
                if not line.startswith(("--", "\\restrict", "\\unrestrict"))
            )
            + "\n"
        )
    if kind == "mysql":
        parts = urlsplit(sqlstores.MYSQL_URL)
        tables = mysql_tables(f"{PREFIX}_")
        out = subprocess.run(
            ["mysqldump", "-h", parts.hostname or "127.0.0.1", "-P", str(parts.port or 3306),
             "-u", parts.username or "root", "--skip-comments", "--skip-dump-date",
             "--single-transaction", parts.path.lstrip("/"), *tables],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        return out
    if kind == "redis":
        import redis

        raw = redis.Redis.from_url(sqlstores.REDIS_URL)
        keys: dict[str, Any] = {}
        for pattern in (f"{PREFIX}:*", f"{{{PREFIX}}}:*"):
            for key in sorted(raw.scan_iter(match=pattern, count=1000)):
                keys[key.decode()] = redis_value(raw, key)
        raw.close()
        return json.dumps(keys, indent=1, sort_keys=True) + "\n"
    table = url.split("://", 1)[1].split("?", 1)[0]
    dynamo: Any = dynamoservers.client()
    described = dynamo.describe_table(TableName=table)["Table"]
    items: list[Any] = []
    for page in dynamo.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        items += page["Items"]
    schema = {
        "KeySchema": described["KeySchema"],
        "AttributeDefinitions": described["AttributeDefinitions"],
        "GlobalSecondaryIndexes": [
            {k: g[k] for k in ("IndexName", "KeySchema", "Projection")}
            for g in described.get("GlobalSecondaryIndexes", [])
        ],
    }

    def binary(b: bytes) -> dict[str, str]:
        return {"base64": base64.b64encode(b).decode()}

    data = {"table": schema, "items": items}
    return json.dumps(data, indent=1, sort_keys=True, default=binary) + "\n"


def sqlite_dump(path: str) -> str:
    """A SQLite file as SQL, rowids included (a message's rowid is in its receipts, and
    sqlite3's iterdump renumbers them)."""
    conn = sqlite3.connect(path)
    lines = [f"PRAGMA user_version = {conn.execute('PRAGMA user_version').fetchone()[0]};"]
    lines.append("BEGIN;")
    objects = conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL"
        " AND name NOT LIKE 'sqlite_%' ORDER BY type = 'index', name"
    ).fetchall()
    for kind, name, sql in objects:
        lines.append(f"{sql};")
        if kind != "table":
            continue
        columns = [row[1] for row in conn.execute(f'PRAGMA table_info("{name}")')]
        if "WITHOUT ROWID" not in sql.upper():
            columns = ["rowid", *columns]
        names = ", ".join(f'"{c}"' if c != "rowid" else c for c in columns)
        values = " || ',' || ".join(f"quote({c if c == 'rowid' else chr(34) + c + chr(34)})"
                                    for c in columns)  # fmt: skip
        order = "rowid" if columns[0] == "rowid" else "1"
        for (row,) in conn.execute(f'SELECT {values} FROM "{name}" ORDER BY {order}'):
            lines.append(f'INSERT INTO "{name}" ({names}) VALUES ({row});')
    for name, seq in conn.execute("SELECT name, seq FROM sqlite_sequence ORDER BY name"):
        lines.append(f"INSERT INTO sqlite_sequence (name, seq) VALUES ('{name}', {seq});")
    lines.append("COMMIT;")
    conn.close()
    return "\n".join(lines) + "\n"


def redis_value(raw: Any, key: bytes) -> dict[str, Any]:
    def text(b: bytes) -> str:
        return base64.b64encode(b).decode()

    kind = raw.type(key).decode()
    if kind == "string":
        return {"string": text(raw.get(key))}
    if kind == "hash":
        return {"hash": {text(k): text(v) for k, v in sorted(raw.hgetall(key).items())}}
    if kind == "zset":
        return {"zset": [[text(m), s] for m, s in raw.zrange(key, 0, -1, withscores=True)]}
    if kind == "set":
        return {"set": sorted(text(m) for m in raw.smembers(key))}
    if kind == "list":
        return {"list": [text(v) for v in raw.lrange(key, 0, -1)]}
    raise AssertionError(f"{key!r}: a {kind} key, which the fixtures do not keep")


def mysql_tables(prefix: str) -> list[str]:
    conn = sqlstores._mysql_conn()
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = database()"
            )
            return sorted(r[0] for r in cur.fetchall() if r[0].startswith(prefix))
    finally:
        conn.close()


def version_of(kind: str, url: str) -> int:
    with Client(url) as client:
        versions = client.migrate()
    assert versions is not None
    return versions[1]


def write(kind: str, where: Path) -> Path:
    """Write the current schema's fixture of `kind`; its path."""
    url = fixture_url(kind, where)
    sqlstores.drop(url)
    try:
        with Client(url, clock=ManualClock(WRITTEN_AT)) as client:
            receipts = populate(client)
        version = version_of(kind, url)
        path = HERE / f"{kind}-v{version}.{EXTENSIONS[kind]}"
        path.write_text(dump(kind, url))
        (HERE / f"{kind}-v{version}.receipts.json").write_text(
            json.dumps(receipts, indent=1) + "\n"
        )
        return path
    finally:
        sqlstores.drop(url)


# -- loading fixtures --------------------------------------------------------------------


def load(fixture: Path, url: str) -> None:
    """Put `fixture` into the fresh, empty store at `url`, under that URL's names."""
    kind = fixture.name.split("-v", 1)[0]
    text = fixture.read_text()
    if kind == "sqlite":
        conn = sqlite3.connect(urlsplit(url).path, isolation_level=None)
        conn.executescript(text)
        conn.close()
        return
    if kind == "dynamodb":
        table = url.split("://", 1)[1].split("?", 1)[0]
        data = json.loads(
            text, object_hook=lambda o: base64.b64decode(o["base64"]) if set(o) == {"base64"} else o
        )
        dynamo: Any = dynamoservers.client()
        schema = data["table"]
        extra = (
            {"GlobalSecondaryIndexes": schema["GlobalSecondaryIndexes"]}
            if schema["GlobalSecondaryIndexes"]
            else {}
        )
        dynamo.create_table(TableName=table, KeySchema=schema["KeySchema"],
                            AttributeDefinitions=schema["AttributeDefinitions"],
                            BillingMode="PAY_PER_REQUEST", **extra)  # fmt: skip
        for item in data["items"]:
            dynamo.put_item(TableName=table, Item=item)
        return
    prefix = url.split("prefix=", 1)[1].split("&", 1)[0]
    if kind == "redis":
        import redis

        raw = redis.Redis.from_url(url.split("?", 1)[0])
        for key, value in json.loads(text).items():
            name = (
                key.replace(f"{{{PREFIX}}}:", f"{{{prefix}}}:", 1)
                if key.startswith("{")
                else prefix + key[len(PREFIX) :]
            )
            load_redis_key(raw, name, value)
        raw.close()
        return
    renamed = re.sub(rf"\b{PREFIX}_", prefix, text)
    if kind == "postgres":
        subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", sqlstores.PG_URL],
                       input=renamed, check=True, capture_output=True, text=True)  # fmt: skip
    else:
        parts = urlsplit(sqlstores.MYSQL_URL)
        subprocess.run(["mysql", "-h", parts.hostname or "127.0.0.1", "-P", str(parts.port or 3306),
                        "-u", parts.username or "root", parts.path.lstrip("/")],
                       input=renamed, check=True, capture_output=True, text=True)  # fmt: skip


def load_redis_key(raw: Any, key: str, value: dict[str, Any]) -> None:
    def b(text: str) -> bytes:
        return base64.b64decode(text)

    [(kind, data)] = value.items()
    if kind == "string":
        raw.set(key, b(data))
    elif kind == "hash":
        raw.hset(key, mapping={b(k): b(v) for k, v in data.items()})
    elif kind == "zset":
        raw.zadd(key, {b(m): s for m, s in data})
    elif kind == "set":
        raw.sadd(key, *[b(m) for m in data])
    else:
        raw.rpush(key, *[b(v) for v in data])


if __name__ == "__main__":
    import tempfile

    HERE.mkdir(parents=True, exist_ok=True)
    for kind in sys.argv[1:] or KINDS:
        with tempfile.TemporaryDirectory() as where:
            print(write(kind, Path(where)))
    dynamoservers.stop()
