"""Rule 6: dead letters and redrive."""

from __future__ import annotations

import pytest

from conveyor import (
    Client,
    DeadLetterPolicy,
    InvalidState,
    ManualClock,
    MessageNotFound,
    Queue,
)
from conveyor.models import Capability as Capability

from .conftest import fifo_with_dlq, needs


def _setup(client: Client, max_receives: int = 2) -> tuple[Queue, Queue]:
    dlq = client.create_queue("work-dlq")
    q = client.create_queue(
        "work",
        visibility_timeout=5,
        dead_letter=DeadLetterPolicy(queue="work-dlq", max_receive_count=max_receives),
    )
    return q, dlq


def test_rule6_moved_on_the_receive_after_max(client: Client, clock: ManualClock) -> None:
    q, dlq = _setup(client, max_receives=2)
    sent = q.send("poison", attributes={"k": "v"})
    for _ in range(2):
        [m] = q.receive()
        clock.advance(5)
    assert q.receive() == []  # the third receive moves it instead of delivering it
    [dead] = dlq.receive()
    assert dead.id == sent.id and dead.text == "poison"
    assert dict(dead.attributes) == {"k": "v"}
    assert dead.source_queue == "work" and dead.receive_count == 1
    assert q.stats().total == 0
    if Capability.TOTALS in client.capabilities:
        assert q.stats().dead == 1
    assert m.id == sent.id


def test_messages_given_back_come_no_nearer_the_dead_letter_queue(client: Client) -> None:
    """Receives given back (`give_back`: claimed, never handed to anyone) do not count
    towards the dead-letter policy's max receive count."""
    needs(client, Capability.GIVE_BACK)
    q, dlq = _setup(client, max_receives=1)
    sent = q.send("never seen")
    for _ in range(5):
        [m] = q.receive()
        assert q.give_back([m.receipt or ""]) == [None]
    [m] = q.receive()
    assert (m.id, m.receive_count) == (sent.id, 1)
    assert dlq.receive() == []


def test_rule6_redrive_one_back_to_source(client: Client, clock: ManualClock) -> None:
    needs(client, Capability.EDIT_IN_PLACE)
    q, dlq = _setup(client, max_receives=1)
    sent = q.send("x")
    q.receive()
    clock.advance(5)
    q.receive()
    assert dlq.stats().ready == 1
    assert dlq.redrive(sent.id) == [sent.id]
    [back] = q.receive()
    assert back.id == sent.id and back.receive_count == 1 and back.source_queue is None
    with pytest.raises(MessageNotFound):
        dlq.redrive("nope")


def test_a_message_moved_out_and_back_is_delivered_once_at_the_back(client: Client) -> None:
    """A message made dead by hand and redriven is a new arrival: delivered once, after
    what was sent while it was away (its old place in the queue holds nothing)."""
    needs(client, Capability.EDIT_IN_PLACE)
    q, dlq = _setup(client)
    first = q.send("first")
    q.move_to_dlq(first.id, "bad input")
    q.send("second")
    assert dlq.redrive(first.id) == [first.id]
    got = q.receive(10, visibility_timeout=0)
    assert [m.text for m in got] == ["second", "first"]
    assert [m.text for m in q.peek(10)] == ["second", "first"]


def test_rule6_redrive_all_at_a_rate(client: Client, clock: ManualClock) -> None:
    needs(client, Capability.EDIT_IN_PLACE)
    q, dlq = _setup(client, max_receives=1)
    for i in range(30):
        q.send(f"m{i}")
    q.receive(10)
    q.receive(10)
    q.receive(10)
    clock.advance(5)
    q.receive(10)
    q.receive(10)
    q.receive(10)
    assert dlq.stats().ready == 30
    progress: list[int] = []
    start = clock.now()
    moved = dlq.redrive_all(rate=10, progress=progress.append)
    assert moved == 30 and sum(progress) == 30
    assert clock.now() - start >= 2.0  # 30 messages at 10/s
    assert q.stats().ready == 30 and dlq.stats().total == 0


def test_redrive_to_named_queue_and_in_flight_refused(client: Client) -> None:
    needs(client, Capability.EDIT_IN_PLACE)
    q, dlq = _setup(client)
    other = client.create_queue("other")
    q.send("a")
    [m] = q.receive()
    q.move_to_dlq(m.id, error="bad payload")
    [dead] = dlq.peek()
    assert dead.error == "bad payload" and dead.source_queue == "work"
    [held] = dlq.receive()
    with pytest.raises(InvalidState, match="in flight"):
        dlq.redrive(held.id)
    dlq.change_visibility(held.receipt or "", 0)
    assert dlq.redrive(held.id, to="other") == [held.id]
    [back] = other.receive()
    assert back.id == held.id
    assert (back.error, back.source_queue, back.receive_count) == (None, None, 1)


def test_move_to_dlq_needs_a_policy(client: Client) -> None:
    needs(client, Capability.EDIT_IN_PLACE)
    q = client.create_queue("plain")
    sent = q.send("x")
    with pytest.raises(InvalidState, match="no dead-letter queue"):
        q.move_to_dlq(sent.id)
    assert q.get(sent.id).text == "x"


def test_fifo_dead_letter(client: Client, clock: ManualClock) -> None:
    q = fifo_with_dlq(client, "f", visibility_timeout=1)
    q.send("first", group_id="g")
    q.send("second", group_id="g")
    [m] = q.receive()
    assert m.text == "first"
    clock.advance(1)
    [m2] = q.receive()
    assert m2.text == "second"
    if Capability.EDIT_IN_PLACE in client.capabilities:
        assert client.queue("f-dlq.fifo").peek()[0].text == "first"
