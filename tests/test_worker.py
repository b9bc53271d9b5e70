"""Worker: concurrency, retries with back-off, dead letters, visibility extension, stop."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from conveyor import Client, DeadLetterPolicy, ManualClock, Message, Worker

from .support import waiting


def test_processes_everything_concurrently(client: Client) -> None:
    q = client.create_queue("jobs")
    for i in range(50):
        q.send(str(i))
    seen: list[int] = []
    lock = threading.Lock()

    def handler(m: Message) -> None:
        with lock:
            seen.append(int(m.text))

    w = Worker(q, handler, concurrency=4, batch_size=5)
    assert w.run(until_empty=True) == 50
    assert sorted(seen) == list(range(50))
    assert q.stats().total == 0 and q.stats().deleted == 50


def test_failures_back_off_then_dead_letter(client: Client, clock: ManualClock) -> None:
    client.create_queue("jobs-dlq")
    q = client.create_queue(
        "jobs", dead_letter=DeadLetterPolicy(queue="jobs-dlq", max_receive_count=3)
    )
    sent = q.send("boom")

    def handler(m: Message) -> None:
        raise ValueError(f"cannot handle {m.text}")

    w = Worker(q, handler, backoff=2.0)
    w.run(until_empty=True)
    assert q.get(sent.id).visible_at == pytest.approx(clock.now() + 2)  # 2 * 2**0
    clock.advance(2)
    w.run(until_empty=True)
    assert q.get(sent.id).visible_at == pytest.approx(clock.now() + 4)  # 2 * 2**1
    clock.advance(4)
    w.run(until_empty=True)  # third receive reaches max_receive_count: straight to the DLQ
    [dead] = client.queue("jobs-dlq").peek()
    assert dead.id == sent.id and dead.error == "ValueError: cannot handle boom"
    assert w.failed == 3 and w.dead_lettered == 1


def test_extends_visibility_while_handler_runs(client: Client, clock: ManualClock) -> None:
    q = client.create_queue("slow", visibility_timeout=10)
    sent = q.send("x")
    release = threading.Event()
    started = threading.Event()

    def handler(m: Message) -> None:
        started.set()
        release.wait(10)

    w = Worker(q, handler)
    t = threading.Thread(target=w.run, kwargs={"until_empty": True, "handle_signals": False})
    t.start()
    assert started.wait(5)
    first = q.get(sent.id).visible_at
    clock.advance(6)  # past half the visibility timeout: the worker extends it
    waiting.until(lambda: q.get(sent.id).visible_at > first, timeout=5)
    clock.advance(6)  # past the original timeout: still invisible to others
    assert q.receive() == []
    release.set()
    t.join(5)
    assert not t.is_alive() and q.stats().deleted == 1


def test_async_handler(client: Client) -> None:
    q = client.create_queue("aio")
    for i in range(20):
        q.send(str(i))
    seen: list[str] = []

    async def handler(m: Message) -> None:
        await asyncio.sleep(0)
        seen.append(m.text)

    w = Worker(q, handler, concurrency=5, batch_size=10)
    assert w.run(until_empty=True) == 20
    assert sorted(seen, key=int) == [str(i) for i in range(20)]


def test_stop_finishes_held_work_and_releases_the_rest(client: Client) -> None:
    q = client.create_queue("stop", visibility_timeout=600)
    for i in range(3):
        q.send(str(i), id=f"m{i}")
    started = threading.Event()
    release = threading.Event()

    def handler(m: Message) -> None:
        started.set()
        if m.id == "m0":
            release.wait(5)
        else:
            time.sleep(5)

    w = Worker(q, handler, concurrency=2, batch_size=2, grace=0.3)
    t = threading.Thread(target=w.run, kwargs={"handle_signals": False})
    t.start()
    assert started.wait(5)
    waiting.until(lambda: q.stats().in_flight == 2, timeout=5)
    w.stop()
    release.set()  # m0 finishes within the grace period; m1 does not
    t.join(5)
    assert not t.is_alive()
    st = q.stats()
    assert st.deleted == 1 and st.in_flight == 0 and st.ready == 2


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_a_stop_gives_back_uncounted_what_waited_its_turn(client: Client, kind: str) -> None:
    """A batch larger than what runs at once waits its turn, held: at a stop the messages
    whose handler began go back with their receive counted, those that never reached one
    as though never received (so restarts bring them no nearer the dead-letter queue)."""
    q = client.create_queue("turns", visibility_timeout=600)
    for i in range(3):
        q.send(str(i), id=f"m{i}")
    started: list[str] = []
    release = threading.Event()

    def handler(m: Message) -> None:
        started.append(m.id)
        release.wait(5)

    async def handler_async(m: Message) -> None:
        started.append(m.id)
        while not release.is_set():
            await asyncio.sleep(0.01)

    w = Worker(
        q, handler if kind == "threads" else handler_async, concurrency=1, batch_size=3, grace=0.1
    )
    t = threading.Thread(target=w.run, kwargs={"handle_signals": False})
    t.start()
    waiting.until(lambda: bool(started) and q.stats().in_flight == 3, timeout=5)
    w.stop()
    t.join(5)
    release.set()
    assert not t.is_alive()
    counts = {m.id: m.receive_count for m in q.peek(limit=3)}
    assert started == ["m0"] and counts == {"m0": 1, "m1": 0, "m2": 0}


def test_registers_and_heartbeats_as_consumer(client: Client) -> None:
    q = client.create_queue("reg")
    q.send("x")
    seen: list[list[str]] = []

    def handler(m: Message) -> None:
        seen.append([c.id for c in client.list_consumers("reg")])

    w = Worker(q, handler, consumer_id="worker-1")
    w.run(until_empty=True)
    assert seen == [["worker-1"]]
    assert client.list_consumers("reg") == []
