"""Declarative set-up: a TOML file of queues and topics applied, idempotently."""

from __future__ import annotations

from pathlib import Path

import pytest

from conveyor import Client, DeadLetterPolicy, InvalidInput
from conveyor.declare import apply

SETUP = """
[queues.orders]
visibility_timeout = 60
dead_letter = { queue = "orders-dlq", max_receive_count = 5 }
tags = { team = "shop" }

[queues.orders-dlq]
retention = 1209600

[queues."jobs.fifo"]
content_based_dedup = true

[topics.events]
subscribers = ["orders", "jobs.fifo"]
"""


def test_apply_creates_then_updates_then_leaves_alone(tmp_path: Path) -> None:
    path = tmp_path / "conveyor.toml"
    path.write_text(SETUP)
    with Client("memory://") as client:
        first = apply(client, path)
        # the dead-letter queue is made before the queue that names it
        assert first[:3] == [("queue", "orders-dlq", "created"), ("queue", "orders", "created"),
                             ("queue", "jobs.fifo", "created")]  # fmt: skip
        assert first[3] == ("topic", "events", "created: subscribed orders, jobs.fifo")
        attrs = client.queue_info("orders").attributes
        assert attrs.visibility_timeout == 60 and attrs.tags == {"team": "shop"}
        assert attrs.dead_letter == DeadLetterPolicy(queue="orders-dlq", max_receive_count=5)
        assert client.queue_info("jobs.fifo").attributes.fifo
        assert client.topic_queues("events") == ["jobs.fifo", "orders"]
        assert {r for _, _, r in apply(client, path)} == {"unchanged"}
        path.write_text(SETUP.replace("visibility_timeout = 60", "visibility_timeout = 90"))
        again = dict(((k, n), r) for k, n, r in apply(client, path))
        assert again[("queue", "orders")] == "updated: visibility_timeout"
        assert client.queue_info("orders").attributes.visibility_timeout == 90


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[queues.q]\nvisiblity_timeout = 5\n", "unknown attribute(s) ['visiblity_timeout']"),
        ("[queue.q]\n", "unknown section(s) ['queue']"),
        ("[queues.q\n", "not valid TOML"),
        ('[topics.t]\nsubscribers = "q"\n', "must be a list of queue names"),
        (
            '[queues.a]\ndead_letter = { queue = "b", max_receive_count = 1 }\n'
            '[queues.b]\ndead_letter = { queue = "a", max_receive_count = 1 }\n',
            "name each other",
        ),
    ],
)
def test_bad_files_say_what_to_fix(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with Client("memory://") as client:
        with pytest.raises(InvalidInput, match=None) as exc:
            apply(client, path)
        assert says in str(exc.value)
        assert client.list_queues() == []
