"""Queue operations: create (idempotent), delete, list, attributes, purge, stats."""

from __future__ import annotations

import pytest

from conveyor import (
    Client,
    DeadLetterPolicy,
    InvalidAttribute,
    ManualClock,
    QueueDoesNotExist,
    QueueExists,
)
from conveyor.models import Capability as Capability

from .conftest import needs


def test_create_is_idempotent_with_equal_attributes(client: Client) -> None:
    client.create_queue("jobs", visibility_timeout=5)
    client.create_queue("jobs", visibility_timeout=5)
    assert client.list_queues() == ["jobs"]
    with pytest.raises(QueueExists, match="different attributes"):
        client.create_queue("jobs", visibility_timeout=6)


def test_list_by_prefix_and_delete(client: Client) -> None:
    for name in ("a-1", "a-2", "b-1"):
        client.create_queue(name)
    assert client.list_queues("a-") == ["a-1", "a-2"]
    client.delete_queue("a-1")
    assert client.list_queues() == ["a-2", "b-1"]
    with pytest.raises(QueueDoesNotExist):
        client.delete_queue("a-1")
    with pytest.raises(QueueDoesNotExist):
        client.queue("a-1").send("x")


def test_deleted_queue_leaves_no_messages_behind(client: Client) -> None:
    q = client.create_queue("gone")
    q.send("one")
    client.delete_queue("gone")
    q = client.create_queue("gone")
    assert q.receive(10) == []
    assert q.stats().sent == 0


def test_attributes_roundtrip_and_set(client: Client) -> None:
    needs(client, Capability.ARCHIVE)
    client.create_queue("dlq")
    q = client.create_queue(
        "work",
        visibility_timeout=12.5,
        delay=3,
        retention=3600,
        max_message_bytes=2048,
        receive_wait=2,
        dead_letter=DeadLetterPolicy(queue="dlq", max_receive_count=4),
        archive=True,
    )
    attrs = q.attributes
    assert attrs.visibility_timeout == 12.5
    assert attrs.dead_letter == DeadLetterPolicy(queue="dlq", max_receive_count=4)
    assert attrs.archive is True
    updated = q.set_attributes(visibility_timeout=60, delay=0)
    assert updated.visibility_timeout == 60
    assert client.queue_info("work", fresh=True).attributes.delay == 0
    with pytest.raises(InvalidAttribute, match="between 0 and 43200"):
        q.set_attributes(visibility_timeout=50000)
    assert q.attributes.visibility_timeout == 60


def test_purge_removes_everything(client: Client) -> None:
    q = client.create_queue("p")
    for i in range(25):
        q.send(f"m{i}")
    q.receive(3)
    assert q.purge() == 25
    assert q.stats().total == 0


def test_stats_count_by_state(client: Client, clock: ManualClock) -> None:
    needs(client, Capability.TOTALS)
    q = client.create_queue("s", visibility_timeout=30)
    for i in range(5):
        q.send(f"m{i}")
    q.send("later", delay=60)
    received = q.receive(2)
    clock.advance(10)
    st = q.stats()
    assert (st.ready, st.delayed, st.in_flight) == (3, 1, 2)
    assert (st.sent, st.received, st.deleted) == (6, 2, 0)
    assert st.oldest_age == pytest.approx(10)
    q.delete(received[0].receipt or "")
    assert q.stats().deleted == 1
