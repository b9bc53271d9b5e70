"""The errors stores raise, worded once: every store says the same thing, and says what to do."""

from __future__ import annotations

from ..exceptions import (
    InvalidState,
    MessageNotFound,
    NotFound,
    QueueDoesNotExist,
    QueueExists,
    TopicDoesNotExist,
)


def no_queue(name: str) -> QueueDoesNotExist:
    return QueueDoesNotExist(f"queue {name!r} does not exist: create it first")


def queue_exists(name: str) -> QueueExists:
    return QueueExists(
        f"queue {name!r} exists with different attributes: use set_attributes to change them"
    )


def no_message(queue: str, message_id: str) -> MessageNotFound:
    return MessageNotFound(f"no message {message_id!r} in queue {queue!r}")


def no_topic(name: str) -> TopicDoesNotExist:
    return TopicDoesNotExist(f"topic {name!r} does not exist: create it first")


def no_dead_letter_policy(queue: str) -> InvalidState:
    return InvalidState(
        f"queue {queue!r} has no dead-letter queue: set its dead_letter policy first"
    )


def no_dead_letter_queue(dlq: str, queue: str) -> QueueDoesNotExist:
    return QueueDoesNotExist(f"dead-letter queue {dlq!r} of {queue!r} does not exist: create it")


def in_flight(message_id: str) -> InvalidState:
    return InvalidState(
        f"message {message_id!r} is in flight: wait for its visibility timeout or delete it"
    )


def no_source(message_id: str) -> InvalidState:
    return InvalidState(
        f"message {message_id!r} has no source queue (it was sent to this queue, not"
        " dead-lettered into it): name the queue to move it to (`to=` in the SDK, `--to` on"
        " the command line)"
    )


def consumer_gone(consumer_id: str) -> NotFound:
    return NotFound(f"consumer {consumer_id!r} is not registered (it was pruned?)")


def not_subscribed(topic: str, queue: str) -> NotFound:
    return NotFound(f"queue {queue!r} is not subscribed to topic {topic!r}: subscribe it first")
