"""Inspection and editing in place, without receiving."""

from __future__ import annotations

import pytest

from conveyor import Client, ManualClock, MessageNotFound, MessageState, ReceiptHandleInvalid
from conveyor.models import Capability as Capability

from .conftest import has, needs


def test_peek_by_state_and_paging(client: Client, clock: ManualClock) -> None:
    needs(client, Capability.EDIT_IN_PLACE)
    q = client.create_queue("q", visibility_timeout=30)
    for i in range(5):
        q.send(f"m{i}")
    q.send("delayed", delay=60)
    q.receive(2)
    assert q.stats().ready == 3
    assert [m.text for m in q.peek(10, state="ready")] == ["m2", "m3", "m4"]
    assert [m.text for m in q.peek(10, state=MessageState.IN_FLIGHT)] == ["m0", "m1"]
    assert [m.text for m in q.peek(10, state="delayed")] == ["delayed"]
    first = q.peek(2)
    rest = q.peek(10, after=first[-1].sequence)
    assert [m.text for m in first + rest] == ["m0", "m1", "m2", "m3", "m4", "delayed"]
    assert q.stats().in_flight == 2  # peeking receives nothing
    if has(client, Capability.TOTALS):
        assert q.stats().received == 2


def test_get_update_remove(client: Client, clock: ManualClock) -> None:
    needs(client, Capability.EDIT_IN_PLACE)
    q = client.create_queue("q")
    a = q.send("a", id="a")
    q.send("b", id="b")
    assert q.get("a").text == "a"
    updated = q.update("b", body="B!", attributes={"x": "1"}, priority=3)
    assert updated.text == "B!" and updated.priority == 3 and updated.version == 2
    assert [m.id for m in q.receive(10, visibility_timeout=5)] == ["b", "a"]
    q.update("a", visible_at=clock.now())
    assert q.receive()[0].id == "a"
    deleted = q.stats().deleted
    q.remove(a.id)
    with pytest.raises(MessageNotFound):
        q.get("a")
    with pytest.raises(MessageNotFound):
        q.remove("a")
    if has(client, Capability.TOTALS):  # an admin's delete counts as one
        assert q.stats().deleted == deleted + 1


def test_reset_and_fail(client: Client, clock: ManualClock) -> None:
    needs(client, Capability.EDIT_IN_PLACE)
    q = client.create_queue("q", visibility_timeout=300)
    q.send("x", id="x")
    [m] = q.receive()
    reset = q.reset("x")
    assert reset.receive_count == 0 and reset.state(clock.now()) is MessageState.READY
    with pytest.raises(ReceiptHandleInvalid):
        q.delete(m.receipt or "")
    [m2] = q.receive()
    assert m2.receive_count == 1
    failed = q.fail("x", delay=20)
    assert failed.visible_at == pytest.approx(clock.now() + 20)
    assert q.receive() == []
    clock.advance(20)
    assert q.receive()[0].receive_count == 2
    q.fail("x")
    assert q.receive()[0].receive_count == 3


def test_one_delivery_order_for_peek_and_receive(client: Client) -> None:
    """Peek lists in delivery order, the order receives follow: priority, then send order;
    a message given a new priority goes to the back of that priority's messages."""
    needs(client, Capability.EDIT_IN_PLACE, Capability.PRIORITY)
    q = client.create_queue("order", visibility_timeout=60)
    for name in ("a", "b", "c", "d"):
        q.send(name, id=name)
    q.update("c", priority=5)
    q.update("a", priority=5)
    peeked = q.peek(10)
    assert [m.id for m in peeked] == ["c", "a", "b", "d"]
    assert [m.priority for m in peeked] == [5, 5, 0, 0]
    sequences = [m.sequence for m in peeked]
    assert sequences == sorted(sequences)
    assert [m.id for m in q.peek(10, after=peeked[1].sequence)] == ["b", "d"]
    assert [m.id for m in q.receive(10)] == ["c", "a", "b", "d"]
