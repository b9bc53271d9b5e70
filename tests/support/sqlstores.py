"""Stores on this machine's servers for tests (see scripts/services): PostgreSQL and MariaDB
with one table prefix per test in the `test` database, Redis with one key prefix per test;
each dropped afterwards."""

from __future__ import annotations

import os
import secrets
from contextlib import suppress
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from conveyor.backends.sql.store import SQLStore

PG_URL = os.environ.get("CONVEYOR_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
MYSQL_URL = os.environ.get("CONVEYOR_TEST_MYSQL", "mysql://root@127.0.0.1:3306/test")
REDIS_URL = os.environ.get("CONVEYOR_TEST_REDIS", "redis://127.0.0.1:6379/0")
BASES = {"postgres": PG_URL, "mysql": MYSQL_URL, "redis": REDIS_URL}


def reachable(kind: str) -> str | None:
    """None if the server answers, else why not."""
    try:
        if kind == "postgres":
            import psycopg

            psycopg.connect(PG_URL, connect_timeout=3).close()
        elif kind == "redis":
            import redis

            redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
        else:
            _mysql_conn().close()
    except Exception as exc:  # the reason goes into the skip or failure message
        return f"{kind} at {BASES[kind]} ({str(exc).strip().splitlines()[0]})"
    return None


def fresh_url(kind: str, **options: str) -> str:
    prefix = f"t{secrets.token_hex(4)}" + ("" if kind == "redis" else "_")
    query = "&".join(f"{k}={v}" for k, v in {"prefix": prefix, **options}.items())
    return f"{BASES[kind]}?{query}"


def prefix_of(url: str) -> str:
    """The table (or key) prefix a store's URL names."""
    return url.split("prefix=", 1)[1].split("&", 1)[0]


def statements_of(url: str) -> str:
    """A LIKE pattern for the text of the statements a store of `url` runs (each names its
    tables, which carry the prefix): to watch that store's sessions alone on a server other
    tests use at the same time."""
    return f"%{prefix_of(url)}%"


def fresh(kind: str, urls: list[str], **options: str) -> str:
    """A new store of `kind` (a prefix of its own), added to a test's `urls` (dropped
    after it: the `urls` fixture)."""
    url = fresh_url(kind, **options)
    urls.append(url)
    return url


def sql_backend(url: str) -> SQLStore[Any]:
    from conveyor.backends.sql.store import SQLStore
    from conveyor.urls import open_backend

    backend = open_backend(url)
    assert isinstance(backend, SQLStore)
    return backend


def run_cursor(backend: SQLStore[Any], fn: Any) -> Any:
    """Run `fn` on a cursor of the store's database, in a transaction (schema untouched)."""
    return backend.db.write(lambda ex: fn(ex.cur))


def mysql_connect(url: str, **options: Any) -> Any:
    """A PyMySQL connection (autocommit) to the server and database a mysql:// URL names."""
    from urllib.parse import urlsplit

    import pymysql

    parts = urlsplit(url)
    return pymysql.connect(
        host=parts.hostname,
        port=parts.port or 3306,
        user=parts.username or "root",
        password=parts.password or "",
        database=parts.path.lstrip("/"),
        autocommit=True,
        **options,
    )


def _mysql_conn() -> Any:
    return mysql_connect(MYSQL_URL, connect_timeout=3)


def drop(url: str) -> None:
    """Drop the tables a test's store made (its URL's prefix, or its DynamoDB table)."""
    if url.startswith("dynamodb://"):
        from . import dynamoservers

        dynamoservers.drop(url)
        return
    if "prefix=" not in url:
        return
    prefix = prefix_of(url)
    if url.startswith("redis"):
        drop_redis(url.split("?", 1)[0], prefix)
        return
    with suppress(Exception):
        if url.startswith("postgresql"):
            import psycopg

            with psycopg.connect(PG_URL, autocommit=True) as conn:
                names = [
                    r[0]
                    for r in conn.execute("SELECT tablename FROM pg_tables").fetchall()
                    if r[0].startswith(prefix)
                ]
                if names:
                    conn.execute(f"DROP TABLE {', '.join(names)} CASCADE")
        elif url.startswith("mysql"):
            conn = _mysql_conn()
            try:
                with conn.cursor() as cur:
                    cur.execute(
                        "SELECT table_name FROM information_schema.tables"
                        " WHERE table_schema = database()"
                    )
                    names = [r[0] for r in cur.fetchall() if r[0].startswith(prefix)]
                    if names:
                        cur.execute(f"DROP TABLE {', '.join(names)}")
            finally:
                conn.close()


def mysql_version_4_order(prefix: str) -> str:
    """The statement that puts a MySQL messages table back to schema versions 1-4: their
    order index (a secondary index, seq the primary key), and without the held_at column and
    index of version 7; for tests that downgrade."""
    p = prefix
    return (
        f"ALTER TABLE {p}messages DROP INDEX {p}messages_held, DROP COLUMN held_at,"
        " DROP PRIMARY KEY, ADD PRIMARY KEY (seq),"
        f" DROP INDEX {p}messages_seq, ADD INDEX {p}messages_order (queue_id, nprio, seq)"
    )


def postgres_every_id_indexed(prefix: str) -> list[str]:
    """The statements that put a PostgreSQL messages table back to the schema versions
    before ids the store makes carried their row's key: every id in the index of ids, no
    `indexed` column; for tests that downgrade."""
    p = prefix
    return [
        f"CREATE UNIQUE INDEX {p}messages_by_id ON {p}messages (id, queue_id)",
        f"DROP INDEX {p}messages_by_chosen_id",
        f"ALTER TABLE {p}messages DROP COLUMN indexed",
    ]


def drop_redis(url: str, prefix: str) -> None:
    """Delete every key of a Redis store's prefix (its queues' and its registry's)."""
    import redis

    with suppress(Exception):
        client: Any = redis.Redis.from_url(url)
        if client.info("cluster").get("cluster_enabled") == 1:
            client.close()
            client = redis.RedisCluster.from_url(url)
        for pattern in (f"{prefix}:*", f"{{{prefix}}}:*"):
            for key in list(client.scan_iter(match=pattern, count=1000)):
                client.delete(key)
        client.close()


def redis_libraries() -> set[str]:
    """The function libraries the shared Redis holds (Redis 7 and later; none before)."""
    import redis

    with suppress(Exception):
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
        try:
            # each library: [b"library_name", name, b"engine", ...]
            return {
                dict(zip(e[::2], e[1::2], strict=True))[b"library_name"].decode()
                for e in client.function_list()
            }
        finally:
            client.close()
    return set()


def drop_redis_libraries(before: set[str]) -> None:
    """Delete the Conveyor libraries loaded into the shared Redis since `before`."""
    import redis

    with suppress(Exception):
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
        for name in redis_libraries() - before:
            if name.startswith("conveyor_"):
                client.function_delete(name)
        client.close()
