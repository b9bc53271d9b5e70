"""Rule 10 (fan-out) and the consumer registry."""

from __future__ import annotations

import pytest

from conveyor import (
    Client,
    InvalidInput,
    ManualClock,
    NotFound,
    QueueDoesNotExist,
    TopicDoesNotExist,
)
from conveyor.models import Capability as Capability
from conveyor.sends import SendEntry

from .conftest import needs


def test_rule10_publish_reaches_every_subscriber(client: Client) -> None:
    needs(client, Capability.TOPICS)
    client.create_queue("q1")
    client.create_queue("q2")
    client.create_queue("q3")
    assert client.create_topic("events") is True
    assert client.create_topic("events") is False
    client.subscribe("events", "q1")
    client.subscribe("events", "q2")
    client.subscribe("events", "q2")
    assert client.topic_queues("events") == ["q1", "q2"]
    out = client.publish("events", "hello", attributes={"kind": "greeting"})
    assert set(out) == {"q1", "q2"}
    for name in ("q1", "q2"):
        [m] = client.queue(name).receive()
        assert m.text == "hello" and m.id == out[name].id
    assert client.queue("q3").receive() == []
    client.unsubscribe("events", "q1")
    assert client.topic_queues("events") == ["q2"]


def test_rule10_all_or_nothing(client: Client) -> None:
    needs(client, Capability.TOPICS)
    client.create_queue("big", max_message_bytes=4096)
    client.create_queue("small", max_message_bytes=1024)
    client.create_topic("t")
    client.subscribe("t", "big")
    client.subscribe("t", "small")
    with pytest.raises(Exception, match="at most 1024"):
        client.publish("t", "x" * 2000)
    assert client.queue("big").stats().total == 0


def test_topic_errors_and_deletion(client: Client) -> None:
    needs(client, Capability.TOPICS)
    with pytest.raises(TopicDoesNotExist):
        client.publish("missing", "x")
    client.create_topic("t")
    with pytest.raises(QueueDoesNotExist):
        client.subscribe("t", "nope")
    client.create_queue("q")
    client.subscribe("t", "q")
    client.delete_queue("q")
    assert client.topic_queues("t") == []
    client.delete_topic("t")
    assert client.list_topics() == []


def test_topic_settings_and_subscription_attributes(client: Client) -> None:
    needs(client, Capability.TOPICS)
    client.create_queue("a")
    client.create_queue("b")
    client.create_topic("t")
    assert client.topic_settings("t") == {}
    assert client.update_topic_settings("t", {"DisplayName": "T", "x": "1"}) == {
        "DisplayName": "T",
        "x": "1",
    }
    assert client.update_topic_settings("t", {"x": None, "y": "2"}) == {
        "DisplayName": "T",
        "y": "2",
    }
    assert client.topic_settings("t") == {"DisplayName": "T", "y": "2"}
    with pytest.raises(TopicDoesNotExist):
        client.update_topic_settings("missing", {"a": "b"})
    with pytest.raises(TopicDoesNotExist):
        client.topic_settings("missing")

    client.subscribe("t", "a", {"RawMessageDelivery": "true"})
    client.subscribe("t", "b")
    client.subscribe("t", "a")  # again without attributes: they stay
    assert client.subscriptions("t") == {"a": {"RawMessageDelivery": "true"}, "b": {}}
    assert client.update_subscription("t", "b", {"FilterPolicy": '{"k": ["v"]}'}) == {
        "FilterPolicy": '{"k": ["v"]}'
    }
    assert client.update_subscription("t", "a", {"RawMessageDelivery": None}) == {}
    with pytest.raises(NotFound, match="not subscribed"):
        client.update_subscription("t", "missing", {"a": "b"})
    client.subscribe("t", "a", {"k": "v"})  # with attributes: they replace the old
    assert client.subscriptions("t")["a"] == {"k": "v"}

    client.unsubscribe("t", "a")
    client.subscribe("t", "a")
    assert client.subscriptions("t")["a"] == {}, "a new subscription starts bare"
    client.delete_queue("b")
    client.create_queue("b")
    client.subscribe("t", "b")
    assert client.subscriptions("t")["b"] == {}, "a deleted queue's subscription is gone"
    client.delete_topic("t")
    client.create_topic("t")
    assert client.topic_settings("t") == {} and client.subscriptions("t") == {}


def test_publish_copies_route_each_queue(client: Client) -> None:
    needs(client, Capability.TOPICS)
    client.create_queue("raw", max_message_bytes=1024)
    for name in ("wrapped", "filtered", "late"):
        client.create_queue(name)
    client.create_topic("t")
    for name in ("raw", "wrapped", "filtered"):
        client.subscribe("t", name)
    raw = SendEntry(entry_id="0", body="plain", attributes={"k": "v"})
    wrapped = SendEntry(entry_id="0", body='{"Message": "plain"}')
    out = client.publish_copies("t", {"raw": raw, "wrapped": wrapped, "late": raw})
    assert set(out) == {"raw", "wrapped"}, "only subscribed queues the copies name"
    assert out["raw"].id == out["wrapped"].id
    [m] = client.queue("raw").receive()
    assert m.text == "plain" and m.attributes == {"k": "v"} and m.id == out["raw"].id
    [m] = client.queue("wrapped").receive()
    assert m.text == '{"Message": "plain"}' and m.attributes == {}
    assert client.queue("filtered").receive() == []
    assert client.queue("late").receive() == []
    with pytest.raises(InvalidInput, match="at most 1024"):
        client.publish_copies(
            "t", {"wrapped": wrapped, "raw": SendEntry(entry_id="0", body="x" * 2000)}
        )
    assert client.queue("wrapped").stats().total == 1, "one copy refused: none sent"


def test_consumers_register_heartbeat_and_expire(client: Client, clock: ManualClock) -> None:
    needs(client, Capability.CONSUMERS)
    a = client.register_consumer("a", queue="jobs", timeout=10, info={"host": "h1"})
    client.register_consumer("b", queue="jobs", timeout=10)
    client.register_consumer("c", queue="other", timeout=10)
    assert [c.id for c in client.list_consumers("jobs")] == ["a", "b"]
    assert a.info == {"host": "h1"}
    clock.advance(8)
    client.heartbeat("a")
    clock.advance(8)
    assert [c.id for c in client.list_consumers()] == ["a"]
    with pytest.raises(NotFound, match="pruned"):
        client.heartbeat("b")
    client.register_consumer("b", queue="jobs", timeout=10)
    assert {c.id for c in client.list_consumers("jobs")} == {"a", "b"}
    client.unregister_consumer("a")
    assert [c.id for c in client.list_consumers("jobs")] == ["b"]


def test_every_copy_of_a_publish_shares_one_id(client: Client) -> None:
    needs(client, Capability.TOPICS)
    client.create_topic("shared")
    for name in ("p1", "p2", "p3"):
        client.create_queue(name)
        client.subscribe("shared", name)
    out = client.publish("shared", "hello")
    ids = {result.id for result in out.values()}
    assert len(ids) == 1
    for name in ("p1", "p2", "p3"):
        [m] = client.queue(name).receive()
        assert m.id in ids


def test_publish_is_checked_as_a_send_to_each_subscriber(client: Client) -> None:
    """A FIFO queue refuses a message without a group, from a topic as from a sender: and
    then no subscriber gets it."""
    needs(client, Capability.TOPICS, Capability.FIFO)
    client.create_queue("plain")
    client.create_queue("orders.fifo", content_based_dedup=True)
    client.create_topic("t")
    client.subscribe("t", "plain")
    client.subscribe("t", "orders.fifo")
    with pytest.raises(InvalidInput, match="group_id"):
        client.publish("t", "no group")
    assert client.queue("plain").stats().total == 0
    assert client.queue("orders.fifo").stats().total == 0
    out = client.publish("t", "grouped", group_id="g1")
    [m] = client.queue("orders.fifo").receive()
    assert m.group_id == "g1" and m.id == out["orders.fifo"].id


def test_long_and_namespaced_topic_names(client: Client) -> None:
    needs(client, Capability.TOPICS)
    name = "eu-central-1:123456789012:" + "t" * 256  # SNS's longest, in another region
    client.create_queue("q")
    assert client.create_topic(name) is True
    client.subscribe(name, "q", {"RawMessageDelivery": "true"})
    client.update_topic_settings(name, {"DisplayName": "long"})
    assert client.list_topics("eu-central-1:") == [name]
    assert set(client.publish(name, "x")) == {"q"}
    assert client.subscriptions(name) == {"q": {"RawMessageDelivery": "true"}}
    with pytest.raises(InvalidInput):
        client.create_topic("t" * 257)
