"""Rules 1-5, 7 and 11: delivery, visibility, receipts, order, duplicates, delay, concurrency."""

from __future__ import annotations

import base64
import hashlib
import threading

import pytest

from conveyor import (
    Client,
    InvalidAttribute,
    ManualClock,
    ReceiptHandleInvalid,
    SendEntry,
)
from conveyor.models import Capability as Capability

from .conftest import fifo_with_dlq, has, needs, scaled


def test_rule1_at_least_once_until_deleted(client: Client, clock: ManualClock) -> None:
    q = client.create_queue("r1", visibility_timeout=5)
    sent = q.send("payload")
    for attempt in range(1, 4):
        [m] = q.receive()
        assert m.id == sent.id and m.text == "payload" and m.receive_count == attempt
        clock.advance(5)
    [m] = q.receive()
    q.delete(m.receipt or "")
    clock.advance(60)
    assert q.receive() == []


def test_rule2_invisible_until_visible_at(client: Client, clock: ManualClock) -> None:
    q = client.create_queue("r2", visibility_timeout=30)
    q.send("x")
    [m] = q.receive()
    assert m.visible_at == pytest.approx(clock.now() + 30)
    clock.advance(29.9)
    assert q.receive() == []
    clock.advance(0.1)
    [again] = q.receive()
    assert again.id == m.id and again.receive_count == 2


def test_receive_visibility_override_and_change_visibility(
    client: Client, clock: ManualClock
) -> None:
    q = client.create_queue("vis", visibility_timeout=30)
    q.send("x")
    [m] = q.receive(visibility_timeout=2)
    clock.advance(1)
    q.change_visibility(m.receipt or "", 10)
    clock.advance(5)
    assert q.receive() == []
    clock.advance(5)
    [m2] = q.receive()
    q.change_visibility(m2.receipt or "", 0)
    [m3] = q.receive()
    assert m3.id == m.id and m3.receive_count == 3


def test_a_receive_is_checked_once_into_a_value_run_in_a_thread_or_the_event_loop(
    client: Client, clock: ManualClock
) -> None:
    """`Queue.receiving` fills in the queue's defaults and refuses bad options before
    anything is claimed; the `Receive` it makes runs as often as asked, in this thread
    (`Queue.run_receive`) or in an event loop (`AsyncQueue.run_receive`)."""
    import asyncio

    from conveyor import AsyncClient, InvalidInput, Receive

    q = client.create_queue("ops", visibility_timeout=30, receive_wait=0)
    assert q.receiving() == Receive(most=1, visibility_timeout=30.0, wait=0.0)
    assert q.receiving(3, visibility_timeout=5, wait=2) == Receive(3, 5.0, 2.0)
    for bad in ({"max_messages": 0}, {"visibility_timeout": -1}, {"wait": 21}):
        with pytest.raises(InvalidInput):
            q.receiving(**bad)
    for i in range(5):
        q.send(f"m{i}")
    op = q.receiving(2, visibility_timeout=5, wait=0)
    first = q.run_receive(op)
    second = asyncio.run(AsyncClient(client=client).queue("ops").run_receive(op))
    assert len(first) == len(second) == 2
    assert {m.id for m in first}.isdisjoint(m.id for m in second)
    assert all(m.visible_at == pytest.approx(clock.now() + 5) for m in [*first, *second])
    clock.advance(5)
    assert len(q.run_receive(q.receiving(10, wait=0))) == 5


def test_deletes_and_changes_of_visibility_are_checked_once_into_values(
    client: Client, clock: ManualClock
) -> None:
    """`Queue.deleting` and `Queue.changing_visibility` refuse a bad batch before anything
    is done; a timeout out of range refuses its entry alone; the values they make run in
    store calls of `batch_limit` entries, any number of them when gathered (most=None)."""
    from conveyor import ChangeVisibility, Delete, InvalidInput
    from conveyor.exceptions import EmptyBatch, TooManyEntries

    q = client.create_queue("ops", visibility_timeout=30)
    with pytest.raises(EmptyBatch):
        q.deleting([])
    with pytest.raises(TooManyEntries):
        q.deleting(["r"] * 11, most=10)
    with pytest.raises(InvalidInput, match="not one string"):
        q.deleting("abc")
    with pytest.raises(InvalidInput, match="entry id"):
        q.changing_visibility({"bad id!": ("r", 5)})
    n = q.backend.batch_limit + 3
    q.send_batch([f"m{i}" for i in range(n)])
    got = q.receive(n, wait=0)
    assert len(got) == n
    receipts = [m.receipt or "" for m in got]
    change = q.changing_visibility(
        [(receipts[0], 43201), *((r, 0) for r in receipts[1:])], most=None
    )
    assert isinstance(change, ChangeVisibility) and isinstance(change.changes[0], InvalidInput)
    errors = q.run_change_visibility(change)
    assert isinstance(errors[0], InvalidInput) and errors[1:] == [None] * (n - 1)
    again = q.receive(n, wait=0)  # all but the first visible again at once
    assert sorted(m.id for m in again) == sorted(m.id for m in got[1:])
    op = q.deleting([receipts[0], *(m.receipt or "" for m in again)], most=None)
    assert isinstance(op, Delete) and list(op.entry_ids) == [str(i) for i in range(n)]
    assert q.run_delete(op) == [None] * n
    # the same values, done from an event loop
    import asyncio

    from conveyor import AsyncClient

    aq = AsyncClient(client=client).queue("ops")

    async def from_the_loop() -> list[Exception | None]:
        sent = await aq.run_send(q.sending([b"x", b"y"]))
        got = await aq.receive(2, wait=0)
        assert sorted(m.id for m in got) == sorted(sent.ids)
        moved = await aq.run_change_visibility(
            q.changing_visibility([(m.receipt or "", 60) for m in got])
        )
        assert moved == [None, None]
        return await aq.run_delete(q.deleting([m.receipt or "" for m in got]))

    assert asyncio.run(from_the_loop()) == [None, None]
    clock.advance(30)
    assert q.receive(10, wait=0) == []
    assert q.stats().total == 0


def test_a_receive_with_no_visibility_timeout_gives_each_message_once(
    client: Client, clock: ManualClock
) -> None:
    """A message a receive makes visible again at once (visibility timeout 0) is not
    delivered a second time by that same receive, on a standard queue or a FIFO one."""
    for q in (client.create_queue("zero"), client.create_queue("zero.fifo")):
        fifo = q.info.attributes.fifo
        for i, body in enumerate(["a", "b", "c"]):
            q.send(body, group_id="g" if fifo else None, dedup_id=str(i) if fifo else None)
        first = q.receive(10, visibility_timeout=0)
        assert sorted(m.text for m in first) == ["a", "b", "c"]
        again = q.receive(10, visibility_timeout=0)  # visible again: received again, once
        assert sorted(m.text for m in again) == ["a", "b", "c"]
        assert all(m.receive_count == 2 for m in again)


def test_a_send_and_receive_in_one_call_takes_what_was_ready_first(
    client: Client, clock: ManualClock
) -> None:
    """`Queue.run_send_receive` (the push gateway's send for a dispatcher waiting on the
    queue): the send, then a claim as `claim` would make it after that send: the oldest
    ready first, claimed messages invisible for the timeout given and counted as received,
    what it left ready there for the next receive; a delayed message is not claimed."""
    q = client.create_queue("joined", visibility_timeout=30)
    older = q.send("older")
    sent, claimed = q.run_send_receive(q.sending(["a", "b"]), 2, 10)
    assert len(sent.ids) == 2 and not any(r.duplicate for r in sent.results)
    assert [m.id for m in claimed] == [older.id, sent.ids[0]]
    assert all(m.receive_count == 1 and m.receipt for m in claimed)
    assert all(m.visible_at == pytest.approx(clock.now() + 10) for m in claimed)
    [left] = q.receive()
    assert left.id == sent.ids[1]
    q.delete(claimed[0].receipt or "")
    clock.advance(10)
    [again] = q.receive()
    assert again.id == sent.ids[0] and again.receive_count == 2
    stats = q.stats()
    assert (stats.ready, stats.in_flight) == (0, 2)
    if has(client, Capability.TOTALS):
        assert (stats.sent, stats.received, stats.deleted) == (3, 4, 1)
    later, none = q.run_send_receive(
        q.sending([SendEntry(entry_id="0", body="later", delay=5)]), 5, 10
    )
    assert none == [] and len(later.ids) == 1
    clock.advance(5)
    assert [m.id for m in q.receive(10)] == later.ids


def test_a_send_and_receive_in_one_call_keeps_the_queue_s_rules(
    client: Client, clock: ManualClock
) -> None:
    """A sender's id the queue holds is a duplicate, stored once and claimed once; a
    queue with a dead-letter policy moves a message at its max receive count on the way;
    on a FIFO queue the claim holds the group (two store calls where the store needs)."""
    from conveyor import DeadLetterPolicy

    if has(client, Capability.SENDER_IDS):
        q = client.create_queue("joined-ids")
        first, [m] = q.run_send_receive(q.sending(["x"], ids=["given"]), 5, 30)
        assert first.ids == ["given"] and m.id == "given"
        again, none = q.run_send_receive(q.sending(["x"], ids=["given"]), 5, 30)
        assert none == [] and again.results[0].duplicate and again.ids == ["given"]
    client.create_queue("joined-dlq")
    q = client.create_queue(
        "joined-policy",
        visibility_timeout=5,
        dead_letter=DeadLetterPolicy(queue="joined-dlq", max_receive_count=1),
    )
    poison = q.send("poison")
    [m] = q.receive()
    clock.advance(5)
    sent, [fresh] = q.run_send_receive(q.sending(["fresh"]), 5, 30)
    assert fresh.id == sent.ids[0] and m.id == poison.id
    [dead] = client.queue("joined-dlq").receive()
    assert dead.id == poison.id
    if has(client, Capability.FIFO):
        f = client.create_queue("joined.fifo", content_based_dedup=True)
        entries = [SendEntry(entry_id=str(i), body=str(i), group_id="g") for i in (1, 2)]
        sent, got = f.run_send_receive(f.sending(entries), 5, 30)
        assert [m.id for m in got] == sent.ids  # a batch fills from one group, in order
        f.send("3", group_id="g")
        assert f.receive() == []  # the group is held while those are in flight


def test_a_message_given_back_is_as_though_that_receive_was_not_made(
    client: Client, clock: ManualClock
) -> None:
    """`give_back` (messages claimed and never handed on): visible at once, the receive
    count one lower, the first receive forgotten at 0, the receipt no longer holding it. A
    store that cannot lower a count (an SQS endpoint) makes it visible, counted."""
    q = client.create_queue("back", visibility_timeout=30)
    sent = q.send("x")
    [m] = q.receive()
    assert q.give_back([m.receipt or ""]) == [None]
    clock.advance(1)
    [again] = q.receive()
    assert again.id == sent.id
    if not has(client, Capability.GIVE_BACK):
        assert again.receive_count == 2
        return
    assert again.receive_count == 1
    assert again.first_received_at == pytest.approx(clock.now())  # not the first claim's
    with pytest.raises(ReceiptHandleInvalid):
        q.delete(m.receipt or "")
    clock.advance(30)  # a second receive, given back: down to one, the first time kept
    [twice] = q.receive()
    assert twice.receive_count == 2
    results = q.give_back([twice.receipt or "", twice.receipt or "", again.receipt or ""])
    assert results[0] is None and isinstance(results[1], ReceiptHandleInvalid)
    assert isinstance(results[2], ReceiptHandleInvalid)  # a stale receipt changes nothing
    [third] = q.receive()
    assert (third.receive_count, third.first_received_at) == (2, again.first_received_at)
    q.delete(third.receipt or "")
    assert q.receive() == []


def test_a_fifo_group_whose_message_is_given_back_is_served_again(client: Client) -> None:
    q = client.create_queue("back.fifo", visibility_timeout=30, content_based_dedup=True)
    for i in range(2):
        q.send(f"a{i}", group_id="A")
    [first] = q.receive()
    assert q.receive() == []  # the group has a message in flight
    q.give_back([first.receipt or ""])
    got = q.receive(10)
    assert [m.text for m in got] == ["a0", "a1"]


def test_rule3_every_receive_issues_a_new_receipt(client: Client, clock: ManualClock) -> None:
    q = client.create_queue("r3", visibility_timeout=1)
    q.send("x")
    [first] = q.receive()
    clock.advance(1)
    [second] = q.receive()
    assert first.receipt != second.receipt
    if not has(client, Capability.STRICT_RECEIPTS):
        return  # SQS (the sqs:// adapter's endpoint) takes earlier receipts
    with pytest.raises(ReceiptHandleInvalid):
        q.delete(first.receipt or "")
    with pytest.raises(ReceiptHandleInvalid):
        q.change_visibility(first.receipt or "", 100)
    if Capability.EDIT_IN_PLACE in client.capabilities:
        assert q.get(first.id).receive_count == 2
    q.delete(second.receipt or "")
    with pytest.raises(ReceiptHandleInvalid):
        q.delete(second.receipt or "")


def test_delete_batch_deletes_only_what_its_receipts_still_hold(
    client: Client, clock: ManualClock
) -> None:
    needs(client, Capability.STRICT_RECEIPTS)
    q = client.create_queue("held", visibility_timeout=30)
    q.send_batch(["a", "b", "c"])
    a, b, c = sorted(q.receive(10), key=lambda m: m.text)
    q.change_visibility(b.receipt or "", 0)
    [again] = q.receive(1)
    assert again.id == b.id
    results = q.delete_batch([a.receipt or "", b.receipt or "", c.receipt or ""])
    assert [r.ok for r in results] == [True, False, True]
    assert isinstance(results[1].error, ReceiptHandleInvalid)
    assert q.stats().in_flight == 1  # b, held by the newer receipt
    q.delete(again.receipt or "")
    assert q.stats().total == 0


def test_delete_batch_of_an_earlier_and_the_newest_receipt_deletes_by_the_newest(
    client: Client, clock: ManualClock
) -> None:
    """Two receipts of one message in one batch, the earlier first: the newest deletes it
    and the earlier one is reported stale (not the other way round, and not both)."""
    needs(client, Capability.STRICT_RECEIPTS)
    q = client.create_queue("twice", visibility_timeout=5)
    q.send("x")
    [first] = q.receive()
    clock.advance(5)
    [second] = q.receive()
    results = q.delete_batch([first.receipt or "", second.receipt or "", second.receipt or ""])
    assert [r.ok for r in results] == [False, True, False]  # the same receipt again: stale
    assert all(isinstance(r.error, ReceiptHandleInvalid) for r in results if not r.ok)
    assert q.stats().total == 0


@pytest.mark.parametrize("forged", ["", "garbage", "bm90IGEgcmVjZWlwdA", "x" * 5000])
def test_rule3_forged_receipts_change_nothing(client: Client, forged: str) -> None:
    q = client.create_queue("forge")
    q.send("x")
    [m] = q.receive()
    with pytest.raises(ReceiptHandleInvalid):
        q.delete(forged)
    with pytest.raises(ReceiptHandleInvalid):
        q.change_visibility(forged, 0)
    assert q.stats().in_flight == 1
    assert m.receipt


def test_receipt_of_another_queue_is_rejected(client: Client) -> None:
    a = client.create_queue("qa")
    b = client.create_queue("qb")
    a.send("x")
    [m] = a.receive()
    with pytest.raises(ReceiptHandleInvalid, match="belongs to queue 'qa'"):
        b.delete(m.receipt or "")
    a.delete(m.receipt or "")


def test_receipts_are_sqs_shaped_and_still_take_the_earlier_form(client: Client) -> None:
    """Handles hold the base64 alphabet alone, as SQS's do: AWS's SQS Extended Client finds
    a handle it wrapped with `split('-')[-1]`. Message ids of any printable characters come
    through. A receipt of the earlier form (before an upgrade) is still taken."""
    needs(client, Capability.STRICT_RECEIPTS)
    q = client.create_queue("shape")
    own_ids = has(client, Capability.SENDER_IDS)
    sent = q.send("x", id="a-b/c.d+e=f") if own_ids else q.send("x")
    q.send("y")
    got = {m.text: m for m in q.receive(10)}
    alphabet = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
    for m in got.values():
        assert m.receipt and set(m.receipt) <= alphabet, m.receipt
        assert m.receipt.split("-")[-1] == m.receipt
    assert got["x"].id == sent.id
    q.delete(got["x"].receipt or "")
    y = got["y"]
    _, token, row, encoded = (y.receipt or "").split("/", 3)
    earlier = ".".join(
        [
            base64.urlsafe_b64encode(b"shape").decode().rstrip("="),
            token,
            row,
            base64.b64decode(encoded).decode(),
        ]
    )
    q.delete(earlier)
    assert q.stats().total == 0


def test_rule4_priority_then_send_order(client: Client) -> None:
    needs(client, Capability.PRIORITY)
    q = client.create_queue("r4")
    for i, p in enumerate([0, 5, 0, 9, 5, 0]):
        q.send(f"m{i}", priority=p)
    got = [m.text for m in q.receive(10)]
    assert got == ["m3", "m1", "m4", "m0", "m2", "m5"]


def test_rule4_single_receiver_sees_send_order(client: Client) -> None:
    q = client.create_queue("order")
    for i in range(30):
        q.send(f"{i}")
    seen = []
    while batch := q.receive(7):
        seen += [int(m.text) for m in batch]
        q.delete_batch([m.receipt or "" for m in batch])
    assert seen == list(range(30))


def test_rule4_fifo_group_blocked_while_in_flight(client: Client, clock: ManualClock) -> None:
    q = client.create_queue("r4.fifo", visibility_timeout=10, content_based_dedup=True)
    for i in range(3):
        q.send(f"a{i}", group_id="A")
        q.send(f"b{i}", group_id="B")
    [first] = q.receive()
    assert first.text == "a0"
    [second] = q.receive()
    assert second.text == "b0"
    assert q.receive() == []  # both groups have a message in flight
    q.delete(first.receipt or "")
    [third] = q.receive()
    assert third.text == "a1"
    clock.advance(10)  # b0 times out: group B resumes with b0 again, never b1 first
    got = [m.text for m in q.receive(10)]
    assert got[0] == "b0" and "b1" in got
    assert got.index("b0") < got.index("b1")


def test_rule4_fifo_batch_fills_from_one_group_first(client: Client) -> None:
    q = client.create_queue("fill.fifo", content_based_dedup=True)
    for i in range(4):
        for group in "ABC":
            q.send(f"{group}{i}", group_id=group)
    got = [m.text for m in q.receive(6)]
    # as on SQS: as many of one group as there are, in order, before the next group
    assert got == ["A0", "A1", "A2", "A3", "B0", "B1"]
    # A and B have messages in flight: B2 and B3 wait behind them; C is free
    assert [m.text for m in q.receive(10)] == ["C0", "C1", "C2", "C3"]


def test_rule4_fifo_groups_take_turns_as_they_open(client: Client, clock: ManualClock) -> None:
    """As on SQS: a group whose messages came back (their visibility timeout ended or was
    changed) waits behind the groups that were waiting meanwhile, and serves the visible
    messages at its head while later ones are still in flight."""
    q = client.create_queue("turns.fifo", visibility_timeout=30, content_based_dedup=True)
    for body in ("1-a", "2-a", "2-b", "3-a", "1-b"):
        q.send(body, group_id=body[0])
    clock.advance(1)
    got = q.receive(3, visibility_timeout=0)  # back at once: behind group 3, which waited
    assert [m.text for m in got] == ["1-a", "1-b", "2-a"]
    assert [m.text for m in q.receive(10, visibility_timeout=0)] == [
        *("3-a", "1-a", "1-b", "2-a", "2-b")
    ]

    q = client.create_queue("back.fifo", visibility_timeout=30, content_based_dedup=True)
    for body in ("1-a", "1-b", "2-a"):
        q.send(body, group_id=body[0])
    clock.advance(1)
    first, _ = q.receive(2)
    q.change_visibility(first.receipt or "", 0)
    assert [m.text for m in q.receive(3)] == ["2-a", "1-a"]  # 1-b is still in flight

    q = client.create_queue("expire.fifo", visibility_timeout=1, content_based_dedup=True)
    for body in ("1-a", "1-b", "1-c", "1-d", "2-a", "3-a"):
        q.send(body, group_id=body[0])
    clock.advance(1)
    assert [m.text for m in q.receive(2)] == ["1-a", "1-b"]
    clock.advance(0.25)
    assert [m.text for m in q.receive(1)] == ["2-a"]
    clock.advance(2)  # both timed out: group 1 first, as it came back first
    assert [m.text for m in q.receive(10, visibility_timeout=0)] == [
        *("3-a", "1-a", "1-b", "1-c", "1-d", "2-a")
    ]


def test_rule4_fifo_groups_behind_many_held_back_are_found(
    client: Client, clock: ManualClock
) -> None:
    """A receive walks past hundreds of held groups, and past hundreds of messages it moves
    to the dead-letter queue on its way, to the free groups behind them."""
    q = fifo_with_dlq(client, "deep", visibility_timeout=3600)

    def send(prefix: str, groups: int) -> None:
        for start in range(0, groups, 10):
            q.send_batch(
                [
                    SendEntry(entry_id=str(g), body=f"{prefix}{g}", group_id=f"{prefix}{g}")
                    for g in range(start, min(start + 10, groups))
                ]
            )

    # past the pages of a walk (64, 128, 256, ...); fewer through moto, where each costs more
    held, dead = (40, 60) if client.backend.scheme == "dynamodb" else (400, 600)
    send("h", held)
    got = [m for _ in range(held // 10) for m in q.receive(10)]
    assert sorted(m.text for m in got) == sorted(f"h{g}" for g in range(held))
    send("d", dead)
    once = [m for _ in range(dead // 10) for m in q.receive(10, visibility_timeout=1)]
    assert len(once) == dead  # received once: moved when they are next found visible
    send("n", 5)
    clock.advance(2)
    assert [m.text for m in q.receive(10)] == [f"n{g}" for g in range(5)]
    if client.backend.scheme != "dynamodb":  # which releases 50 due messages a receive
        assert client.queue("deep-dlq.fifo").stats().total == dead  # all it walked past
    assert q.receive(10) == []  # the rest held back or moved
    assert client.queue("deep-dlq.fifo").stats().total == dead


def test_rule5_duplicate_id_changes_nothing(client: Client) -> None:
    needs(client, Capability.SENDER_IDS)
    q = client.create_queue("r5")
    first = q.send("original", id="order-1")
    again = q.send("changed", id="order-1")
    assert (first.duplicate, again.duplicate, again.id) == (False, True, "order-1")
    [m] = q.receive(10)
    assert m.text == "original"
    assert q.stats().total == 1
    if has(client, Capability.TOTALS):
        assert q.stats().sent == 1


def test_rule5_fifo_dedup_window(client: Client, clock: ManualClock) -> None:
    needs(client, Capability.DUPLICATE_REPORT)
    q = client.create_queue("r5.fifo")
    a = q.send("one", group_id="g", dedup_id="d1")
    b = q.send("two", group_id="g", dedup_id="d1")
    assert b.duplicate and b.id == a.id
    clock.advance(301)
    c = q.send("three", group_id="g", dedup_id="d1")
    assert not c.duplicate and c.id != a.id


def test_rule5_content_based_dedup(client: Client, clock: ManualClock) -> None:
    needs(client, Capability.DUPLICATE_REPORT)
    q = client.create_queue("cbd.fifo", content_based_dedup=True)
    a = q.send("same", group_id="g")
    b = q.send("same", group_id="g2")
    assert b.duplicate and b.id == a.id
    assert not q.send("other", group_id="g").duplicate
    clock.advance(300)
    assert not q.send("same", group_id="g").duplicate


def test_rule5_dedup_per_group(client: Client, clock: ManualClock) -> None:
    needs(client, Capability.DUPLICATE_REPORT)
    q = client.create_queue("dpg.fifo", dedup_per_group=True, content_based_dedup=True)
    a = q.send("one", group_id="g1", dedup_id="d1")
    assert not q.send("one", group_id="g2", dedup_id="d1").duplicate  # another group
    again = q.send("two", group_id="g1", dedup_id="d1")
    assert again.duplicate and again.id == a.id
    assert not q.send("same", group_id="g1").duplicate
    assert not q.send("same", group_id="g2").duplicate  # by body, also per group
    assert q.send("same", group_id="g2").duplicate
    assert q.stats().total == 4
    # a message shows its own de-duplication id (or, by body, the body's SHA-256), not the
    # key the queue scopes to its group
    shown = {(m.group_id, m.dedup_id) for m in q.peek(10)}
    digest = hashlib.sha256(b"same").hexdigest()
    assert shown == {("g1", "d1"), ("g2", "d1"), ("g1", digest), ("g2", digest)}
    with pytest.raises(InvalidAttribute):
        client.create_queue("dpg-standard", dedup_per_group=True)


def test_rule7_delay(client: Client, clock: ManualClock) -> None:
    q = client.create_queue("r7", delay=10)
    q.send("queue-delay")
    q.send("own-delay", delay=3)
    q.send("no-delay", delay=0)
    assert [m.text for m in q.receive(10)] == ["no-delay"]
    clock.advance(3)
    assert [m.text for m in q.receive(10)] == ["own-delay"]
    clock.advance(6.9)
    assert q.receive(10) == []
    clock.advance(0.1)
    [m] = q.receive(10)
    assert m.text == "queue-delay" and m.sent_at + 10 == pytest.approx(clock.now())


def test_sdk_batches_past_ten_split_into_the_store_s_own(client: Client) -> None:
    """gq's producers push and its consumers pop batches of any size: the SDK sends,
    receives, deletes and changes up to 10,000 at once, in parts the store takes (ten a
    request through the SQS API)."""
    q = client.create_queue("big", visibility_timeout=60)
    limit = client.backend.batch_limit
    # past 1,000 where a store takes hundreds at once; else (DynamoDB on its emulator, a
    # claim a request) past two of its parts
    n = 1050 if limit >= 100 else 2 * limit + 5
    sent = q.send_batch([f"m{i}" for i in range(n)])
    assert [r.entry_id for r in sent] == [str(i) for i in range(n)]
    assert all(r.error is None for r in sent)
    got = q.receive(n - 5)
    assert len(got) == n - 5 and len({m.id for m in got}) == n - 5
    assert {m.text for m in got} <= {f"m{i}" for i in range(n)}
    done = q.delete_batch([m.receipt or "" for m in got])
    assert len(done) == n - 5 and all(r.error is None for r in done)
    rest = q.receive(n)
    assert len(rest) == 5
    changed = q.change_visibility_batch({f"e{i}": (m.receipt or "", 0) for i, m in enumerate(rest)})
    assert all(r.error is None for r in changed)
    assert q.stats().ready == 5


def test_rule11_concurrent_receivers_never_share(client: Client) -> None:
    q = client.create_queue("r11", visibility_timeout=600)
    total = scaled(client, 420)
    for start in range(0, total, 10):
        q.send_batch([SendEntry(entry_id=str(i), body=str(start + i)) for i in range(10)])
    got: list[str] = []
    lock = threading.Lock()

    def drain() -> None:
        while batch := q.receive(5):
            with lock:
                got.extend(m.id for m in batch)

    threads = [threading.Thread(target=drain) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == total and len(set(got)) == total


def test_long_poll_returns_when_a_message_arrives(client: Client) -> None:
    q = client.create_queue("lp")
    q.send("now")
    [m] = q.receive(wait=20)
    assert m.text == "now"


def test_long_poll_with_manual_clock_sees_delayed_message(
    client: Client, clock: ManualClock
) -> None:
    q = client.create_queue("lp2")
    q.send("soon", delay=2)
    start = clock.now()
    [m] = q.receive(wait=5)
    assert m.text == "soon"
    assert 2 <= clock.now() - start < 3
    start = clock.now()
    assert q.receive(wait=4) == []
    assert clock.now() - start == pytest.approx(4)


def test_bodies_attributes_and_json(client: Client) -> None:
    needs(client, Capability.BINARY_BODIES)
    q = client.create_queue("bodies")
    q.send(b"\x00\xffbin", attributes={"s": "v", "n": 3, "f": 1.5, "b": b"\x01"})
    q.send_json({"k": [1, 2]})
    a, b = q.receive(10)
    assert a.body == b"\x00\xffbin"
    assert dict(a.attributes) == {"s": "v", "n": 3, "f": 1.5, "b": b"\x01"}
    assert b.json() == {"k": [1, 2]}


def test_rule11_concurrent_sends_and_receives_strand_nothing(
    client: Client, clock: ManualClock
) -> None:
    """One producer and four consumers at once, the clock moving on between sends: every
    message is received exactly once, and the queue ends empty (a receive that read the time
    before a concurrent send scheduled its message must not drop that message)."""
    q = client.create_queue("stress", visibility_timeout=3600)
    total = scaled(client, 600)
    sent: list[str] = []
    done = threading.Event()
    got: list[str] = []
    lock = threading.Lock()

    def produce() -> None:
        for start in range(0, total, 10):
            clock.advance(0.001)
            results = q.send_batch([f"m{start + i}" for i in range(10)])
            sent.extend(r.result.id for r in results if r.result is not None)
        done.set()

    def consume() -> None:
        empty = 0
        while empty < 3:  # three empty receives after the producer is done
            batch = q.receive(10, wait=0)
            if not batch:
                empty = empty + 1 if done.is_set() else 0
                continue
            with lock:
                got.extend(m.id for m in batch)
            assert all(r.ok for r in q.delete_batch([m.receipt or "" for m in batch]))

    threads = [threading.Thread(target=produce)] + [
        threading.Thread(target=consume) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(sent) == total
    assert sorted(got) == sorted(sent)  # each exactly once
    stats = q.stats()
    assert (stats.ready, stats.delayed, stats.in_flight) == (0, 0, 0)
    assert q.receive(10, wait=0) == []
