"""`conveyor serve` over the stores several hosts share (Redis, DynamoDB), driven by boto3: the
SQS API as on every store, and a long poll woken by a send from another client of the same
store."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor import Client

from ..conftest import unavailable
from ..support import dynamoservers, sqlstores
from ..support.live import LiveServer
from .conftest import queue_with_dlq

# how soon a send by another client wakes a 20 s long poll: Redis publishes on a channel;
# the DynamoDB store polls, backing off to its poll_interval (1 s), and each poll is a query
# to moto that takes up to a second when the machine is busy
WAKE_WITHIN = {"redis": 1.0, "dynamodb": 5.0}


@pytest.fixture(scope="module", params=sorted(WAKE_WITHIN))
def store_url(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "redis":
        why = sqlstores.reachable("redis")
        if why is not None:
            unavailable(why)
        url = sqlstores.fresh_url("redis")
    else:
        made = dynamoservers.fresh_url()
        if made is None:
            unavailable(dynamoservers.unavailable_reason())
            raise AssertionError
        url = made
    yield url
    sqlstores.drop(url)


@pytest.fixture(scope="module")
def live(store_url: str) -> Iterator[LiveServer]:
    with Client(store_url) as client, LiveServer(client) as server:
        yield server


def test_send_receive_delete_and_attributes(live: LiveServer) -> None:
    sqs = live.sqs()
    url = sqs.create_queue(QueueName="orders", Attributes={"VisibilityTimeout": "30"})["QueueUrl"]
    sent = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {
                "Id": str(i),
                "MessageBody": f"m{i}",
                "MessageAttributes": {"n": {"DataType": "Number", "StringValue": str(i)}},
            }
            for i in range(10)
        ],
    )
    assert len(sent["Successful"]) == 10
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])[
        "Messages"
    ]
    assert [m["Body"] for m in got] == [f"m{i}" for i in range(10)]
    assert got[3]["MessageAttributes"]["n"]["StringValue"] == "3"
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["ApproximateNumberOfMessagesNotVisible"] == "10"
    deleted = sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[{"Id": m["MessageId"], "ReceiptHandle": m["ReceiptHandle"]} for m in got],
    )
    assert len(deleted["Successful"]) == 10
    again = sqs.delete_message_batch(
        QueueUrl=url, Entries=[{"Id": "x", "ReceiptHandle": got[0]["ReceiptHandle"]}]
    )
    assert again.get("Successful") or again.get("Failed")  # answered, not an error
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["ApproximateNumberOfMessages"] == attrs["ApproximateNumberOfMessagesNotVisible"]


def test_dead_letters_and_fifo(live: LiveServer) -> None:
    sqs = live.sqs()
    jobs, dlq = queue_with_dlq(sqs, "jobs")
    sqs.send_message(QueueUrl=jobs, MessageBody="poison")
    [m] = sqs.receive_message(QueueUrl=jobs)["Messages"]
    sqs.change_message_visibility(
        QueueUrl=jobs, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
    )
    assert "Messages" not in sqs.receive_message(QueueUrl=jobs)
    [dead] = sqs.receive_message(QueueUrl=dlq)["Messages"]
    assert dead["Body"] == "poison"

    fifo = sqs.create_queue(
        QueueName="o.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    )["QueueUrl"]
    for body in ("a1", "b1", "a2", "a1"):
        sqs.send_message(QueueUrl=fifo, MessageBody=body, MessageGroupId=body[0])
    got = sqs.receive_message(QueueUrl=fifo, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in got) == ["a1", "a2", "b1"]  # "a1" again: a duplicate


def test_a_long_poll_is_woken_by_a_send_from_another_client(
    live: LiveServer, store_url: str
) -> None:
    sqs = live.sqs()
    url = sqs.create_queue(QueueName="wake")["QueueUrl"]
    got: list[Any] = []

    def poll() -> None:
        got.append(sqs.receive_message(QueueUrl=url, WaitTimeSeconds=20))

    waiter = threading.Thread(target=poll)
    waiter.start()
    time.sleep(0.5)
    with Client(store_url) as other:  # another client of the same store, not the server
        sent = time.monotonic()
        other.queue("wake").send("hello")
    waiter.join(25)
    woke = time.monotonic() - sent
    assert [m["Body"] for m in got[0]["Messages"]] == ["hello"]
    limit = WAKE_WITHIN[store_url.split(":", 1)[0]]
    assert woke < limit, f"the send woke the long poll after {woke:.2f} s"
