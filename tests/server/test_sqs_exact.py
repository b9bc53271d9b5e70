"""The SQS API answers as Amazon SQS does: on FIFO queues DelaySeconds=0 is accepted, a batch
entry without a group fails the whole request, a purge forgets the de-duplication history;
a missing queue is reported in SQS's words, in both protocols."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError

from conveyor import ManualClock
from conveyor.client import Client
from conveyor.receipts import claim_token, seconds_since_claim
from conveyor.server.sqs.wire import XML_UNSAFE, md5_hex, xml_unsafe

from ..support.live import LiveServer
from .conftest import arn_of, queue_with_dlq


def _fifo(sqs: Any, name: str) -> str:
    url: str = sqs.create_queue(
        QueueName=f"{name}.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]
    return url


def test_delay_seconds_zero_is_accepted_and_other_delays_are_not(sqs: Any, name: str) -> None:
    url = _fifo(sqs, name)
    sqs.send_message(QueueUrl=url, MessageBody="a", MessageGroupId="g", DelaySeconds=0)
    sent = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "1", "MessageBody": "b", "MessageGroupId": "g", "DelaySeconds": 0},
            {"Id": "2", "MessageBody": "c", "MessageGroupId": "g"},
        ],
    )
    assert [e["Id"] for e in sent["Successful"]] == ["1", "2"]
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in got] == ["a", "b", "c"]  # none was delayed
    with pytest.raises(ClientError) as err:
        sqs.send_message(QueueUrl=url, MessageBody="d", MessageGroupId="g", DelaySeconds=5)
    assert err.value.response["Error"]["Code"] == "InvalidParameterValue"


def test_a_batch_entry_without_a_group_fails_the_whole_request(sqs: Any, name: str) -> None:
    url = _fifo(sqs, name)
    with pytest.raises(ClientError) as err:
        sqs.send_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": "1", "MessageBody": "x", "MessageGroupId": "g"},
                {"Id": "2", "MessageBody": "y"},
            ],
        )
    # SQS's codes: an invalid value in a batch, a missing parameter in SendMessage
    assert err.value.response["Error"]["Code"] == "InvalidParameterValue"
    assert err.value.response["Error"]["Message"] == (
        "The request must contain the parameter MessageGroupId."
    )
    with pytest.raises(ClientError) as err:
        sqs.send_message(QueueUrl=url, MessageBody="z")
    assert err.value.response["Error"]["Code"] == "MissingParameter"
    assert "Messages" not in sqs.receive_message(QueueUrl=url)  # nothing was written


def test_a_purge_forgets_the_deduplication_history(sqs: Any, name: str) -> None:
    url = _fifo(sqs, name)
    first = sqs.send_message(
        QueueUrl=url, MessageBody="once", MessageGroupId="g", MessageDeduplicationId="d1"
    )
    again = sqs.send_message(
        QueueUrl=url, MessageBody="once", MessageGroupId="g", MessageDeduplicationId="d1"
    )
    assert again["MessageId"] == first["MessageId"]  # a duplicate within 5 minutes
    sqs.purge_queue(QueueUrl=url)
    after = sqs.send_message(
        QueueUrl=url, MessageBody="once", MessageGroupId="g", MessageDeduplicationId="d1"
    )
    assert after["MessageId"] != first["MessageId"]
    [m] = sqs.receive_message(QueueUrl=url)["Messages"]
    assert m["MessageId"] == after["MessageId"]


def test_a_missing_queue_is_reported_in_sqs_words(sqs: Any, server: LiveServer) -> None:
    with pytest.raises(ClientError) as err:  # boto3 speaks the JSON protocol
        sqs.get_queue_url(QueueName="no-such-queue")
    assert err.value.response["Error"]["Code"] == "AWS.SimpleQueueService.NonExistentQueue"
    assert err.value.response["Error"]["Message"] == "The specified queue does not exist."
    query = httpx.post(
        server.url,
        data={"Action": "GetQueueUrl", "QueueName": "no-such-queue", "Version": "2012-11-05"},
    )
    assert query.status_code == 400
    assert "<Code>AWS.SimpleQueueService.NonExistentQueue</Code>" in query.text
    assert (
        "<Message>The specified queue does not exist for this wsdl version.</Message>" in query.text
    )


def test_requests_addressed_as_on_sqs(sqs: Any, server: LiveServer, name: str) -> None:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sqs.send_message(QueueUrl=name, MessageBody="by name")  # a name where a URL is expected
    [m] = sqs.receive_message(QueueUrl=url)["Messages"]
    assert m["Body"] == "by name"
    assert "QueueUrls" not in sqs.list_queues(QueueNamePrefix="no-queue-has-this-prefix")
    get = httpx.get(url)  # a queue URL without an action
    assert get.status_code == 404 and get.text.endswith("<UnknownOperationException/>")
    as_json = httpx.get(url, headers={"Accept": "application/json"})  # XML all the same
    assert as_json.status_code == 404 and "<UnknownOperationException" in as_json.text
    for action in ("CreateQueue", "ListQueues"):
        at_queue = httpx.post(
            url, data={"Action": action, "QueueName": "other", "Version": "2012-11-05"}
        )
        assert at_queue.status_code == 400
        assert "<Code>InvalidAction</Code>" in at_queue.text, action
    assert "other" not in str(sqs.list_queues().get("QueueUrls", []))


def test_messages_checked_and_traced_as_on_sqs(sqs: Any, server: LiveServer, name: str) -> None:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="fair", MessageGroupId="tenant-1")  # fair queues
    with pytest.raises(ClientError) as err:
        sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="has space")
    assert "MessageGroupId" in err.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as err:
        sqs.send_message(
            QueueUrl=url,
            MessageBody="x",
            MessageAttributes={"a": {"DataType": "String", "StringValue": "bad\x01value"}},
        )
    assert err.value.response["Error"]["Code"] == "InvalidParameterValue"  # as SQS answers
    trace = "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1"
    sent = httpx.post(
        url,
        data={"Action": "SendMessage", "MessageBody": "traced", "Version": "2012-11-05"},
        headers={"X-Amzn-Trace-Id": trace},
    )
    assert sent.status_code == 200
    got = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
    )["Messages"]
    by_body = {m["Body"]: m.get("Attributes", {}) for m in got}
    assert by_body["traced"]["AWSTraceHeader"] == trace
    assert by_body["fair"]["MessageGroupId"] == "tenant-1"


def test_xml_characters_are_told_apart_as_sqs_does() -> None:
    for text in ["plain", "tab\tnew\nline\rdel\x7f", "é ü ß", "中文", "emoji \U0001f600", ""]:
        assert xml_unsafe(text) is None, text
    for text, bad in [
        ("a\x01b", "\x01"),
        ("ok\x0bthen\x00", "\x0b"),
        ("é\x1f", "\x1f"),
        ("x\ud800", "\ud800"),
        ("\ufffe", "\ufffe"),
        ("x" * 999 + "\x08", "\x08"),
    ]:
        assert xml_unsafe(text) == bad, text
    for code in range(0x800):
        text = f"ab{chr(code)}"
        found = XML_UNSAFE.search(text)
        assert xml_unsafe(text) == (found.group(0) if found else None), hex(code)


def test_digests_agree_with_openssl_s_md5_on_both_sides_of_the_small_body_path() -> None:
    for size in (0, 1, 100, 1023, 1024, 1025, 4096, 300_000):
        data = bytes(range(256)) * (size // 256) + b"\xe4" * (size % 256)
        assert md5_hex(data) == hashlib.md5(data).hexdigest(), size


def test_a_batch_of_bodies_is_checked_and_digested_per_entry(sqs: Any, name: str) -> None:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    bodies = ["plain", "del\x7f tab\t", "é ü ß 中文 \U0001f600"]
    entries = [{"Id": f"e{i}", "MessageBody": b} for i, b in enumerate(bodies)]
    sent = sqs.send_message_batch(QueueUrl=url, Entries=entries)
    assert [e["Id"] for e in sent["Successful"]] == ["e0", "e1", "e2"]
    for entry, body in zip(sent["Successful"], bodies, strict=True):
        assert entry["MD5OfMessageBody"] == hashlib.md5(body.encode()).hexdigest()
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in got) == sorted(bodies)
    assert all(m["MD5OfBody"] == hashlib.md5(m["Body"].encode()).hexdigest() for m in got)
    entries.append({"Id": "bad", "MessageBody": "a\x01"})
    mixed = sqs.send_message_batch(QueueUrl=url, Entries=entries)  # each entry on its own
    assert [e["Id"] for e in mixed["Successful"]] == ["e0", "e1", "e2"]
    assert "#x1" in _one_failed(mixed, "bad", "InvalidMessageContents")
    # a lone surrogate (JSON's "\\ud800") is no character at all: that entry alone is refused
    entries[-1] = {"Id": "bad", "MessageBody": "a\ud800"}
    mixed = sqs.send_message_batch(QueueUrl=url, Entries=entries)
    assert [e["Id"] for e in mixed["Successful"]] == ["e0", "e1", "e2"]
    assert "#xD800" in _one_failed(mixed, "bad", "InvalidMessageContents")


def test_a_tag_holding_a_character_xml_cannot_carry_is_refused(sqs: Any, name: str) -> None:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    for tags in ({"k\ud800": "v"}, {"k": "v\x01"}):
        code, message = _error(sqs.tag_queue, QueueUrl=url, Tags=tags)
        assert code == "InvalidParameterValue"
        assert "may not" in message
    assert sqs.list_queue_tags(QueueUrl=url).get("Tags", {}) == {}


def test_a_body_of_bytes_that_are_not_utf8_is_received_as_replaced_text(
    sqs: Any, store: Client, name: str
) -> None:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    store.queue(name).send(b"ok \xff\xfe end")  # through the SDK
    [got] = sqs.receive_message(QueueUrl=url)["Messages"]
    assert got["Body"] == "ok \ufffd\ufffd end"
    assert got["MD5OfBody"] == hashlib.md5(got["Body"].encode()).hexdigest()


def test_errors_in_sqs_words(sqs: Any, name: str) -> None:
    def error(call: Any, **kwargs: Any) -> tuple[str, str]:
        with pytest.raises(ClientError) as err:
            call(**kwargs)
        e = err.value.response["Error"]
        return e["Code"], e["Message"]

    url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout ": "5"})["QueueUrl"]
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])[
        "Attributes"
    ] == {"VisibilityTimeout": "5"}  # spaces around an attribute name are ignored
    assert error(sqs.create_queue, QueueName="/my/test") == (
        "InvalidParameterValue",
        "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length",
    )
    assert error(sqs.send_message, QueueUrl=url, MessageBody="x" * 1048577) == (
        "InvalidParameterValue",
        "One or more parameters are invalid. Reason: Message must be shorter than 1048576 bytes.",
    )
    assert error(sqs.send_message_batch, QueueUrl=url, Entries=[]) == (
        "AWS.SimpleQueueService.EmptyBatchRequest",
        "There should be at least one SendMessageBatchRequestEntry in the request.",
    )
    assert error(sqs.delete_message, QueueUrl=url, ReceiptHandle="not-a-receipt") == (
        "ReceiptHandleIsInvalid",
        'The input receipt handle "not-a-receipt" is not a valid receipt handle.',
    )
    assert error(
        sqs.change_message_visibility, QueueUrl=url, ReceiptHandle="x", VisibilityTimeout=1
    ) == ("ReceiptHandleIsInvalid", "The input receipt handle is invalid.")
    failed = sqs.delete_message_batch(
        QueueUrl=url, Entries=[{"Id": "a", "ReceiptHandle": "not-a-receipt"}]
    )["Failed"]
    assert failed[0]["Message"] == (
        'The input receipt handle "not-a-receipt" is not a valid receipt handle.'
    )
    fifo = sqs.create_queue(QueueName=f"{name}.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    code, message = error(
        sqs.send_message_batch,
        QueueUrl=fifo,
        Entries=[
            {"Id": "1", "MessageBody": "x", "MessageGroupId": "g", "MessageDeduplicationId": "d"},
            {"Id": "2", "MessageBody": "y", "MessageGroupId": "g"},
        ],
    )
    assert code == "InvalidParameterValue" and "ContentBasedDeduplication" in message
    assert "Messages" not in sqs.receive_message(QueueUrl=fifo)  # nothing was written


def test_earlier_receipts_work_as_on_sqs(sqs: Any, name: str) -> None:
    url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "0"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="body")
    first = sqs.receive_message(QueueUrl=url)["Messages"][0]["ReceiptHandle"]
    second = sqs.receive_message(QueueUrl=url)["Messages"][0]["ReceiptHandle"]
    assert first != second
    # an earlier receipt changes the visibility of a message received again since
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first, VisibilityTimeout=100)
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    batch = sqs.change_message_visibility_batch(
        QueueUrl=url, Entries=[{"Id": "a", "ReceiptHandle": first, "VisibilityTimeout": 100}]
    )
    assert [e["Id"] for e in batch["Successful"]] == ["a"]
    # and deletes it; deleting again, with either receipt, succeeds
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first)
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (attrs["ApproximateNumberOfMessages"], attrs["ApproximateNumberOfMessagesNotVisible"]) \
        == ("0", "0")  # fmt: skip
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first)
    sqs.delete_message(QueueUrl=url, ReceiptHandle=second)
    deleted = sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": "x", "ReceiptHandle": second}])
    assert [e["Id"] for e in deleted["Successful"]] == ["x"]
    # a visibility change on a message that is gone is SQS's error
    with pytest.raises(ClientError) as exc:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first, VisibilityTimeout=5)
    assert exc.value.response["Error"]["Code"] == "InvalidParameterValue"
    assert "Message does not exist" in exc.value.response["Error"]["Message"]


def test_a_fifo_receipt_that_is_no_longer_the_message_s_has_expired(sqs: Any, name: str) -> None:
    url = _fifo(sqs, name)
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "0"})
    sqs.send_message(QueueUrl=url, MessageBody="f", MessageGroupId="g")
    first = sqs.receive_message(QueueUrl=url)["Messages"][0]["ReceiptHandle"]
    sqs.receive_message(QueueUrl=url)
    with pytest.raises(ClientError) as exc:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=first)
    assert exc.value.response["Error"]["Code"] == "InvalidParameterValue"
    assert exc.value.response["Error"]["Message"] == (
        f"Value {first} for parameter ReceiptHandle is invalid. Reason: The receipt handle"
        " has expired."
    )


def test_a_fifo_receipt_expires_with_its_visibility_timeout(sqs: Any, name: str) -> None:
    url = _fifo(sqs, name)
    sqs.send_message(QueueUrl=url, MessageBody="f", MessageGroupId="g")
    sqs.send_message(QueueUrl=url, MessageBody="h", MessageGroupId="h")
    [f, _] = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)[
        "Messages"
    ]
    # nobody received them again, but their visibility timeout is over: the receipts expired
    calls: list[tuple[Any, dict[str, Any]]] = [
        (sqs.delete_message, {}),
        (sqs.change_message_visibility, {"VisibilityTimeout": 30}),
    ]
    for call, more in calls:
        with pytest.raises(ClientError) as exc:
            call(QueueUrl=url, ReceiptHandle=f["ReceiptHandle"], **more)
        assert exc.value.response["Error"]["Code"] == "InvalidParameterValue"
        assert "The receipt handle has expired." in exc.value.response["Error"]["Message"]
    batch = sqs.delete_message_batch(
        QueueUrl=url, Entries=[{"Id": "f", "ReceiptHandle": f["ReceiptHandle"]}]
    )
    assert [e["Code"] for e in batch["Failed"]] == ["InvalidParameterValue"]
    assert (
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])[
            "Attributes"
        ]["ApproximateNumberOfMessages"]
        == "2"
    )  # nothing was deleted
    # a receipt within its visibility timeout works, and a repeated delete succeeds
    [again] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=30)["Messages"]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"])
    sqs.delete_message(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"])


def test_a_fifo_receive_fills_from_one_group_first(sqs: Any, name: str) -> None:
    url = _fifo(sqs, name)
    for i in range(3):
        for group in "xy":
            sqs.send_message(QueueUrl=url, MessageBody=f"{group}{i}", MessageGroupId=group)
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=4)["Messages"]
    assert [m["Body"] for m in got] == ["x0", "x1", "x2", "y0"]


def test_permission_and_tag_errors_in_sqs_words(sqs: Any, name: str) -> None:
    url = sqs.create_queue(QueueName=name, tags={"k": "v"})["QueueUrl"]

    def error(call: Any, **kwargs: Any) -> tuple[str, str, int]:
        with pytest.raises(ClientError) as exc:
            call(QueueUrl=url, **kwargs)
        r = exc.value.response
        return r["Error"]["Code"], r["Error"]["Message"], r["ResponseMetadata"]["HTTPStatusCode"]

    grant = {"Label": "p", "AWSAccountIds": ["111111111111"]}
    assert error(sqs.add_permission, **grant, Actions=[])[:2] == (
        "MissingParameter", "The request must contain the parameter Actions.")  # fmt: skip
    assert error(sqs.add_permission, Label="p", AWSAccountIds=[], Actions=["SendMessage"])[1] \
        == "Value [] for parameter PrincipalId is invalid. Reason: Unable to verify."  # fmt: skip
    code, message, _ = error(sqs.add_permission, **grant, Actions=["RemovePermission"])
    assert "InvalidParameterValue" in code and "Only the queue owner" in message
    eight = [
        "ChangeMessageVisibility", "DeleteMessage", "GetQueueAttributes", "GetQueueUrl",
        "ListDeadLetterSourceQueues", "PurgeQueue", "ReceiveMessage", "SendMessage",
    ]  # fmt: skip
    assert error(sqs.add_permission, **grant, Actions=eight) == (
        "OverLimit", "8 Actions were found, maximum allowed is 7.", 403)  # fmt: skip
    assert error(sqs.remove_permission, Label="nope")[1] == (
        "Value nope for parameter Label is invalid. Reason: can't find label."
    )
    assert error(sqs.tag_queue, Tags={})[1] == "The request must contain the parameter Tags."
    many = {f"t{i}": "x" for i in range(51)}
    assert error(sqs.tag_queue, Tags=many)[1] == f"Too many tags added for queue {name}."
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"k": "v"}
    assert error(sqs.untag_queue, TagKeys=[])[1] == (
        "Tag keys must be between 1 and 128 characters in length."
    )


def _error(call: Any, **params: Any) -> tuple[str, str]:
    with pytest.raises(ClientError) as err:
        call(**params)
    e = err.value.response["Error"]
    return e["Code"], e["Message"]


def _one_failed(batch: Any, entry_id: str, code: str) -> str:
    """The message of a batch's one failed entry, checked to be `entry_id`'s, with `code`
    and the sender's fault."""
    [failed] = batch["Failed"]
    assert (failed["Id"], failed["Code"]) == (entry_id, code)
    assert failed["SenderFault"] is True
    return str(failed["Message"])


def test_message_attribute_and_batch_errors_in_sqs_words(sqs: Any, name: str) -> None:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    for bad in ("日本", "a b", ".lead", "trail.", "two..dots", "AWS.reserved"):
        _, text = _error(
            sqs.send_message,
            QueueUrl=url,
            MessageBody="x",
            MessageAttributes={bad: {"DataType": "String", "StringValue": "v"}},
        )
        assert text == (
            f"The message attribute name '{bad}' is invalid. Attribute name can contain A-Z,"
            " a-z, 0-9, underscore (_), hyphen (-), and period (.) characters."
        )
    sqs.send_message(  # not in the API Reference, but SQS takes these letters
        QueueUrl=url,
        MessageBody="x",
        MessageAttributes={"öther_Straße": {"DataType": "String", "StringValue": "v"}},
    )
    (m,) = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"])["Messages"]
    assert m["MessageAttributes"]["öther_Straße"]["StringValue"] == "v"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    _, text = _error(
        sqs.send_message,
        QueueUrl=url,
        MessageBody="x",
        MessageAttributes={"when": {"DataType": "Timestamp", "StringValue": "1"}},
    )
    assert text == (
        "The message attribute 'when' has an invalid message attribute type, the set of"
        " supported type prefixes is Binary, Number, and String."
    )
    batch = sqs.send_message_batch
    for bad_id in ("", ".!@#", "i" * 81):
        code, text = _error(batch, QueueUrl=url, Entries=[{"Id": bad_id, "MessageBody": "b"}])
        assert code == "AWS.SimpleQueueService.InvalidBatchEntryId"
        assert text == (
            "A batch entry id can only contain alphanumeric characters, hyphens and"
            " underscores. It can be at most 80 letters long."
        )
    entries = [{"Id": i, "MessageBody": "b"} for i in ("1", "2", "2", "1")]
    assert _error(batch, QueueUrl=url, Entries=entries)[1] == "Id 2 repeated."
    entries = [{"Id": str(i), "MessageBody": "b"} for i in range(11)]
    assert _error(batch, QueueUrl=url, Entries=entries)[1] == (
        "Maximum number of entries per request are 10. You have sent 11."
    )
    _, text = _error(batch, QueueUrl=url, Entries=[{"Id": "1", "MessageBody": "b" * 1048577}])
    assert text == (
        "Batch requests cannot be longer than 1048576 bytes. You have sent 1048577 bytes."
    )
    attribute = {"a": {"DataType": "String", "StringValue": "v" * 400}}
    with_attributes: list[dict[str, Any]] = [
        {"Id": str(i), "MessageBody": "b" * 524_000, "MessageAttributes": attribute}
        for i in range(2)
    ]  # the bodies alone are under 1 MiB; with their attributes the batch is over
    assert _error(batch, QueueUrl=url, Entries=with_attributes)[1] == (
        "Batch requests cannot be longer than 1048576 bytes. You have sent 1048814 bytes."
    )
    assert "Messages" not in sqs.receive_message(QueueUrl=url)  # nothing was sent


def test_add_permission_writes_the_policy_as_sqs_does(sqs: Any, name: str) -> None:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sqs.add_permission(QueueUrl=url, Label="one", AWSAccountIds=["111111111111"], Actions=["*"])
    sqs.add_permission(
        QueueUrl=url,
        Label="two",
        AWSAccountIds=["222222222222", "333333333333"],
        Actions=["SendMessage", "ReceiveMessage"],
    )
    policy = json.loads(
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])["Attributes"]["Policy"]
    )
    one, two = sorted(policy["Statement"], key=lambda s: s["Sid"])
    assert one["Principal"] == {"AWS": "arn:aws:iam::111111111111:root"}
    assert one["Action"] == "SQS:*"
    assert two["Principal"] == {
        "AWS": ["arn:aws:iam::222222222222:root", "arn:aws:iam::333333333333:root"]
    }
    assert two["Action"] == ["SQS:SendMessage", "SQS:ReceiveMessage"]


def test_deduplication_scope_message_group_is_honoured(sqs: Any, name: str) -> None:
    url = sqs.create_queue(
        QueueName=f"{name}.fifo",
        Attributes={
            "FifoQueue": "true",
            "DeduplicationScope": "messageGroup",
            "FifoThroughputLimit": "perMessageGroupId",
        },
    )["QueueUrl"]
    for group in ("a", "b", "a"):
        sqs.send_message(
            QueueUrl=url, MessageBody=group, MessageGroupId=group, MessageDeduplicationId="d"
        )
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in got) == ["a", "b"]  # the second "a" was a duplicate
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["DeduplicationScope"] == "messageGroup"
    sqs.set_queue_attributes(
        QueueUrl=url, Attributes={"DeduplicationScope": "queue", "FifoThroughputLimit": "perQueue"}
    )
    sqs.send_message(QueueUrl=url, MessageBody="c", MessageGroupId="c", MessageDeduplicationId="e")
    sqs.send_message(QueueUrl=url, MessageBody="d", MessageGroupId="d", MessageDeduplicationId="e")
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in got] == ["c"]  # across the queue now
    code, _ = _error(
        sqs.set_queue_attributes,
        QueueUrl=url,
        Attributes={"FifoThroughputLimit": "perMessageGroupId"},
    )
    assert code == "InvalidAttributeValue"


QUEUE_ERRORS = [
    ({"MessageRetentionPeriod": "1"}, "Invalid value for the parameter MessageRetentionPeriod."),
    ({"VisibilityTimeout": "abc"}, "Invalid value for the parameter VisibilityTimeout."),
    ({"QueueArn": "x"}, "Unknown Attribute QueueArn."),
    ({"ContentBasedDeduplication": "true"}, "Unknown Attribute ContentBasedDeduplication."),
    (
        {"DeduplicationScope": "queue"},
        "You can specify the DeduplicationScope only when FifoQueue is set to true.",
    ),
    (
        {"RedrivePolicy": "notjson"},
        "Invalid value for the parameter RedrivePolicy. Reason: Redrive policy is not a valid"
        " JSON map.",
    ),
    (
        {"RedrivePolicy": '{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:x",'
         '"maxReceiveCount":0}'},
        'Value {"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:x",'
        '"maxReceiveCount":0} for parameter RedrivePolicy is invalid. Reason: Invalid value for'
        " maxReceiveCount: 0, valid values are from 1 to 1000 both inclusive.",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("attributes", "text"), QUEUE_ERRORS)
def test_queue_attribute_errors_in_sqs_words(
    sqs: Any, name: str, attributes: dict[str, str], text: str
) -> None:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    assert _error(sqs.set_queue_attributes, QueueUrl=url, Attributes=attributes)[1] == text
    assert _error(sqs.create_queue, QueueName=f"{name}x", Attributes=attributes)[1] == text


def test_queue_kind_and_message_errors_in_sqs_words(sqs: Any, name: str) -> None:
    fifo = _fifo(sqs, name)
    sqs.set_queue_attributes(QueueUrl=fifo, Attributes={"FifoQueue": "true"})  # what it is
    # a standard queue knows no FifoQueue attribute, whatever its value
    url = sqs.create_queue(QueueName=f"{name}-std")["QueueUrl"]
    unknown = ("InvalidAttributeName", "Unknown Attribute FifoQueue.")
    assert _error(sqs.set_queue_attributes, QueueUrl=url, Attributes={"FifoQueue": "true"}) == (
        unknown
    )
    assert _error(
        sqs.create_queue, QueueName=f"{name}-std2", Attributes={"FifoQueue": "false"}
    ) == (unknown)
    assert _error(sqs.set_queue_attributes, QueueUrl=fifo, Attributes={"FifoQueue": "false"}) == (
        "InvalidAttributeValue",
        "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported.",
    )
    assert _error(sqs.create_queue, QueueName=name, Attributes={"FifoQueue": "true"})[1] == (
        "The name of a FIFO queue can only include alphanumeric characters, hyphens, or"
        " underscores, must end with .fifo suffix and be 1 to 80 in length."
    )
    assert _error(sqs.create_queue, QueueName=f"{name}x.fifo")[1] == (
        "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length"
    )
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    assert _error(sqs.send_message, QueueUrl=url, MessageBody="a\x01") == (
        "InvalidMessageContents",
        "Invalid binary character '#x1' was found in the message body, the set of allowed"
        " characters is #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to"
        " #x10FFFF",
    )
    many = {f"a{i}": {"DataType": "String", "StringValue": "v"} for i in range(11)}
    assert _error(sqs.send_message, QueueUrl=url, MessageBody="x", MessageAttributes=many)[1] == (
        "Number of message attributes [11] exceeds the allowed maximum [10]."
    )
    # a Number: up to 38 significant digits, zero or 10^-128 to 10^+126 in magnitude, in
    # decimal notation (Developer Guide, "Message attribute data types")
    refused = ("abc", "1e127", "-1.1e126", "1e-129", "1" * 39, "1_0", " 5", "NaN", "\u0665")
    for bad in (*refused, "1e" + "9" * 30, "0." + "0" * 200 + "1"):
        nan = {"n": {"DataType": "Number", "StringValue": bad}}
        assert _error(sqs.send_message, QueueUrl=url, MessageBody="x", MessageAttributes=nan)[
            1
        ] == ("Can't cast the value of message (user) attribute 'n' to a number."), bad
    good = ["1e126", "-1e-128", "1" + "0" * 60, "0." + "0" * 60 + "1" * 38, "+.5", "0e999"]
    for i, number in enumerate(good):
        sqs.send_message(
            QueueUrl=url,
            MessageBody=str(i),
            MessageAttributes={"n": {"DataType": "Number.x", "StringValue": number}},
        )
    got = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], VisibilityTimeout=0
    )["Messages"]
    assert sorted(m["MessageAttributes"]["n"]["StringValue"] for m in got) == sorted(good)
    sqs.purge_queue(QueueUrl=url)
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    other = sqs.create_queue(QueueName=f"{name}-to")["QueueUrl"]
    other_arn = sqs.get_queue_attributes(QueueUrl=other, AttributeNames=["QueueArn"])
    moved = _error(
        sqs.start_message_move_task,
        SourceArn=arn["QueueArn"],
        DestinationArn=other_arn["Attributes"]["QueueArn"],
    )  # a destination does not make a queue that is no dead-letter queue a source
    assert moved == (
        "InvalidParameterValue",
        "Source queue must be configured as a Dead Letter Queue.",
    )
    assert "Messages" not in sqs.receive_message(QueueUrl=url)


def test_receive_count_runs_on_in_the_dead_letter_queue(sqs: Any, name: str) -> None:
    dlq = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]
    policy = {"deadLetterTargetArn": arn["QueueArn"], "maxReceiveCount": 2}
    src = sqs.create_queue(QueueName=name, Attributes={"RedrivePolicy": json.dumps(policy)})
    sqs.send_message(QueueUrl=src["QueueUrl"], MessageBody="x")
    counts = []
    for _ in range(3):  # two receives, then the third attempt moves it
        got = sqs.receive_message(
            QueueUrl=src["QueueUrl"], AttributeNames=["All"], VisibilityTimeout=0
        ).get("Messages", [])
        counts += [m["Attributes"]["ApproximateReceiveCount"] for m in got]
    assert counts == ["1", "2"]
    (dead,) = sqs.receive_message(QueueUrl=dlq, AttributeNames=["All"])["Messages"]
    assert dead["Attributes"]["ApproximateReceiveCount"] == "3"  # "across all queues"
    sqs.change_message_visibility(
        QueueUrl=dlq, ReceiptHandle=dead["ReceiptHandle"], VisibilityTimeout=0
    )
    other = sqs.create_queue(QueueName=f"{name}-dlq2")["QueueUrl"]
    other_arn = sqs.get_queue_attributes(QueueUrl=other, AttributeNames=["QueueArn"])
    moved = {**policy, "deadLetterTargetArn": other_arn["Attributes"]["QueueArn"]}
    sqs.set_queue_attributes(
        QueueUrl=src["QueueUrl"], Attributes={"RedrivePolicy": json.dumps(moved)}
    )
    (again,) = sqs.receive_message(QueueUrl=dlq, AttributeNames=["All"])["Messages"]
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"  # its source names it no more


def test_message_attribute_names_take_all_and_prefixes(sqs: Any, name: str) -> None:
    url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "0"})["QueueUrl"]
    sqs.send_message(
        QueueUrl=url,
        MessageBody="m",
        MessageAttributes={
            k: {"DataType": "String", "StringValue": k} for k in ("Help.Me", "Hello", "General")
        },
    )

    def names(wanted: list[str]) -> set[str]:
        [m] = sqs.receive_message(QueueUrl=url, MessageAttributeNames=wanted)["Messages"]
        return set(m.get("MessageAttributes", {}))

    everything = {"Help.Me", "Hello", "General"}
    assert names(["All"]) == names([".*"]) == everything
    assert names(["Hel.*"]) == {"Help.Me", "Hello"}  # what comes before ".*" is the prefix
    assert names(["Help.*"]) == {"Help.Me"}
    assert names(["Foo", "Hello"]) == {"Hello"}
    assert names([]) == set()


def test_ids_ranges_and_recreated_queues_in_the_words_sqs_answers(sqs: Any, name: str) -> None:
    """The texts SQS itself answers (as recorded from AWS) for ordering ids, receive ranges,
    a CreateQueue that differs, an empty attribute value and FIFO-only attributes."""
    url = sqs.create_queue(QueueName=name, Attributes={"ReceiveMessageWaitTimeSeconds": "1"})[
        "QueueUrl"
    ]
    fifo = _fifo(sqs, name)
    reason = "can only include alphanumeric and punctuation characters. 1 to 128 in length."
    for bad in ("", "group 123", "a" * 129):
        assert _error(sqs.send_message, QueueUrl=url, MessageBody="m", MessageGroupId=bad) == (
            "InvalidParameterValue",
            f"Value {bad} for parameter MessageGroupId is invalid. Reason: MessageGroupId {reason}",
        )
        assert _error(
            sqs.send_message,
            QueueUrl=fifo,
            MessageBody="m",
            MessageGroupId="g",
            MessageDeduplicationId=bad,
        ) == (
            "InvalidParameterValue",
            f"Value {bad} for parameter MessageDeduplicationId is invalid. Reason:"
            f" MessageDeduplicationId {reason}",
        )
    assert _error(sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=11)[1] == (
        "Value 11 for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and"
        " 10, if provided."
    )
    for wait in (21, -1):
        assert _error(sqs.receive_message, QueueUrl=url, WaitTimeSeconds=wait)[1] == (
            f"Value {wait} for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and"
            " <= 20, if provided."
        )
    # the attribute named is the one that differs, by its SQS name
    assert _error(
        sqs.create_queue,
        QueueName=name,
        Attributes={"ReceiveMessageWaitTimeSeconds": "1", "DelaySeconds": "2"},
    ) == (
        "QueueAlreadyExists",
        "A queue already exists with the same name and a different value for attribute"
        " DelaySeconds",
    )
    assert _error(
        sqs.send_message,
        QueueUrl=url,
        MessageBody="m",
        MessageAttributes={"ErrorDetails": {"DataType": "String", "StringValue": ""}},
    ) == (
        "InvalidParameterValue",
        "Message (user) attribute 'ErrorDetails' must contain a non-empty value of type 'String'.",
    )
    for key, value in (("DeduplicationScope", "queue"), ("FifoThroughputLimit", "perQueue")):
        assert _error(sqs.create_queue, QueueName=f"{name}-{key}", Attributes={key: value}) == (
            "InvalidAttributeName",
            f"You can specify the {key} only when FifoQueue is set to true.",
        )


def test_a_kms_key_turns_sqs_managed_encryption_off_as_on_sqs(sqs: Any, name: str) -> None:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]

    def sse() -> dict[str, str]:
        got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        return {k: v for k, v in got.items() if k.startswith(("Kms", "SqsManaged"))}

    assert sse() == {"SqsManagedSseEnabled": "true"}
    kms = {"KmsMasterKeyId": "testKeyId", "KmsDataKeyReusePeriodSeconds": "6000"}
    sqs.set_queue_attributes(QueueUrl=url, Attributes=kms)
    assert sse() == {**kms, "SqsManagedSseEnabled": "false"}
    defaults = {"KmsMasterKeyId": "", "KmsDataKeyReusePeriodSeconds": "300"}
    sqs.set_queue_attributes(QueueUrl=url, Attributes=defaults)
    assert sse() == {"SqsManagedSseEnabled": "false"}  # off until it is turned on again
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"SqsManagedSseEnabled": "true"})
    assert sse() == {"SqsManagedSseEnabled": "true"}


def test_sizes_filters_and_batch_answers_as_sqs_gives_them(
    sqs: Any, server: LiveServer, name: str
) -> None:
    url = sqs.create_queue(QueueName=name, Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
    # an attribute adds its name, data type and value to the message's size
    attribute = {"k": {"DataType": "String", "StringValue": "x"}}
    sqs.send_message(QueueUrl=url, MessageBody="a" * 1016, MessageAttributes=attribute)
    assert _error(
        sqs.send_message, QueueUrl=url, MessageBody="a" * 1017, MessageAttributes=attribute
    )[1] == ("One or more parameters are invalid. Reason: Message must be shorter than 1024 bytes.")
    # a batch that succeeds whole has no Failed list
    sent = sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "b"}])
    assert "Failed" not in sent and [e["Id"] for e in sent["Successful"]] == ["a"]
    # "*" asks for every message attribute, as "All" and ".*" do
    got = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["*"], MaxNumberOfMessages=1)
    assert got["Messages"][0]["MessageAttributes"] == attribute
    # a body over the queue's limit fails its own entry; the others are sent
    bodies = {"x": "ü" * 513, "y": "y", "z": "z" * 1024}  # 1,026 bytes, 1, 1,024
    sent = sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": k, "MessageBody": v} for k, v in bodies.items()]
    )
    assert [e["Id"] for e in sent["Successful"]] == ["y", "z"]
    assert [e["MD5OfMessageBody"] for e in sent["Successful"]] == [
        hashlib.md5(bodies[k].encode()).hexdigest() for k in "yz"
    ]
    _one_failed(sent, "x", "InvalidParameterValue")
    # a standard queue's message with a group (a fair queue) has no SequenceNumber
    sqs.purge_queue(QueueUrl=url)
    sqs.send_message(QueueUrl=url, MessageBody="fair", MessageGroupId="tenant-1")
    [m] = sqs.receive_message(QueueUrl=url, MessageSystemAttributeNames=["All"])["Messages"]
    assert m["Attributes"]["MessageGroupId"] == "tenant-1"
    assert "SequenceNumber" not in m["Attributes"]
    # an empty batch in the Query protocol (``Entries=``) is an empty batch
    r = httpx.post(url, data={"Action": "SendMessageBatch", "SendMessageBatchRequestEntry": ""})
    assert r.status_code == 400 and "EmptyBatchRequest" in r.text
    # AddPermission writes its policy in the 2008 policy language, as SQS does
    sqs.add_permission(
        QueueUrl=url, Label="p", AWSAccountIds=["111111111111"], Actions=["SendMessage"]
    )
    policy = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])["Attributes"]
    assert json.loads(policy["Policy"])["Version"] == "2008-10-17"


def test_message_move_task_errors_in_the_words_sqs_answers(sqs: Any, name: str) -> None:
    source, dlq = queue_with_dlq(sqs, name)
    source_arn, dlq_arn = arn_of(sqs, source), arn_of(sqs, dlq)
    missing = dlq_arn.replace(f"{name}-dlq", f"{name}-nowhere")
    assert _error(sqs.start_message_move_task, SourceArn=dlq_arn, DestinationArn=missing) == (
        "ResourceNotFoundException",
        "The resource that you specified for the DestinationArn parameter doesn't exist.",
    )
    for i in range(50):
        sqs.send_message(QueueUrl=dlq, MessageBody=f"m{i}")
    running = sqs.start_message_move_task(
        SourceArn=dlq_arn, DestinationArn=source_arn, MaxNumberOfMessagesPerSecond=1
    )["TaskHandle"]
    assert _error(sqs.start_message_move_task, SourceArn=dlq_arn) == (
        "InvalidParameterValue",
        "There is already a task running. Only one active task is allowed for a source queue"
        " arn at a given time.",
    )
    assert _error(sqs.cancel_message_move_task, TaskHandle="foobared") == (
        "InvalidParameterValue",
        "Value for parameter TaskHandle is invalid.",
    )

    def handle(source_arn: str) -> str:
        named = {"taskId": "10f57157-fc38-4da9-a113-4de7e12d05aa", "sourceArn": source_arn}
        return base64.b64encode(json.dumps(named).encode()).decode()

    assert _error(sqs.cancel_message_move_task, TaskHandle=handle(missing)) == (
        "ResourceNotFoundException",
        "The resource that you specified for the SourceArn parameter doesn't exist.",
    )
    assert _error(sqs.cancel_message_move_task, TaskHandle=handle(dlq_arn)) == (
        "ResourceNotFoundException",
        "Task does not exist.",
    )
    assert sqs.cancel_message_move_task(TaskHandle=running)["ApproximateNumberOfMessagesMoved"] < 50


def test_a_queue_may_be_its_own_dead_letter_queue_as_on_sqs(sqs: Any, name: str) -> None:
    """SQS takes such a RedrivePolicy: it is kept and shown, and moves nothing (a message
    stays where it would go)."""
    url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "0"})["QueueUrl"]
    own = json.dumps({"deadLetterTargetArn": arn_of(sqs, url), "maxReceiveCount": "1"})
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": own})
    policy = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert json.loads(policy["RedrivePolicy"]) == {
        "deadLetterTargetArn": arn_of(sqs, url),
        "maxReceiveCount": 1,
    }
    sqs.send_message(QueueUrl=url, MessageBody="stays")
    for count in range(1, 4):  # past maxReceiveCount, still delivered from here
        [m] = sqs.receive_message(QueueUrl=url, AttributeNames=["All"])["Messages"]
        assert m["Attributes"]["ApproximateReceiveCount"] == str(count)
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": ""})
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert "RedrivePolicy" not in attributes


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_visibility_is_extended_at_most_twelve_hours_from_the_receive(
    store: str, tmp_path: Path
) -> None:
    clock = ManualClock(start=time.time())
    url = "memory://" if store == "memory" else f"sqlite:///{tmp_path}/q.db"
    with Client(url, clock=clock) as client, LiveServer(client) as live:
        sqs = live.sqs()
        q = sqs.create_queue(QueueName="longjob")["QueueUrl"]
        sqs.send_message_batch(
            QueueUrl=q, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(2)]
        )
        got = sqs.receive_message(QueueUrl=q, MaxNumberOfMessages=2, VisibilityTimeout=30)
        first, second = (m["ReceiptHandle"] for m in got["Messages"])
        sqs.change_message_visibility(QueueUrl=q, ReceiptHandle=first, VisibilityTimeout=43200)
        sqs.change_message_visibility(QueueUrl=q, ReceiptHandle=second, VisibilityTimeout=43200)
        clock.advance(11 * 3600)
        code, text = _error(
            sqs.change_message_visibility, QueueUrl=q, ReceiptHandle=first, VisibilityTimeout=3601
        )
        assert code == "InvalidParameterValue"
        assert text == (
            "Value 3601 for parameter VisibilityTimeout is invalid. Reason: Total"
            " VisibilityTimeout for the message is beyond the limit [43200 seconds]"
        )
        batch = sqs.change_message_visibility_batch(
            QueueUrl=q,
            Entries=[
                {"Id": "ok", "ReceiptHandle": first, "VisibilityTimeout": 3600},
                {"Id": "late", "ReceiptHandle": second, "VisibilityTimeout": 7200},
            ],
        )
        assert [e["Id"] for e in batch["Successful"]] == ["ok"]
        assert "beyond the limit" in _one_failed(batch, "late", "InvalidParameterValue")
        # releasing is always allowed; a fresh receive starts a fresh twelve hours
        sqs.change_message_visibility(QueueUrl=q, ReceiptHandle=second, VisibilityTimeout=0)
        again = sqs.receive_message(QueueUrl=q, VisibilityTimeout=30)["Messages"][0]
        assert again["Body"] == "m1"
        sqs.change_message_visibility(
            QueueUrl=q, ReceiptHandle=again["ReceiptHandle"], VisibilityTimeout=43200
        )


def test_a_claim_s_age_is_read_from_its_token_across_the_stamp_s_wrap() -> None:
    wrap = 1 << 24
    token = claim_token(5 * wrap - 5)
    receipt = f"cQ.{token}.1f.0193a4b2-0000-7000-8000-000000000000"
    assert seconds_since_claim(receipt, 5 * wrap - 5) == 0
    assert seconds_since_claim(receipt, 5 * wrap + 10) == 15
    # a stamp older than any message lives is not trusted (a token made before stamps)
    assert seconds_since_claim(receipt, 5 * wrap + 30 * 86400) is None
    assert seconds_since_claim("not-a-receipt", 0) is None
    assert seconds_since_claim("cQ.zzzzzz0000000000.1.x", 0) is None
