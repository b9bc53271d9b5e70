"""Rules 8 and 9: retention, at-most-once delivery and deadlines; archive."""

from __future__ import annotations

from conveyor import Client, DeadLetterPolicy, Delivery, ManualClock, SendEntry
from conveyor.backends.rules import SWEEP_ROWS
from conveyor.backends.sql.store import SQLStore
from conveyor.models import Capability as Capability

from .conftest import has, needs


def test_rule8_retention(client: Client, clock: ManualClock) -> None:
    q = client.create_queue("ret", retention=120)
    q.send("old")
    clock.advance(60)
    q.send("young")
    clock.advance(61)
    assert [m.text for m in q.receive(10)] == ["young"]
    if Capability.TOTALS in client.capabilities:
        assert q.stats().expired == 1


def test_stats_never_count_an_expired_message(client: Client, clock: ManualClock) -> None:
    """A message past retention behind a long head of younger ones (sent later at a higher
    priority) is out of the counts at once, whether or not a sweep has reached it yet (the
    SQL stores' sweeps before stats clear SWEEP_ROWS of a queue's head at a time)."""
    needs(client, Capability.PRIORITY)
    q = client.create_queue("behind", retention=60)
    q.send("old")
    clock.advance(50)
    n = SWEEP_ROWS + 10 if isinstance(client.backend, SQLStore) else 10
    young = [SendEntry(entry_id=str(i % 10), body=f"y{i}", priority=5) for i in range(n)]
    for i in range(0, len(young), 10):
        q.send_batch(young[i : i + 10])
    clock.advance(20)
    stats = q.stats()
    assert (stats.ready, stats.total) == (n, n)
    assert stats.oldest_age == 20
    got = q.receive(10)
    assert got and all(m.text.startswith("y") for m in got)


def test_rule9_at_most_once_never_redelivers(client: Client, clock: ManualClock) -> None:
    needs(client, Capability.AT_MOST_ONCE)
    q = client.create_queue("amo", delivery=Delivery.AT_MOST_ONCE, visibility_timeout=1)
    q.send("once")
    [m] = q.receive()
    clock.advance(3600)
    assert q.receive() == []
    q.delete(m.receipt or "")
    assert q.stats().total == 0


def test_rule9_deadline_passed_is_never_delivered(client: Client, clock: ManualClock) -> None:
    """At most once (gq's document): a message past its deadline is failed, never
    delivered; stats count it as expired."""
    needs(client, Capability.AT_MOST_ONCE)
    q = client.create_queue("dl-amo", delivery=Delivery.AT_MOST_ONCE, visibility_timeout=5)
    q.send("late", deadline=clock.now() + 10, delay=10)
    q.send("fine", deadline=clock.now() + 100)
    q.send("no-deadline")
    clock.advance(10)
    got = sorted(m.text for m in q.receive(10))
    assert got == ["fine", "no-deadline"]
    assert q.stats().total == 2  # the late one is gone
    if has(client, Capability.TOTALS):
        assert q.stats().expired == 1


def test_at_least_once_deadlines_end_claims_and_expire_nothing(
    client: Client, clock: ManualClock
) -> None:
    """At least once (gq's document): a message whose deadline passes while it is consumed
    may be claimed by another consumer; a deadline drops nothing."""
    needs(client, Capability.AT_MOST_ONCE)
    for walks in (False, True):  # a plain claim, and one that walks the head
        name = "dl-alo-walk" if walks else "dl-alo"
        if walks:
            client.create_queue(f"{name}-dlq")
        q = client.create_queue(
            name,
            visibility_timeout=60,
            dead_letter=DeadLetterPolicy(queue=f"{name}-dlq", max_receive_count=10)
            if walks
            else None,
        )
        start = clock.now()
        q.send("a", deadline=start + 10)
        q.send("b", deadline=start + 1)
        q.send("c")
        first = {m.text: m for m in q.receive(10)}
        assert set(first) == {"a", "b", "c"}
        assert first["a"].visible_at == start + 10  # its claim ends at its deadline
        assert first["b"].visible_at == start + 1
        assert first["c"].visible_at == start + 60
        clock.advance(2)
        [b] = q.receive(10)  # taken by another consumer once its deadline passed
        assert (b.text, b.receive_count, b.visible_at) == ("b", 2, clock.now() + 60)
        clock.advance(9)
        [a] = q.receive(10)
        assert (a.text, a.receive_count) == ("a", 2)
        assert q.stats().total == 3  # nothing expired
        if has(client, Capability.TOTALS):
            assert q.stats().expired == 0
        clock.advance(100)  # past every deadline: still delivered, at least once
        assert sorted(m.text for m in q.receive(10)) == ["a", "b", "c"]


def test_archive_keeps_deleted_messages(client: Client, clock: ManualClock) -> None:
    needs(client, Capability.ARCHIVE)
    q = client.create_queue("arch", archive=True, retention=60)
    q.send("kept")
    q.send("expires")
    clock.advance(2)
    [m] = q.receive()
    clock.advance(3)
    q.delete(m.receipt or "")
    clock.advance(60)
    q.stats()
    archived = q.archive()
    assert [(a.outcome, a.body) for a in archived] == [
        ("deleted", b"kept"),
        ("expired", b"expires"),
    ]
    kept = archived[0]
    assert kept.first_received_at is not None
    assert kept.removed_at - kept.sent_at == 5


def test_at_most_once_given_as_text(client: Client, clock: ManualClock) -> None:
    needs(client, Capability.AT_MOST_ONCE)
    q = client.create_queue("amo-text", delivery="at-most-once", visibility_timeout=1)
    assert q.attributes.delivery is Delivery.AT_MOST_ONCE
    q.send("once")
    assert [m.text for m in q.receive()] == ["once"]
    clock.advance(3600)
    assert q.receive() == []
    other = client.create_queue("amo-later")
    other.set_attributes(delivery="at-most-once")
    other.send("once too")
    assert len(other.receive()) == 1
    clock.advance(3600)
    assert other.receive() == []
