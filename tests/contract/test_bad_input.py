"""Rule 12: bad input gets a typed error saying what to fix, and nothing is partly written."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest

from conveyor import (
    Client,
    ConveyorError,
    DeadLetterPolicy,
    InvalidAttribute,
    InvalidInput,
    InvalidName,
    ManualClock,
    MessageTooLong,
    Send,
    SendEntry,
)
from conveyor.backends.base import Backend
from conveyor.exceptions import (
    BatchEntryIdsNotDistinct,
    EmptyBatch,
    InvalidBatchEntryId,
    TooManyEntries,
)
from conveyor.models import Capability

from .conftest import has


@pytest.mark.parametrize("name", ["", "has space", "x" * 81, "bad/slash", "ünï", "a.fifo.x"])
def test_bad_queue_names(client: Client, name: str) -> None:
    with pytest.raises(InvalidName, match="A-Z"):
        client.create_queue(name)
    assert client.list_queues() == []


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"visibility_timeout": -1}, "visibility_timeout"),
        ({"visibility_timeout": 43201}, "visibility_timeout"),
        ({"delay": 901}, "delay"),
        ({"retention": 59}, "retention"),
        ({"retention": 14 * 86400 + 1}, "retention"),
        ({"max_message_bytes": 1023}, "max_message_bytes"),
        ({"receive_wait": 21}, "receive_wait"),
        ({"fifo": True}, "FIFO"),
        ({"content_based_dedup": True}, "FIFO"),
        ({"dead_letter": DeadLetterPolicy(queue="q", max_receive_count=1)}, "own dead-letter"),
        ({"dead_letter": DeadLetterPolicy(queue="d", max_receive_count=0)}, "1 and 1000"),
        ({"rate_limit": 0}, "rate_limit"),
        ({"visibility_timeout": "soon"}, "must be a number"),
    ],
)
def test_bad_attributes(client: Client, options: dict[str, Any], fragment: str) -> None:
    with pytest.raises(InvalidAttribute, match=fragment):
        client.create_queue("q", **options)
    assert client.list_queues() == []


def test_unknown_attribute(client: Client) -> None:
    with pytest.raises(InvalidInput, match="unknown queue attribute"):
        client.create_queue("q", colour="blue")


def test_bad_messages(client: Client) -> None:
    q = client.create_queue("q", max_message_bytes=1024)
    with pytest.raises(MessageTooLong, match="at most 1024"):
        q.send("x" * 1025)
    with pytest.raises(InvalidInput, match="empty"):
        q.send("")
    with pytest.raises(InvalidInput, match="str or bytes"):
        q.send(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="delay"):
        q.send("x", delay=901)
    with pytest.raises(InvalidInput, match="at most 10 attributes"):
        q.send("x", attributes={f"a{i}": "v" for i in range(11)})
    with pytest.raises(InvalidInput, match="reserved"):
        q.send("x", attributes={"AWS.trace": "v"})
    with pytest.raises(InvalidInput, match="message id"):
        q.send("x", id="has space")
    for priority in (2**40, 32768, -32769, -(2**31)):
        with pytest.raises(InvalidInput, match="priority must be a whole number from -32768 to"):
            q.send("x", priority=priority)
    assert q.stats().total == 0


def test_priorities_at_the_ends_of_their_range(client: Client) -> None:
    """-32768 and 32767, the range every store orders by, are kept and listed in order."""
    if not has(client, Capability.PRIORITY):
        pytest.skip("the store lacks priority")
    q = client.create_queue("ends")
    q.send("lowest", priority=-32768)
    q.send("plain")
    q.send("highest", priority=32767)
    assert [m.text for m in q.peek(10)] == ["highest", "plain", "lowest"]
    assert [m.priority for m in q.receive(10)] == [32767, 0, -32768]


def test_bad_receive_arguments(client: Client) -> None:
    q = client.create_queue("q")
    for kwargs in (
        {"max_messages": 0},
        {"max_messages": 10_001},  # the SDK takes 10,000 (gq's batches), the SQS API 10
        {"max_messages": True},
        {"visibility_timeout": -1},
        {"wait": 21},
    ):
        with pytest.raises(InvalidInput):
            q.receive(**kwargs)


def test_fifo_send_rules(client: Client) -> None:
    q = client.create_queue("q.fifo")
    with pytest.raises(InvalidInput, match="group_id"):
        q.send("x", dedup_id="d")
    with pytest.raises(InvalidInput, match="dedup_id"):
        q.send("x", group_id="g")
    with pytest.raises(InvalidInput, match="per-message delay"):
        q.send("x", group_id="g", dedup_id="d", delay=1)
    assert q.stats().total == 0


def test_batch_shape_errors(client: Client) -> None:
    q = client.create_queue("q")
    with pytest.raises(EmptyBatch):
        q.send_batch([])
    with pytest.raises(TooManyEntries):
        q.send_batch([str(i) for i in range(10_001)])
    with pytest.raises(TooManyEntries):
        q.delete_batch(["r"] * 10_001)
    with pytest.raises(BatchEntryIdsNotDistinct):
        q.send_batch([SendEntry(entry_id="a", body="1"), SendEntry(entry_id="a", body="2")])
    with pytest.raises(InvalidBatchEntryId):
        q.send_batch([SendEntry(entry_id="no spaces", body="1")])
    with pytest.raises(BatchEntryIdsNotDistinct):  # a bare body's entry id is its index
        q.send_batch([SendEntry(entry_id="1", body="1"), "2"])
    with pytest.raises(InvalidInput, match="not one body"):
        q.send_batch("abc")
    with pytest.raises(InvalidInput, match="not one string"):
        q.delete_batch("abc")
    assert q.stats().total == 0


def test_a_send_is_checked_once_into_a_value_then_sent_all_or_nothing(client: Client) -> None:
    q = client.create_queue("q", max_message_bytes=1024)
    with pytest.raises(MessageTooLong):  # checked as it is built, before anything is sent
        q.sending(["a", "x" * 2000])
    with pytest.raises(EmptyBatch):
        q.sending([])
    with pytest.raises(TooManyEntries):
        q.sending(["m"] * 11)
    with pytest.raises(InvalidInput, match="not one body"):
        q.sending("abc")
    bad: list[Any] = [b"ok", 42]
    with pytest.raises(InvalidInput, match="must be str or bytes"):  # a typed error, no len()
        q.sending(bad)
    assert q.send_batch(bad)[1].error is not None and q.stats().total == 1
    q.purge()
    assert len(q.sending(["m"] * 11, most=None)) == 11  # a job's part: any number
    assert q.stats().total == 0
    op = q.sending([SendEntry(entry_id="0", body="a", priority=0), b"b", "c"])
    assert op.bodies is None and len(op.messages) == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        op.delay = 1.0  # type: ignore[misc]
    sent = q.run_send(op).results
    got = {m.id: m.text for m in q.receive(10)}
    assert [got[r.id] for r in sent] == ["a", "b", "c"] and not any(r.duplicate for r in sent)


def test_a_send_of_bare_bodies_goes_to_the_store_as_they_are(
    client: Client, clock: ManualClock
) -> None:
    q = client.create_queue("q", max_message_bytes=1024, delay=5)
    refusals: list[tuple[list[bytes], type[Exception], str]] = [
        ([b"a", b""], InvalidInput, "must not be empty"),
        ([b"a", b"x" * 2000], MessageTooLong, "at most 1024"),
        ([], EmptyBatch, "at least one"),
        ([b"m"] * 11, TooManyEntries, "at most 10"),
    ]
    for bad, error, says in refusals:
        with pytest.raises(error, match=says):
            q.sending(bad)
    assert q.stats().total == 0
    op = q.sending([b"a", "\u00e9".encode(), b"c"])
    assert op.bodies == (b"a", "\u00e9".encode(), b"c") and op.delay == 5
    done = q.run_send(op)
    assert [r.id for r in done.results] == done.ids and not any(r.duplicate for r in done.results)
    ids = list(done.ids)
    # the store's own path and the contract's default (built on `send`) agree
    ids += Backend.send_bodies(client.backend, "q", [b"d"], 5.0)
    assert len(set(ids)) == 4
    assert q.receive(10) == []  # the queue's delay applies
    assert (q.stats().delayed, q.stats().ready) == (4, 0)
    clock.advance(5)
    got = {m.id: m for m in q.receive(10)}
    assert [got[i].body for i in ids] == [b"a", "\u00e9".encode(), b"c", b"d"]
    assert all(m.receive_count == 1 and not m.attributes for m in got.values())
    if has(client, Capability.TOTALS):
        assert q.stats().sent == 4
    # bare sends gathered together stay bare; a send of messages among them makes them all so
    bare = Send.joined([q.sending([b"x"]), q.sending([b"y", b"z"])])
    assert bare.bodies == (b"x", b"y", b"z")
    mixed = Send.joined(
        [q.sending([b"x"]), q.sending([SendEntry(entry_id="0", body="t", delay=0)])]
    )
    assert mixed.bodies is None and [m.body for m in mixed.messages] == [b"x", b"t"]
    assert [m.delay for m in mixed.messages] == [5, 0]
    fifo = client.create_queue("f.fifo", fifo=True)
    with pytest.raises(InvalidInput, match="group"):  # what a FIFO queue needs is said
        fifo.sending([b"a"])
    assert fifo.stats().total == 0


def test_a_batch_of_bare_bodies_goes_to_the_store_in_one_call_as_they_are(
    client: Client, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`send_batch` of bodies alone on a standard queue hands them to the store as they
    are, in one `send_bodies` call (str bodies encoded), and `send` of a body alone too;
    the queue's delay applies and the results carry the ids in entry order."""
    q = client.create_queue("q", delay=5)
    backend = client.backend
    calls: list[tuple[str, tuple[bytes, ...], float]] = []
    real = backend.send_bodies

    def spy(queue: str, bodies: Sequence[bytes], delay: float) -> list[str]:
        calls.append((queue, tuple(bodies), delay))
        return real(queue, bodies, delay)

    monkeypatch.setattr(backend, "send_bodies", spy)
    results = q.send_batch(["\u00e9", b"b", "c"])
    assert calls == [("q", ("\u00e9".encode(), b"b", b"c"), 5.0)]
    assert [r.entry_id for r in results] == ["0", "1", "2"] and all(r.ok for r in results)
    one = q.send("d")  # a single body likewise
    assert calls[1:] == [("q", (b"d",), 5.0)] and not one.duplicate
    assert q.receive(10) == []
    clock.advance(5)
    got = {m.id: m.text for m in q.receive(10)}
    assert [got[r.result.id] for r in results if r.result] == ["\u00e9", "b", "c"]
    assert got[one.id] == "d"


def test_batch_reports_per_entry(client: Client) -> None:
    q = client.create_queue("q", max_message_bytes=1024)
    results = q.send_batch(
        [
            SendEntry(entry_id="ok1", body="a"),
            SendEntry(entry_id="big", body="x" * 2000),
            SendEntry(entry_id="ok2", body="b"),
        ]
    )
    assert [r.ok for r in results] == [True, False, True]
    assert isinstance(results[1].error, MessageTooLong)
    assert q.stats().ready == 2
    bare = q.send_batch(iter(["c", "", "x" * 2000]))
    assert [(r.entry_id, r.ok) for r in bare] == [("0", True), ("1", False), ("2", False)]
    assert isinstance(bare[2].error, MessageTooLong)
    msgs = q.receive(10)
    deleted = q.delete_batch({"good": msgs[0].receipt or "", "bad": "forged"})
    assert [(r.entry_id, r.ok) for r in deleted] == [("good", True), ("bad", False)]
    changed = q.change_visibility_batch({"a": (msgs[1].receipt or "", 5), "b": ("x", 99999)})
    assert [r.ok for r in changed] == [True, False]


def test_every_error_is_a_conveyor_error_with_code_and_status(client: Client) -> None:
    q = client.create_queue("q")
    with pytest.raises(ConveyorError) as info:
        q.delete("forged")
    assert info.value.code == "ReceiptHandleIsInvalid" and info.value.status == 400


BAD_NUMBERS = (-1, -(2**31), 2**63, 10**30, 1e20, float("nan"), float("inf"), "5", True)


def test_every_number_is_range_checked_before_the_store(client: Client) -> None:
    """Each number the SDK hands a store (delays, timeouts, deadlines, counts, offsets,
    rates) is checked once at the edge: out of range, not finite, of the wrong type, it is an
    InvalidInput that names the parameter, and nothing is written or changed."""
    q = client.create_queue("q")
    kept = q.send("kept")
    calls: dict[str, Any] = {
        "delay": lambda v: q.send("x", delay=v),
        "deadline": lambda v: q.send("x", deadline=v),
        "max_messages": lambda v: q.receive(max_messages=v),
        "visibility_timeout": lambda v: q.receive(visibility_timeout=v),
        "wait": lambda v: q.receive(wait=v),
    }
    if has(client, Capability.EDIT_IN_PLACE):
        calls |= {
            "limit": lambda v: q.peek(v),
            "after": lambda v: q.peek(10, after=v),
            "visible_at": lambda v: q.update(kept.id, visible_at=v),
            "rate": lambda v: q.redrive_all(rate=v),
        }
        fail = {"delay": lambda v: q.fail(kept.id, delay=v)}
    else:
        fail = {}
    if has(client, Capability.ARCHIVE):
        calls |= {"limit ": lambda v: q.archive(v), "after ": lambda v: q.archive(10, v)}
    for table in (calls, fail):
        for name, call in table.items():
            for value in BAD_NUMBERS:
                with pytest.raises(InvalidInput, match=name.strip()) as caught:
                    call(value)
                assert any(w in str(caught.value) for w in ("from", "between", "up to")), (
                    name,
                    value,
                    caught.value,
                )
    stats = q.stats()
    assert (stats.ready, stats.in_flight, stats.delayed) == (1, 0, 0)
    assert [m.text for m in q.receive(10)] == ["kept"]
