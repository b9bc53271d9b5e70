"""gq's document (../shared/seeds: "gq spec"), as a program written to it uses Conveyor:
producers push and consumers pop batches of any size, and deadlines follow the delivery
guarantee, in the SDK, the Worker and over HTTP."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conveyor import Client, DeadLetterPolicy, Delivery, ManualClock, Message, Producer, Worker
from conveyor.backends.memory import MemoryBackend

from .support.live import LiveServer
from .support.waiting import until


@pytest.fixture(params=["memory", "sqlite"])
def client(request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock) -> Iterator[Client]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path}/gq.db"
    with Client(url, clock=clock) as c:
        yield c


def run_in_thread(worker: Worker, **options: Any) -> threading.Thread:
    t = threading.Thread(target=worker.run, kwargs={"handle_signals": False, **options})
    t.start()
    return t


# -- batch sizes ----------------------------------------------------------------------------


def test_a_producer_pushes_batches_of_a_thousand(client: Client) -> None:
    """NewProducer(pushBatchSize): gathers that many before one push."""
    q = client.create_queue("pushed")
    calls: list[int] = []
    send_batch = q.send_batch

    def counted(entries: Any) -> Any:
        entries = list(entries)
        calls.append(len(entries))
        return send_batch(entries)

    q.send_batch = counted  # type: ignore[method-assign]
    with Producer(q, batch_size=1000, linger=60) as producer:
        futures = [producer.send(f"p{i}") for i in range(2500)]
        producer.flush()
    assert calls[:2] == [1000, 1000] and sum(calls) == 2500
    assert len({f.result(timeout=5).id for f in futures}) == 2500
    assert q.stats().ready == 2500


def test_a_consumer_pops_a_thousand_at_once_and_processes_them(client: Client) -> None:
    """NewConsumer(popBatchSize): pops that many at once; `Process` runs on each."""
    q = client.create_queue("popped", visibility_timeout=60)
    q.send_batch([f"m{i}" for i in range(1500)])
    first = threading.Event()
    go = threading.Event()
    seen: list[str] = []

    def process(m: Message) -> None:
        if not first.is_set():
            first.set()
            go.wait(10)
        seen.append(m.text)

    w = Worker(q, process, concurrency=1, batch_size=1000)
    t = run_in_thread(w, until_empty=True)
    assert first.wait(10)
    # one handler at a time, and the whole batch popped: held for it, not for others
    assert q.stats().in_flight == 1000 and q.receive(1000, visibility_timeout=0) != []
    go.set()
    t.join(30)
    assert not t.is_alive() and w.processed == 1500 and len(set(seen)) == 1500
    assert q.stats().total == 0


def test_the_sqs_api_keeps_its_limit_of_ten(clock: ManualClock) -> None:
    with Client(backend=MemoryBackend(clock=clock)) as served, LiveServer(served) as live:
        served.create_queue("q")
        sqs = live.sqs()
        url = sqs.get_queue_url(QueueName="q")["QueueUrl"]
        with pytest.raises(Exception, match="TooManyEntriesInBatchRequest"):
            sqs.send_message_batch(
                QueueUrl=url,
                Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(11)],
            )
        with pytest.raises(Exception, match="MaxNumberOfMessages"):
            sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=11)


# -- deadlines ------------------------------------------------------------------------------


def failing(seen: list[Any], error: str, note: Any) -> Any:
    """A `Process` that notes each message it is given and fails."""

    def process(m: Message) -> None:
        seen.append(note(m))
        raise RuntimeError(error)

    return process


def test_at_least_once_a_failure_before_the_deadline_is_queued_again_after_it_failed(
    client: Client, clock: ManualClock
) -> None:
    """The document: "If the function returns error, the consumer checks the message
    deadline. If it has passed, it updates the message's status to failed. If it has not yet
    passed, it resets its status to queued." """
    client.create_queue("work-dlq")
    q = client.create_queue(
        "work", dead_letter=DeadLetterPolicy(queue="work-dlq", max_receive_count=100)
    )
    sent = q.send("job", deadline=clock.now() + 30)
    attempts: list[Any] = []

    w = Worker(q, failing(attempts, "not yet", lambda m: m.receive_count), backoff=1.0)
    w.run(until_empty=True)
    assert q.get(sent.id).receive_count == 1  # queued again, after its back-off
    clock.advance(1)
    w.run(until_empty=True)
    assert attempts == [1, 2]
    clock.advance(40)  # past the deadline: the next failure is final
    w.run(until_empty=True)
    assert attempts == [1, 2, 3]
    [dead] = client.queue("work-dlq").peek()
    assert dead.id == sent.id and dead.error == "deadline passed: RuntimeError: not yet"
    assert q.stats().total == 0


def test_at_least_once_a_deadline_that_passes_while_consumed_frees_the_message(
    client: Client, clock: ManualClock
) -> None:
    """The document: "When a message's deadline expires while its status is consumed, other
    consumers are free to claim it": its claim ends at the deadline, and the worker holding
    it does not extend it past the deadline."""
    q = client.create_queue("slow", visibility_timeout=60)
    sent = q.send("x", deadline=clock.now() + 20)
    started, release = threading.Event(), threading.Event()

    def process(m: Message) -> None:
        started.set()
        release.wait(10)

    w = Worker(q, process)
    t = run_in_thread(w, until_empty=True)
    assert started.wait(5)
    assert q.get(sent.id).visible_at == pytest.approx(clock.now() + 20)
    clock.advance(31)  # past half its visibility timeout: extended, but only to the deadline
    time.sleep(0.5)
    assert q.get(sent.id).visible_at <= clock.now()
    [other] = q.receive()  # another consumer claims it
    assert other.id == sent.id and other.receive_count == 2
    release.set()
    t.join(10)
    assert q.stats().total == 1  # the first consumer's delete met a stale receipt
    q.delete(other.receipt or "")


def test_at_most_once_a_failure_before_the_deadline_is_retried(
    client: Client, clock: ManualClock
) -> None:
    """The document: "In this mode, after the deadline expires, the message is marked failed
    and won't be retried": until then a failure queues it again (the Worker deleted it)."""
    q = client.create_queue("emails", delivery=Delivery.AT_MOST_ONCE)
    sent = q.send("verify", deadline=clock.now() + 30)
    once = q.send("no deadline")
    attempts: list[Any] = []

    w = Worker(q, failing(attempts, "smtp down", lambda m: m.text), backoff=1.0)
    w.run(until_empty=True)
    assert sorted(attempts) == ["no deadline", "verify"]
    with pytest.raises(Exception, match="no message"):
        q.get(once.id)  # without a deadline: tried once, as at most once promises
    clock.advance(1)
    w.run(until_empty=True)
    assert attempts.count("verify") == 2  # retried within its deadline
    clock.advance(60)  # the deadline passed: failed, never delivered again
    w.run(until_empty=True)
    assert attempts.count("verify") == 2
    assert q.receive() == [] and q.stats().expired == 1
    assert sent.id not in {m.id for m in q.peek(10)}


def test_deadlines_over_http(clock: ManualClock) -> None:
    """The REST API: a deadline given with a send ends an at-least-once claim, and drops an
    at-most-once message, as the SDK does."""
    with Client(backend=MemoryBackend(clock=clock), clock=clock) as served:
        served.create_queue("alo", visibility_timeout=60)
        served.create_queue("amo", delivery=Delivery.AT_MOST_ONCE)
        with LiveServer(served) as live, httpx.Client(base_url=live.url) as http:
            for name in ("alo", "amo"):
                r = http.post(f"/queues/{name}/messages", json={"body": "b", "deadline": 10})
                assert r.status_code == 200, r.text
            [held] = http.post("/queues/alo/receive", json={}).json()["messages"]
            assert held["visible_at"] == pytest.approx(clock.now() + 10)
            clock.advance(11)
            [again] = http.post("/queues/alo/receive", json={}).json()["messages"]
            assert again["id"] == held["id"] and again["receive_count"] == 2
            assert http.post("/queues/amo/receive", json={}).json()["messages"] == []
            stats = http.get("/queues/amo").json()
            until(lambda: served.queue("amo").stats().expired == 1, what="the expiry")
            assert stats is not None
