"""Every SQS action through boto3 (AWS JSON 1.0 protocol) against a live server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError

from conveyor import Client
from conveyor.notify import HUB

from ..support.live import LiveServer
from .conftest import arn_of, queue_with_dlq


def code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


def test_queue_lifecycle_list_and_pagination(sqs: Any, name: str) -> None:
    urls = [sqs.create_queue(QueueName=f"{name}-{i}")["QueueUrl"] for i in range(3)]
    assert urls[0].endswith(f"/000000000000/{name}-0")
    assert sqs.create_queue(QueueName=f"{name}-0")["QueueUrl"] == urls[0]  # idempotent
    assert sqs.get_queue_url(QueueName=f"{name}-1")["QueueUrl"] == urls[1]
    listed = sqs.list_queues(QueueNamePrefix=name)["QueueUrls"]
    assert listed == sorted(urls)
    page1 = sqs.list_queues(QueueNamePrefix=name, MaxResults=2)
    assert len(page1["QueueUrls"]) == 2 and "NextToken" in page1
    page2 = sqs.list_queues(QueueNamePrefix=name, MaxResults=2, NextToken=page1["NextToken"])
    assert page1["QueueUrls"] + page2["QueueUrls"] == sorted(urls)
    assert "NextToken" not in page2
    sqs.delete_queue(QueueUrl=urls[2])
    with pytest.raises(ClientError) as exc:
        sqs.get_queue_url(QueueName=f"{name}-2")
    assert code(exc) == "AWS.SimpleQueueService.NonExistentQueue"
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_create_with_other_attributes_is_refused(sqs: Any, name: str) -> None:
    sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "10"})
    with pytest.raises(ClientError) as exc:
        sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "20"})
    assert code(exc) == "QueueAlreadyExists"


def test_every_attribute_round_trips(sqs: Any, name: str) -> None:
    dlq = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    assert dlq_arn == f"arn:aws:sqs:us-east-1:000000000000:{name}-dlq"
    policy = {"Version": "2012-10-17", "Statement": []}
    attrs = {
        "VisibilityTimeout": "45",
        "DelaySeconds": "3",
        "MaximumMessageSize": "2048",
        "MessageRetentionPeriod": "600",
        "ReceiveMessageWaitTimeSeconds": "2",
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 4}),
        "Policy": json.dumps(policy),
        "KmsMasterKeyId": "alias/aws/sqs",
        "KmsDataKeyReusePeriodSeconds": "120",
        "SqsManagedSseEnabled": "false",
    }
    url = sqs.create_queue(QueueName=name, Attributes=attrs)["QueueUrl"]
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    for key, value in attrs.items():
        if key == "RedrivePolicy":
            assert json.loads(got[key]) == {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 4}
        else:
            assert got[key] == value, key
    for key in (
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
        "CreatedTimestamp",
        "LastModifiedTimestamp",
    ):
        assert got[key].isdigit(), key
    sqs.set_queue_attributes(
        QueueUrl=url, Attributes={"VisibilityTimeout": "7", "RedrivePolicy": ""}
    )
    got = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["VisibilityTimeout", "RedrivePolicy"]
    )
    assert got["Attributes"] == {"VisibilityTimeout": "7"}
    sqs.set_queue_attributes(
        QueueUrl=dlq,
        Attributes={"RedriveAllowPolicy": json.dumps({"redrivePermission": "denyAll"})},
    )
    with pytest.raises(ClientError) as exc:
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": attrs["RedrivePolicy"]})
    assert code(exc) == "InvalidAttributeValue"


def test_fifo_attributes_and_ordering(sqs: Any, name: str) -> None:
    url = sqs.create_queue(
        QueueName=f"{name}.fifo",
        Attributes={
            "FifoQueue": "true",
            "ContentBasedDeduplication": "true",
            "DeduplicationScope": "messageGroup",
            "FifoThroughputLimit": "perMessageGroupId",
        },
    )["QueueUrl"]
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert got["FifoQueue"] == "true" and got["ContentBasedDeduplication"] == "true"
    assert got["DeduplicationScope"] == "messageGroup"
    assert got["FifoThroughputLimit"] == "perMessageGroupId"
    first = sqs.send_message(QueueUrl=url, MessageBody="a", MessageGroupId="g")
    again = sqs.send_message(QueueUrl=url, MessageBody="a", MessageGroupId="g")
    assert again["MessageId"] == first["MessageId"]  # content-based de-duplication
    assert first["SequenceNumber"].isdigit()
    sqs.send_message(QueueUrl=url, MessageBody="b", MessageGroupId="g")
    got1 = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, ReceiveRequestAttemptId="try1", AttributeNames=["All"]
    )["Messages"]
    assert [m["Body"] for m in got1] == ["a", "b"]
    assert got1[0]["Attributes"]["MessageGroupId"] == "g"
    retry = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, ReceiveRequestAttemptId="try1"
    )
    assert [m["ReceiptHandle"] for m in retry["Messages"]] == [m["ReceiptHandle"] for m in got1]
    with pytest.raises(ClientError) as exc:
        sqs.create_queue(QueueName=f"{name}x.fifo")  # no FifoQueue attribute
    assert code(exc) == "InvalidParameterValue"  # a standard name cannot end in .fifo
    with pytest.raises(ClientError) as exc:
        sqs.create_queue(QueueName=f"{name}y", Attributes={"ContentBasedDeduplication": "true"})
    assert code(exc) == "InvalidAttributeName"


def test_message_attributes_and_digests(sqs: Any, name: str) -> None:
    from moto.sqs.models import Message as MotoMessage

    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    attributes = {
        "s": {"DataType": "String", "StringValue": "héllo"},
        "n": {"DataType": "Number", "StringValue": "1.50"},
        "b": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
        "c": {"DataType": "String.custom", "StringValue": "x"},
    }
    sent = sqs.send_message(
        QueueUrl=url,
        MessageBody="body ✓",
        MessageAttributes=attributes,
        MessageSystemAttributes={
            "AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-5759e988-bd862e3fe"}
        },
    )
    moto = MotoMessage("id", "body ✓")
    moto.message_attributes = attributes
    assert sent["MD5OfMessageBody"] == moto.body_md5
    assert sent["MD5OfMessageAttributes"] == moto.attribute_md5
    assert len(sent["MD5OfMessageSystemAttributes"]) == 32
    got = sqs.receive_message(
        QueueUrl=url, MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"]
    )["Messages"][0]
    assert got["Body"] == "body ✓" and got["MD5OfBody"] == sent["MD5OfMessageBody"]
    assert got["MessageAttributes"] == attributes
    assert got["MD5OfMessageAttributes"] == sent["MD5OfMessageAttributes"]
    assert got["Attributes"]["AWSTraceHeader"] == "Root=1-5759e988-bd862e3fe"
    assert got["Attributes"]["ApproximateReceiveCount"] == "1"
    only = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["s", "n"], VisibilityTimeout=0)
    # the message is in flight; release it and select a subset of attributes
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=got["ReceiptHandle"], VisibilityTimeout=0
    )
    only = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["s", "n"])["Messages"][0]
    assert set(only["MessageAttributes"]) == {"s", "n"}


def test_batches_with_partial_failures(sqs: Any, name: str) -> None:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sent = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "ok1", "MessageBody": "one"},
            {"Id": "bad", "MessageBody": "x", "DelaySeconds": 901},
            {"Id": "ok2", "MessageBody": "two", "DelaySeconds": 0},
        ],
    )
    assert sorted(e["Id"] for e in sent["Successful"]) == ["ok1", "ok2"]
    assert [(f["Id"], f["SenderFault"]) for f in sent["Failed"]] == [("bad", True)]
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in got) == ["one", "two"]
    vis = sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "a", "ReceiptHandle": got[0]["ReceiptHandle"], "VisibilityTimeout": 60},
            {"Id": "forged", "ReceiptHandle": "nope", "VisibilityTimeout": 60},
        ],
    )
    assert [e["Id"] for e in vis["Successful"]] == ["a"]
    assert vis["Failed"][0]["Code"] == "ReceiptHandleIsInvalid"
    deleted = sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]
        + [{"Id": "x", "ReceiptHandle": "forged.handle"}],
    )
    assert sorted(e["Id"] for e in deleted["Successful"]) == ["0", "1"]
    assert deleted["Failed"][0]["Id"] == "x"
    for entries, expected in (
        ([], "AWS.SimpleQueueService.EmptyBatchRequest"),
        ([{"Id": "a", "MessageBody": "x"}] * 2, "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"),
        (
            [{"Id": str(i), "MessageBody": "x"} for i in range(11)],
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
        ),
        ([{"Id": "a b", "MessageBody": "x"}], "AWS.SimpleQueueService.InvalidBatchEntryId"),
    ):
        with pytest.raises(ClientError) as exc:
            sqs.send_message_batch(QueueUrl=url, Entries=entries)
        assert code(exc) == expected


def test_delete_visibility_and_receipts(sqs: Any, name: str) -> None:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m")
    m = sqs.receive_message(QueueUrl=url, VisibilityTimeout=30)["Messages"][0]
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
    )
    again = sqs.receive_message(QueueUrl=url, AttributeNames=["ApproximateReceiveCount"])[
        "Messages"
    ][0]
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
    with pytest.raises(ClientError) as exc:
        sqs.delete_message(QueueUrl=url, ReceiptHandle="forged-receipt")
    assert code(exc) == "ReceiptHandleIsInvalid"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"])
    stats = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert stats["ApproximateNumberOfMessages"] == "0"
    assert stats["ApproximateNumberOfMessagesNotVisible"] == "0"


def test_long_poll_is_woken_by_a_send(server: LiveServer, name: str) -> None:
    sqs = server.sqs()
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    result: dict[str, Any] = {}

    def poll() -> None:
        started = time.monotonic()
        result["got"] = server.sqs().receive_message(QueueUrl=url, WaitTimeSeconds=20)
        result["took"] = time.monotonic() - started

    t = threading.Thread(target=poll)
    t.start()
    key = server.conveyor.client.backend.key
    deadline = time.monotonic() + 5
    while HUB.waiting(key, name) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert HUB.waiting(key, name) == 1  # the poll waits on the server, holding no thread
    sqs.send_message(QueueUrl=url, MessageBody="wake")
    t.join(25)
    assert result["got"]["Messages"][0]["Body"] == "wake"
    assert result["took"] < 5


def test_purge_tags_permissions_dead_letter_sources(sqs: Any, name: str) -> None:
    dlq = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 1})
    src = sqs.create_queue(
        QueueName=name, Attributes={"RedrivePolicy": policy}, tags={"team": "a"}
    )["QueueUrl"]
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [src]
    assert sqs.list_queue_tags(QueueUrl=src)["Tags"] == {"team": "a"}
    sqs.tag_queue(QueueUrl=src, Tags={"env": "test"})
    sqs.untag_queue(QueueUrl=src, TagKeys=["team"])
    assert sqs.list_queue_tags(QueueUrl=src)["Tags"] == {"env": "test"}
    sqs.add_permission(
        QueueUrl=src, Label="p1", AWSAccountIds=["111122223333"], Actions=["SendMessage"]
    )
    pol = json.loads(
        sqs.get_queue_attributes(QueueUrl=src, AttributeNames=["Policy"])["Attributes"]["Policy"]
    )
    assert pol["Statement"][0]["Sid"] == "p1"
    assert pol["Statement"][0]["Action"] == "SQS:SendMessage"  # one action alone, as SQS
    sqs.remove_permission(QueueUrl=src, Label="p1")
    assert "Attributes" not in sqs.get_queue_attributes(QueueUrl=src, AttributeNames=["Policy"])
    with pytest.raises(ClientError) as exc:
        sqs.remove_permission(QueueUrl=src, Label="p1")
    assert code(exc) == "InvalidParameterValue"
    for i in range(3):
        sqs.send_message(QueueUrl=src, MessageBody=str(i))
    sqs.purge_queue(QueueUrl=src)
    assert "Messages" not in sqs.receive_message(QueueUrl=src)


def test_message_move_tasks(sqs: Any, name: str) -> None:
    src, dlq = queue_with_dlq(sqs, name)
    arn = arn_of(sqs, dlq)
    for i in range(5):
        sqs.send_message(QueueUrl=src, MessageBody=str(i))
    for _ in range(5):  # first receive; the second attempt moves each to the DLQ
        m = sqs.receive_message(QueueUrl=src)["Messages"][0]
        sqs.change_message_visibility(
            QueueUrl=src, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
        )
    assert "Messages" not in sqs.receive_message(QueueUrl=src, MaxNumberOfMessages=10)
    dead = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["ApproximateNumberOfMessages"])
    assert dead["Attributes"]["ApproximateNumberOfMessages"] == "5"
    got = sqs.receive_message(QueueUrl=dlq, AttributeNames=["DeadLetterQueueSourceArn"])[
        "Messages"
    ][0]
    assert got["Attributes"]["DeadLetterQueueSourceArn"].endswith(f":{name}")
    sqs.change_message_visibility(
        QueueUrl=dlq, ReceiptHandle=got["ReceiptHandle"], VisibilityTimeout=0
    )
    handle = sqs.start_message_move_task(SourceArn=arn, MaxNumberOfMessagesPerSecond=100)[
        "TaskHandle"
    ]
    deadline = time.monotonic() + 10
    while True:
        task = sqs.list_message_move_tasks(SourceArn=arn)["Results"][0]
        if task["Status"] != "RUNNING" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert task["Status"] == "COMPLETED"
    assert task["ApproximateNumberOfMessagesMoved"] == 5
    assert task["ApproximateNumberOfMessagesToMove"] == 5
    with pytest.raises(ClientError) as exc:
        sqs.cancel_message_move_task(TaskHandle=handle)  # already completed
    assert code(exc) == "AWS.SimpleQueueService.UnsupportedOperation"
    bodies = sorted(
        m["Body"] for m in sqs.receive_message(QueueUrl=src, MaxNumberOfMessages=10)["Messages"]
    )
    assert bodies == ["0", "1", "2", "3", "4"]
    with pytest.raises(ClientError) as exc:
        sqs.start_message_move_task(SourceArn=arn.replace(f"{name}-dlq", name))  # not a DLQ
    assert code(exc) == "InvalidParameterValue"


def test_regions_and_accounts_are_kept_apart(server: LiveServer, store: Client, name: str) -> None:
    east, west = server.sqs("us-east-1"), server.sqs("eu-west-1")
    other_account = server.sqs("us-east-1", key="111122223333")
    url_e = east.create_queue(QueueName=name)["QueueUrl"]
    url_w = west.create_queue(QueueName=name)["QueueUrl"]
    url_o = other_account.create_queue(QueueName=name)["QueueUrl"]
    assert url_o.endswith(f"/111122223333/{name}")
    # one name, two regions: two URLs, as on SQS
    assert url_e == f"{server.url}/000000000000/{name}"
    assert url_w == f"{server.url}/queue/eu-west-1/000000000000/{name}"
    assert west.get_queue_url(QueueName=name)["QueueUrl"] == url_w
    east.send_message(QueueUrl=url_e, MessageBody="east")
    assert "Messages" not in west.receive_message(QueueUrl=url_w)
    assert "Messages" not in other_account.receive_message(QueueUrl=url_o)
    assert west.list_queues(QueueNamePrefix=name)["QueueUrls"] == [url_w]
    west.send_message(QueueUrl=url_w, MessageBody="west")
    # a request signed for one region never reaches another region's queue
    with pytest.raises(ClientError) as exc:
        east.receive_message(QueueUrl=url_w)
    assert code(exc) == "AWS.SimpleQueueService.NonExistentQueue"
    # the Query protocol at the queue's own URL, unsigned, reaches it
    import httpx

    answer = httpx.post(url_w, data={"Action": "ReceiveMessage"})
    assert answer.status_code == 200 and "<Body>west</Body>" in answer.text
    # the default namespace is the store's plain names: the SDK sees what SQS clients made
    assert store.queue(name).receive()[0].text == "east"
    assert f"eu-west-1:000000000000:{name}" in store.list_queues("eu-west-1:")


def test_bad_input_gets_sqs_errors(sqs: Any, server: LiveServer, name: str) -> None:
    import httpx

    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: sqs.create_queue(QueueName="bad name!"), "InvalidParameterValue"),
        (lambda: sqs.send_message(QueueUrl=url, MessageBody="\x00"), "InvalidMessageContents"),
        (
            lambda: sqs.send_message(QueueUrl=url, MessageBody="x", DelaySeconds=901),
            "InvalidParameterValue",
        ),
        (
            lambda: sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=11),
            "InvalidParameterValue",
        ),
        (
            lambda: sqs.set_queue_attributes(QueueUrl=url, Attributes={"Nope": "1"}),
            "InvalidAttributeName",
        ),
        (
            lambda: sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "x"}),
            "InvalidAttributeValue",
        ),
        (
            lambda: sqs.send_message(QueueUrl=url, MessageBody="x" * 1048577),
            "InvalidParameterValue",
        ),
        (
            lambda: sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Bogus"]),
            "InvalidAttributeName",
        ),
    ]
    for call, expected in cases:
        with pytest.raises(ClientError) as exc:
            call()
        assert code(exc) == expected
    headers = {"X-Amz-Target": "AmazonSQS.ListQueues", "Content-Type": "application/x-amz-json-1.0"}
    r = httpx.post(server.url + "/", content=b"{not json", headers=headers)
    assert r.status_code == 400 and "SerializationException" in r.json()["__type"]
    assert r.headers["x-amzn-query-error"] == "MalformedQueryString;Sender"
    r = httpx.post(
        server.url + "/", content=b"{}", headers={**headers, "X-Amz-Target": "AmazonSQS.Nope"}
    )
    assert r.status_code == 400 and r.headers["x-amzn-query-error"] == "InvalidAction;Sender"
    big = b"{" + b" " * (5 * 1024 * 1024) + b"}"
    r = httpx.post(server.url + "/", content=big, headers=headers)
    assert r.status_code == 413 and "RequestEntityTooLarge" in r.json()["__type"]
