"""Subscriptions waiting for their queue: SNS lets a queue be subscribed before it exists,
and a subscription outlives its queue (a queue made again under the name gets the
publishes made after). A topic's settings hold such a subscription's attributes under
PENDING + the queue's stored name until a publish finds the queue there again."""

from __future__ import annotations

import json

from ...client import Client
from ...exceptions import ConveyorError

PENDING = "pending:"


def keep_subscriptions(client: Client, queue: str) -> None:
    """Before `queue` is deleted: its subscriptions wait for a queue of its name, as SNS
    keeps a subscription whose queue is gone (nothing to do on a store without topics)."""
    try:
        topics = client.list_topics()
    except ConveyorError:
        return
    for topic in topics:
        try:
            attributes = client.subscriptions(topic).get(queue)
        except ConveyorError:  # the topic went meanwhile
            continue
        if attributes is not None:
            client.update_topic_settings(topic, {PENDING + queue: json.dumps(attributes)})
