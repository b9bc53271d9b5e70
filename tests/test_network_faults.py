"""Network faults between servers and their store, proved by a history checker.

Three `conveyor serve` processes reach PostgreSQL, MariaDB or Redis through a fault proxy
(tests/support/faultproxy.py) while producers send through each server (to a standard queue and, in
order, to three groups of a FIFO queue) and consumers receive and delete through the others,
each operation recorded with its invocation and outcome (tests/support/history.py). The faults, in
turn: a partition that heals, a reset of every connection (mid-transaction where one runs),
and latency. After the last fault heals, the consumers drain the queues and the checker
reads the history: no acknowledged send is lost, nothing is delivered after an acknowledged
delete or twice within a visibility timeout, no body gets two message ids, and each FIFO
group is delivered in send order.

`pytest tests/test_network_faults.py --soak 600` repeats the faults for ten minutes per store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from conveyor import Client, Message, OutcomeUnknown, StoreUnavailable

from .conftest import unavailable
from .support import mariadbserver, netns, pgserver, sqlstores
from .support.faultload import run
from .support.faultproxy import FaultProxy
from .support.mariadbserver import ThrowawayMariaDB
from .support.pgserver import ThrowawayPostgres
from .support.waiting import until

pytestmark = pytest.mark.slow


@pytest.fixture
def faulty_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    kind = request.param
    why = sqlstores.reachable(kind)
    if why is not None:
        unavailable(why)
    url = sqlstores.fresh_url(kind)
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    proxy = FaultProxy(parts.hostname, parts.port)
    request.node.proxy = proxy
    try:
        yield url, proxy.url(url)
    finally:
        proxy.close()
        sqlstores.drop(url)


@pytest.mark.parametrize("faulty_store", ["postgres", "mysql", "redis"], indirect=True)
def test_network_faults_lose_nothing_and_deliver_once(
    faulty_store: tuple[str, str],
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    direct, through = faulty_store
    proxy: FaultProxy = request.node.proxy
    soak = float(request.config.getoption("--soak"))
    done = {"partition": 0, "reset": 0, "latency": 0}

    def faults() -> None:
        ends = time.monotonic() + soak
        while True:
            time.sleep(1)
            proxy.partition()  # a partition that heals
            done["partition"] += 1
            time.sleep(2)
            proxy.heal()
            time.sleep(1)
            proxy.reset()  # every connection ends, transactions in flight with them
            done["reset"] += 1
            time.sleep(1)
            proxy.latency(0.05)
            done["latency"] += 1
            time.sleep(1)
            proxy.latency(0)
            if time.monotonic() >= ends:
                return

    result = run(direct, tmp_path, faults, through)
    result.show(f"{request.node.callspec.id}, faults {done}")
    assert result.report.sent_ok > 100, (result.history.counts(), result.logs)
    assert proxy.resets > 0 and proxy.connected > 3
    assert result.report.problems() == {}, (result.report.row(), result.report.problems())
    assert result.remaining == [], "the consumers did not drain the queues"


@pytest.mark.parametrize("faulty_store", ["postgres", "mysql", "redis"], indirect=True)
def test_a_send_whose_answer_was_lost_is_not_stored_again(
    faulty_store: tuple[str, str], request: pytest.FixtureRequest
) -> None:
    """The store commits a send but its answer never comes back; a consumer takes the
    message and deletes it; then the connection breaks. The sender cannot know whether its
    send was stored: it must say so, and must not store the message a second time (which
    would deliver it again after its delete). (A publish's copies: tests/test_sql_stores.py
    and tests/test_redis_store.py, where the answer lost is the commit's alone.)"""
    direct, through = faulty_store
    proxy: FaultProxy = request.node.proxy
    with Client(direct) as admin, Client(through) as client:
        admin.create_queue("jobs", visibility_timeout=60)
        consumer, sender = admin.queue("jobs"), client.queue("jobs")
        sender.send("warm-up")  # the sender's connection is open and the queue known to it
        for m in consumer.receive(wait=5):
            assert m.receipt is not None
            consumer.delete(m.receipt)
        outcome: dict[str, Any] = {}

        def send() -> None:
            try:
                outcome["id"] = sender.send("answer lost").id
            except Exception as exc:
                outcome["error"] = exc

        proxy.mute()
        thread = threading.Thread(target=send)
        thread.start()
        got: list[Message] = []

        def arrived() -> bool:
            got.extend(consumer.receive(wait=0.2))
            return bool(got)

        until(arrived, what="the send's message")  # stored: only the answer is held
        assert [m.text for m in got] == ["answer lost"] and got[0].receipt is not None
        consumer.delete(got[0].receipt)
        proxy.reset()
        proxy.unmute()
        thread.join(60)
        assert not thread.is_alive()
        error = outcome.get("error")
        assert isinstance(error, OutcomeUnknown), outcome
        assert "may have been stored" in str(error), error
        assert consumer.receive(wait=1) == [], "the deleted message came back"
        assert consumer.stats().total == 0


def cut_off(client: Client) -> float:
    """Cut the link to the store's host while a send is on its way; how long the send took
    to fail (it must fail: StoreUnavailable, OutcomeUnknown among them)."""
    q = client.queue("far")
    outcome: list[BaseException | str] = []

    def send() -> None:
        try:
            q.send("during")
            outcome.append("sent")
        except StoreUnavailable as exc:
            outcome.append(exc)

    sender = threading.Thread(target=send, daemon=True)
    started = time.monotonic()
    sender.start()
    sender.join(150)
    took = time.monotonic() - started
    assert outcome and isinstance(outcome[0], StoreUnavailable), outcome
    return took


def followed_back(client: Client) -> None:
    """Once the link is back, the store serves again with no restart: a send succeeds and
    every message acknowledged before the cut is there."""
    q = client.queue("far")
    until(lambda: bool(_sent(q, "after")), 60, "a send after the link came back")
    bodies = set()
    while batch := q.receive(10, wait=0):
        bodies |= {m.body.decode() for m in batch}
        q.delete_batch([m.receipt for m in batch if m.receipt])
    assert bodies - {"during"} == {"before", "after"}


def _sent(q: Any, body: str) -> bool:
    try:
        q.send(body)
    except StoreUnavailable:
        return False
    return True


@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
def test_a_database_host_that_stops_answering_fails_calls_within_a_minute(kind: str) -> None:
    """The link to the database's host goes dead without a word (no reset, no refusal: a
    host gone, a network partitioned), with a send on its way: the send fails within a
    minute (the store's TCP settings; TCP's own timers would hold it a quarter of an hour
    and more) instead of holding its thread, and once the link is back the store serves
    again."""
    why = netns.unavailable_reason() or (
        pgserver.unavailable_reason() if kind == "postgres" else mariadbserver.unavailable_reason()
    )
    if why is not None:
        unavailable(why)
    with netns.cut_off_link() as link:
        server: ThrowawayPostgres | ThrowawayMariaDB
        if kind == "postgres":
            server = ThrowawayPostgres(link=link)
        else:
            server = ThrowawayMariaDB(binlog=False, link=link)
        try:
            if isinstance(server, ThrowawayMariaDB):
                server.start().allow_tcp_root()
            else:
                server.start()
            with Client(f"{server.url}?reconnect_timeout=5") as client:
                client.create_queue("far").send("before")
                link.cut()
                assert cut_off(client) < 60
                link.mend()
                followed_back(client)
        finally:
            server.stop()
