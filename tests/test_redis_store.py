"""What the Redis store does beyond the contract: a server restarted with an append-only file
loses no acknowledged send, options are checked, keys stay under the store's prefix, and
moves between queues in different slots of a cluster lose nothing."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from conveyor import Client, DeadLetterPolicy, InvalidInput, StoreUnavailable
from conveyor.backends.redis import RedisStore

from . import redisservers, sqlstores
from .conftest import unavailable
from .live import free_port

pytestmark = pytest.mark.slow


@pytest.fixture
def url() -> Iterator[str]:
    why = sqlstores.reachable("redis")
    if why is not None:
        unavailable(why)
    made = sqlstores.fresh_url("redis")
    yield made
    sqlstores.drop(made)


def test_every_key_is_under_the_prefix_and_goes_with_its_queue(url: str) -> None:
    prefix = url.split("prefix=", 1)[1]
    raw = redis.Redis.from_url(url.split("?", 1)[0])
    with Client(url) as client:
        q = client.create_queue("jobs", archive=True)
        q.send_batch(["a", "b", "c"])
        [m] = q.receive()
        q.delete(m.receipt or "")
        client.create_topic("t")
        client.register_consumer("c1", queue="jobs")
        keys = {k.decode() for k in raw.scan_iter(match="*")}
        mine = {k for k in keys if k.startswith((f"{prefix}:", f"{{{prefix}}}:"))}
        assert any(":jobs:" in k for k in mine) and f"{{{prefix}}}:queues" in mine
        client.delete_queue("jobs")
        left = {k.decode() for k in raw.scan_iter(match=f"{prefix}:*")}
        assert left == set()  # messages, indexes, archive entries and meta all went


def test_options_are_checked(url: str) -> None:
    for bad, words in (
        ("redis://127.0.0.1:6379/0?prefix=has%20space", "key prefix"),
        ("redis://127.0.0.1:6379/0?poll_interval=0", "poll_interval"),
        ("redis:///0", "needs a host"),
    ):
        with pytest.raises(InvalidInput, match=words):
            Client(bad)


def test_an_unreachable_server_fails_with_what_to_check() -> None:
    with (
        Client(f"redis://127.0.0.1:{free_port()}/0?reconnect_timeout=0.2") as client,
        pytest.raises(StoreUnavailable, match="check"),
    ):
        client.list_queues()


def test_a_server_that_forgot_the_scripts_or_dropped_the_link_is_carried_on(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    raw = redis.Redis.from_url(url.split("?", 1)[0])
    with Client(url) as client:
        q = client.create_queue("jobs")
        q.send_batch(["a", "b"])
        raw.script_flush()  # as after a restart without persistence of scripts
        q.send("c")
        store = client.backend
        assert isinstance(store, RedisStore)
        for conn in store.redis._idle:  # the server closes the store's own connections
            host, port = conn._sock.getsockname()[:2]
            raw.client_kill(f"{host}:{port}")
        with caplog.at_level(logging.WARNING, logger="conveyor.store"):
            got = q.receive(10)
        assert caplog.records == []  # a connection closed while idle is replaced quietly
        assert sorted(m.text for m in got) == ["a", "b", "c"]
        assert all(r.ok for r in q.delete_batch([m.receipt or "" for m in got]))
        assert q.stats().total == 0
        failing = raw.register_script("return redis.error_reply('refused')")
        with pytest.raises(StoreUnavailable, match="refused"):
            store.redis.run_script(failing, ["k"], [])
        q.send("d")  # an error answer left the connection in step
        assert [m.text for m in q.receive()] == ["d"]
    raw.close()


def test_a_server_with_a_password_is_reached_with_it_and_refused_without(tmp_path: Path) -> None:
    why = redisservers.available()
    if why is not None:
        unavailable(why)
    server = redisservers.RedisServer(tmp_path / "redis", free_port(), "--requirepass", "s3cret")
    server.start()
    try:
        with Client(f"redis://:s3cret@127.0.0.1:{server.port}/0?prefix=auth") as client:
            q = client.create_queue("jobs")
            q.send_batch(["a", "b"])
            got = q.receive(10)
            assert sorted(m.text for m in got) == ["a", "b"]
            assert all(r.ok for r in q.delete_batch([m.receipt or "" for m in got]))
        with (
            Client(f"redis://:wrong@127.0.0.1:{server.port}/0?prefix=auth") as client,
            pytest.raises(StoreUnavailable, match="check"),
        ):
            client.list_queues()
    finally:
        server.kill()


def test_a_restart_with_appendfsync_always_loses_no_acknowledged_send(tmp_path: Path) -> None:
    """A Redis with `appendonly yes` and `appendfsync always` is killed (SIGKILL) and started
    again mid-run: every send the store acknowledged is there after the restart, and the
    store reconnects by itself."""
    why = redisservers.available()
    if why is not None:
        unavailable(why)
    server = redisservers.RedisServer(
        tmp_path / "redis", free_port(), "--appendonly", "yes", "--appendfsync", "always"
    )
    server.start()
    acked: list[str] = []
    errors: list[BaseException] = []
    stop = threading.Event()
    try:
        with Client(f"{server.url}?prefix=restart&reconnect_timeout=30") as client:
            q = client.create_queue("jobs")

            def send() -> None:
                n = 0
                try:
                    while not stop.is_set():
                        bodies = [f"m{n + j}" for j in range(10)]
                        results = q.send_batch(bodies)
                        assert all(r.ok for r in results)
                        acked.extend(bodies)
                        n += 10
                except BaseException as exc:
                    errors.append(exc)

            sender = threading.Thread(target=send)
            sender.start()
            time.sleep(0.5)
            server.kill()
            time.sleep(0.5)
            server.start()
            time.sleep(0.5)
            stop.set()
            sender.join(60)
            assert errors == []
            assert len(acked) > 100
            got: set[str] = set()
            while batch := q.receive(10, visibility_timeout=600):
                got.update(m.text for m in batch)
            assert set(acked) <= got  # every acknowledged send survived
    finally:
        server.kill()


def test_moves_across_cluster_slots_lose_nothing() -> None:
    """On a cluster, a queue whose dead-letter queue was chosen after both were made lives in
    another slot: its dead letters and redrives take two steps, and arrive once."""
    why = redisservers.available()
    if why is not None:
        unavailable(why)
    url = f"{redisservers.cluster_url()}?prefix=slots"
    try:
        with Client(url) as client:
            src = client.create_queue("src", visibility_timeout=0)
            dlq = client.create_queue("dlq")
            other = client.create_queue("other")
            src.set_attributes(dead_letter=DeadLetterPolicy(queue="dlq", max_receive_count=1))
            store = client.backend
            assert isinstance(store, RedisStore) and store.redis.cluster
            src.send_batch([f"m{i}" for i in range(10)])
            src.send_batch([f"m{i}" for i in range(10, 20)])
            assert len(src.receive(10)) == 10 and len(src.receive(10)) == 10
            assert src.receive(10) == []  # every one went to the dead-letter queue
            assert sorted(m.text for m in dlq.peek(50)) == sorted(f"m{i}" for i in range(20))
            assert src.stats().dead == 20
            assert len(dlq.redrive(to="other", limit=50)) == 20
            assert other.stats().ready == 20 and dlq.stats().total == 0
    finally:
        sqlstores.drop(url)
