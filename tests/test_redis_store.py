"""What the Redis store does beyond the contract: a server restarted with an append-only file
loses no acknowledged send, options are checked, keys stay under the store's prefix, and
moves between queues in different slots of a cluster lose nothing."""

from __future__ import annotations

import contextlib
import functools
import logging
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from conveyor import Client, DeadLetterPolicy, InvalidInput, OutcomeUnknown, StoreUnavailable
from conveyor.backends.redis import RedisStore
from conveyor.backends.redis.connection import InDoubt
from conveyor.receipts import make_receipt

from .conftest import unavailable
from .support import faultproxy, redisservers, sqlstores, waiting
from .support.waiting import free_port

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
        raw.function_flush()  # and of functions
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


@pytest.mark.parametrize("taken", [False, True], ids=["still-there", "received-and-deleted"])
def test_a_publish_whose_answer_was_lost_settles_by_what_the_queues_hold(
    url: str, monkeypatch: pytest.MonkeyPatch, taken: bool
) -> None:
    """The publish script runs, and its answer is lost: the store looks for the copy. Still
    there: the publish is answered as done (stored once). Received and deleted meanwhile: it
    cannot know whether it published, says so, and stores nothing again."""
    with Client(url) as client:
        q = client.create_queue("copies")
        client.create_topic("news")
        client.subscribe("news", "copies")
        store = client.backend
        assert isinstance(store, RedisStore)
        real = store.redis._evalsha
        lost: list[int] = []

        def run_then_lose_the_answer(script: Any, keys: Any, args: Any) -> Any:
            reply = real(script, keys, args)
            if script is store.redis._loaded().by_name["publish"] and not lost:
                lost.append(1)
                if taken:
                    [m] = q.receive(wait=0)
                    q.delete(m.receipt or "")
                raise InDoubt("Connection closed by server. (the request was written)")
            return reply

        monkeypatch.setattr(store.redis, "_evalsha", run_then_lose_the_answer)
        if taken:
            with pytest.raises(OutcomeUnknown, match="may have been stored"):
                client.publish("news", "hello")
            assert q.stats().total == 0
        else:
            sent = client.publish("news", "hello")
            assert not sent["copies"].duplicate
            assert [m.text for m in q.receive(10, wait=0)] == ["hello"]
        assert lost == [1]


def test_the_store_outlives_any_number_of_lost_connections(url: str) -> None:
    """The server closes the store's connections again and again (restarts, its idle
    `timeout`): each is replaced, and replaced ones are not counted against redis-py's pool
    limit (100), which wedged the store for good with "Too many connections"."""
    raw = redis.Redis.from_url(url.split("?", 1)[0])
    with Client(url) as client:
        q = client.create_queue("jobs")
        store = client.backend
        assert isinstance(store, RedisStore)
        for i in range(150):
            q.send(f"m{i}")
            for conn in list(store.redis._idle):
                host, port = conn._sock.getsockname()[:2]
                raw.client_kill(f"{host}:{port}")
        assert q.stats().ready == 150
        assert len(store.redis._idle) == 1
    raw.close()


def test_scripts_run_by_sha_where_the_server_has_no_functions(url: str) -> None:
    """On Redis 6, or where an ACL withholds FUNCTION, every operation runs as a script."""
    with Client(url) as client:
        store = client.backend
        assert isinstance(store, RedisStore)
        store.redis.client()
        scripts = store.redis._scripts
        assert scripts is not None and scripts.functions  # Redis 7 on this machine
        scripts.functions = {}
        q = client.create_queue("jobs", visibility_timeout=30)
        q.send_batch(["a", "b"])
        got = q.receive(10)
        assert sorted(m.text for m in got) == ["a", "b"] and got[0].receive_count == 1
        q.change_visibility(got[0].receipt or "", 0)
        [again] = q.receive(10)
        assert again.id == got[0].id and again.receive_count == 2
        assert all(r.ok for r in q.delete_batch([again.receipt or "", got[1].receipt or ""]))
        assert q.stats().total == 0 and scripts.functions == {}


def test_a_store_written_in_the_first_layout_is_upgraded_in_place(url: str) -> None:
    """Messages kept as one hash each, with their receipt state among the fields (the first
    layout), are rewritten when a process of this version first connects: bodies,
    attributes, states, receipts of messages in flight and dead letters all carry over."""
    prefix = url.split("prefix=", 1)[1]
    raw = redis.Redis.from_url(url.split("?", 1)[0])
    with Client(url) as client:
        q = client.create_queue("jobs")
        store = client.backend
        assert isinstance(store, RedisStore)
        p = store.queue_entry("jobs").prefix
    band = 32767 * (1 << 37)
    now = time.time()
    raw.delete(f"{{{prefix}}}:layout")  # a store of the earlier version: no layout key
    raw.hset(f"{p}m:plain", mapping={"b": b"first", "p": 0, "s": repr(now), "v": repr(now), "q": 1})
    raw.hset(
        f"{p}m:held",
        mapping={"b": b"second", "a": '{"k":"v"}', "p": 0, "s": repr(now), "v": repr(now + 300),
                 "q": 2, "n": 1, "r": 2, "f": repr(now), "t": "0123456789abcdef"},
    )  # fmt: skip
    raw.zadd(f"{p}all", {"plain": band + 1, "held": band + 2})
    raw.zadd(f"{p}ready", {"plain": band + 1})
    raw.zadd(f"{p}inflight", {"held": now + 300})
    raw.zadd(f"{p}sent", {"plain": now, "held": now})
    raw.hset(f"{p}meta", mapping={"seq": 2, "sent": 2})
    with Client(url) as client:
        q = client.queue("jobs")
        held = q.get("held")
        assert raw.get(f"{{{prefix}}}:layout") == b"2"
        assert raw.exists(f"{p}m:plain", f"{p}m:held") == 0
        assert held.body == b"second" and held.attributes == {"k": "v"}
        assert held.receive_count == 1 and held.version == 2 and held.visible_at > now
        [plain] = q.receive(10)
        assert plain.id == "plain" and plain.body == b"first" and plain.receive_count == 1
        # the receipt of the earlier version's receive still holds
        q.delete(make_receipt("jobs", 2, "held", "0123456789abcdef"))
        q.delete(plain.receipt or "")
        assert q.stats().total == 0
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


def test_a_password_changed_under_a_running_store_is_said_at_once(tmp_path: Path) -> None:
    """The server's password is changed (rotated) while a store runs, and its connections
    end: the next call fails at once saying the server refused the credentials and what to
    give, instead of waiting `reconnect_timeout` as for a server that went away and then
    calling it unreachable."""
    with own_server(tmp_path, "--requirepass", "old") as server:
        url = f"redis://:old@127.0.0.1:{server.port}/0?prefix=auth&reconnect_timeout=30"
        with Client(url) as client:
            q = client.create_queue("jobs")
            q.send("before")
            with redis.Redis(port=server.port, password="old") as admin:
                admin.config_set("requirepass", "new")
                admin.client_kill_filter(_type="normal", skipme=True)
            started = time.monotonic()
            with pytest.raises(StoreUnavailable, match="refused the store's credentials"):
                q.send("after")
            assert time.monotonic() - started < 5
        with (
            Client(url) as client,
            pytest.raises(StoreUnavailable, match="check the URL: give the URL the server's"),
        ):
            client.list_queues()


def test_rediss_speaks_tls_and_checks_the_servers_certificate(tmp_path: Path) -> None:
    """`rediss://` against a server taking TLS alone: the store works with a CA that signed
    the server's certificate (libpq-style `ssl_ca_certs`), and refuses a server it cannot
    verify, saying what to check."""
    why = redisservers.available() or (None if shutil.which("openssl") else "openssl")
    if why is not None:
        unavailable(why)
    certs = tmp_path / "certs"
    certs.mkdir()
    ca, key, crt = certs / "ca.crt", certs / "server.key", certs / "server.crt"
    run = functools.partial(subprocess.run, check=True, capture_output=True, cwd=certs)
    run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=conveyor test CA", "-keyout", "ca.key", "-out", str(ca)])  # fmt: skip
    run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
         "-keyout", str(key), "-out", "server.csr"])  # fmt: skip
    (certs / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    run(["openssl", "x509", "-req", "-in", "server.csr", "-CA", str(ca), "-CAkey", "ca.key",
         "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", str(crt)])  # fmt: skip
    port = free_port()
    server = redisservers.RedisServer(
        tmp_path / "redis", port, "--tls-cert-file", str(crt), "--tls-key-file", str(key),
        "--tls-ca-cert-file", str(ca), "--tls-auth-clients", "no", tls=True,
    )  # fmt: skip
    server.start()
    try:
        with Client(f"rediss://127.0.0.1:{port}/0?prefix=tls&ssl_ca_certs={ca}") as client:
            q = client.create_queue("jobs")
            q.send_batch(["a", "b"])
            got = q.receive(10, wait=1)
            assert sorted(m.text for m in got) == ["a", "b"]
            assert all(r.ok for r in q.delete_batch([m.receipt or "" for m in got]))
        with (
            Client(f"rediss://127.0.0.1:{port}/0?prefix=tls&reconnect_timeout=0") as client,
            pytest.raises(StoreUnavailable, match="check"),
        ):
            client.list_queues()  # the system's CAs did not sign this server's certificate
        with (
            Client(f"redis://127.0.0.1:{port}/0?prefix=tls&reconnect_timeout=0") as client,
            pytest.raises(StoreUnavailable),
        ):
            client.list_queues()  # plain text to a TLS port
    finally:
        server.kill()


@contextlib.contextmanager
def own_server(tmp_path: Path, *options: str) -> Iterator[Any]:
    """A Redis of the test's own with these settings (no append-only file), killed after."""
    why = redisservers.available()
    if why is not None:
        unavailable(why)
    server = redisservers.RedisServer(
        tmp_path / "redis", free_port(), *options, "--appendonly", "no"
    )
    server.start()
    try:
        yield server
    finally:
        server.kill()


def memory_capped(tmp_path: Path, maxmemory: str, policy: str) -> Any:
    """A Redis of its own with `maxmemory` and `maxmemory-policy` set."""
    return own_server(tmp_path, "--maxmemory", maxmemory, "--maxmemory-policy", policy)


@pytest.mark.parametrize("calls", ["functions", "scripts"])
def test_a_full_server_refuses_sends_and_goes_on_serving_consumers(
    tmp_path: Path, calls: str
) -> None:
    """A Redis at its `maxmemory` (policy noeviction) refuses the batch that would grow it,
    whole, with an error saying so and what to do; receives, visibility changes, deletes,
    stats, edits and purges go on, so consumers can empty it; once there is room, sends
    succeed again. The same where the scripts run by SHA rather than as functions."""
    with (
        memory_capped(tmp_path, "3mb", "noeviction") as server,
        Client(f"{server.url}?prefix=full&reconnect_timeout=0") as client,
    ):
        store = client.backend
        assert isinstance(store, RedisStore)
        store.redis.client()
        scripts = store.redis._scripts
        assert scripts is not None and scripts.functions  # Redis 7 on this machine
        if calls == "scripts":
            scripts.functions = {}
        dead = client.create_queue("jobs-dlq")
        q = client.create_queue(
            "jobs", visibility_timeout=30,
            dead_letter=DeadLetterPolicy(queue="jobs-dlq", max_receive_count=5),
        )  # fmt: skip
        sent = 0
        with pytest.raises(StoreUnavailable, match=r"is full .*raise the server's maxmemory"):
            for _ in range(10_000):
                assert all(r.ok for r in q.send_batch([b"x" * 1000] * 10))
                sent += 10
        assert sent > 0 and q.stats().ready == sent  # nothing of the refused batch
        with pytest.raises(StoreUnavailable, match="is full"):
            q.send("one more")
        got = q.receive(10)
        assert len(got) == 10
        q.change_visibility(got[0].receipt or "", 60)
        assert all(r.ok for r in q.delete_batch([m.receipt or "" for m in got[1:]]))
        q.move_to_dlq(got[0].id, "given up")  # an operator's `invalid`
        assert dead.stats().ready == 1
        stats = q.stats()
        assert (stats.ready, stats.in_flight, stats.deleted) == (sent - 10, 0, 9)
        q.purge()
        assert q.stats().total == 0
        q.send("room again")
        [m] = q.receive(1)
        assert m.text == "room again"
        assert bool(scripts.functions) == (calls == "functions")


def test_a_server_that_may_evict_keys_is_named_in_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Under an eviction policy other than noeviction a full Redis deletes keys, and queues
    with them: the store says so when it connects, and is silent under noeviction."""
    with (
        memory_capped(tmp_path, "64mb", "allkeys-lru") as server,
        caplog.at_level(logging.WARNING, logger="conveyor.store"),
    ):
        with Client(f"{server.url}?prefix=evict") as client:
            client.create_queue("jobs")
        [warning] = [r.getMessage() for r in caplog.records if "maxmemory" in r.getMessage()]
        assert "allkeys-lru" in warning and "noeviction" in warning
        caplog.clear()
        with redis.Redis(port=server.port) as raw:
            raw.config_set("maxmemory-policy", "noeviction")
        with Client(f"{server.url}?prefix=evict") as client:
            client.create_queue("jobs")
        assert not [r for r in caplog.records if "maxmemory" in r.getMessage()]


def test_a_failover_behind_one_address_is_followed(tmp_path: Path) -> None:
    """A managed Redis's failover behind one address (a DNS name, a proxy): the master the
    store's connections lead to becomes a replica, and the address leads to the promoted
    one. The store's next calls meet READONLY; it drops those connections, connects again,
    and carries on with nothing lost. A URL that leads to a replica alone fails within
    `reconnect_timeout`, saying to give the master's address."""
    why = redisservers.available()
    if why is not None:
        unavailable(why)
    first = redisservers.RedisServer(tmp_path / "a", free_port(), "--appendonly", "no")
    second = redisservers.RedisServer(tmp_path / "b", free_port(), "--appendonly", "no")
    first.start()
    second.start()
    proxy = faultproxy.FaultProxy("127.0.0.1", first.port)
    try:
        with (
            redis.Redis(port=first.port) as old,
            redis.Redis(port=second.port) as new,
            Client(proxy.url(first.url) + "?prefix=failover&reconnect_timeout=10") as client,
        ):
            new.replicaof("127.0.0.1", first.port)
            q = client.create_queue("jobs")
            q.send_batch(["a", "b"])
            [held] = q.receive(1, visibility_timeout=60)
            waiting.until(lambda: old.wait(1, 100) == 1, timeout=20, what="the replica in sync")
            new.replicaof("NO", "ONE")
            old.replicaof("127.0.0.1", second.port)
            proxy.target = ("127.0.0.1", second.port)
            q.send("c")
            q.delete(held.receipt or "")
            got = q.receive(10)
            assert sorted(m.text for m in got) == ["b", "c"] and held.text == "a"
            assert all(r.ok for r in q.delete_batch([m.receipt or "" for m in got]))
            client.create_queue("more")
            assert client.list_queues() == ["jobs", "more"]
            stats = q.stats()
            assert (stats.total, stats.sent, stats.deleted) == (0, 3, 3)
        proxy.target = ("127.0.0.1", first.port)  # a replica, and nothing else
        with (
            Client(proxy.url(first.url) + "?prefix=failover&reconnect_timeout=0.5") as client,
            pytest.raises(StoreUnavailable, match=r"read-only replica .*master's address"),
        ):
            client.queue("jobs").send("d")
    finally:
        proxy.close()
        first.kill()
        second.kill()


def test_a_server_out_of_connections_is_named_as_such(tmp_path: Path) -> None:
    """A Redis whose `maxclients` are all taken by other programs: the store's first use
    fails saying so and what to raise, not to check the URL; a running store that needs a
    new connection waits `reconnect_timeout` for room, then says the same."""
    hogs: list[Any] = []

    def crowd() -> None:
        while True:
            hog = redis.Redis(port=server.port, retry=redisservers.ONCE)
            try:
                hog.ping()
            except redis.exceptions.ConnectionError:
                hog.close()
                return
            hogs.append(hog)

    with own_server(tmp_path, "--maxclients", "6") as server:
        with Client(f"{server.url}?prefix=crowd&reconnect_timeout=0.5") as client:
            q = client.create_queue("jobs")
            q.send("before")
            crowd()
            store = client.backend
            assert isinstance(store, RedisStore)
            for conn in list(store.redis._idle):  # its connections end: it needs new ones
                host, port = conn._sock.getsockname()[:2]
                hogs[0].client_kill(f"{host}:{port}")
            crowd()
            with pytest.raises(StoreUnavailable, match="raise its maxclients"):
                q.send("after")
        crowd()  # the room the first store left
        with (
            Client(f"{server.url}?prefix=crowd") as client,
            pytest.raises(StoreUnavailable, match="no connections to spare: raise its maxclients"),
        ):
            client.list_queues()
        for hog in hogs:
            hog.close()


def test_a_restart_with_appendfsync_always_loses_no_acknowledged_send(tmp_path: Path) -> None:
    """A Redis with `appendonly yes` and `appendfsync always` is killed (SIGKILL) and started
    again mid-run: every send the store acknowledged is there after the restart, and the
    store reconnects by itself. A send in flight as the server died cannot know whether it
    was stored: it says so (OutcomeUnknown), and the sender goes on."""
    why = redisservers.available()
    if why is not None:
        unavailable(why)
    server = redisservers.RedisServer(
        tmp_path / "redis", free_port(), "--appendonly", "yes", "--appendfsync", "always"
    )
    server.start()
    acked: list[str] = []
    errors: list[BaseException] = []
    unknown: list[OutcomeUnknown] = []
    stop = threading.Event()
    try:
        with Client(f"{server.url}?prefix=restart&reconnect_timeout=30") as client:
            q = client.create_queue("jobs")

            def send() -> None:
                n = 0
                try:
                    while not stop.is_set():
                        bodies = [f"m{n + j}" for j in range(10)]
                        n += 10
                        try:
                            results = q.send_batch(bodies)
                        except OutcomeUnknown as exc:
                            unknown.append(exc)
                            continue
                        assert all(r.ok for r in results)
                        acked.extend(bodies)
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
            assert len(unknown) <= 1, unknown  # the one send in flight at the kill, at most
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
