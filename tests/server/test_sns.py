"""The SNS API through boto3's `sns` client (Query protocol) against a live server, with
deliveries read by boto3's `sqs` client (the AWS CLI's `aws sns`: test_awscli.py)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError

from conveyor import Client
from conveyor.server.sns.publication import copy_id

from ..support.live import LiveServer
from .snsclients import bodies, code, message, queue, subscribe


def test_topic_lifecycle_attributes_and_pagination(sns: Any, name: str, store: Client) -> None:
    arn = sns.create_topic(Name=name, Attributes={"DisplayName": "Orders"})["TopicArn"]
    assert arn == f"arn:aws:sns:us-east-1:000000000000:{name}"
    assert sns.create_topic(Name=name)["TopicArn"] == arn  # idempotent
    with pytest.raises(ClientError) as exc:
        sns.create_topic(Name=name, Attributes={"DisplayName": "Other"})
    assert code(exc) == "InvalidParameter" and "different attributes" in str(exc.value)
    attrs = sns.get_topic_attributes(TopicArn=arn)["Attributes"]
    assert attrs["DisplayName"] == "Orders" and attrs["TopicArn"] == arn
    assert attrs["Owner"] == "000000000000" and attrs["SubscriptionsConfirmed"] == "0"
    assert json.loads(attrs["Policy"])["Statement"][0]["Resource"] == arn
    sns.set_topic_attributes(TopicArn=arn, AttributeName="DisplayName", AttributeValue="New")
    assert sns.get_topic_attributes(TopicArn=arn)["Attributes"]["DisplayName"] == "New"
    # one model: the SDK sees the topic SNS made
    assert name in store.list_topics() and store.topic_settings(name)["DisplayName"] == "New"

    more = [sns.create_topic(Name=f"{name}-{i:03d}")["TopicArn"] for i in range(105)]
    listed: list[str] = []
    page = sns.list_topics()
    listed += [t["TopicArn"] for t in page["Topics"]]
    assert len(page["Topics"]) == 100 and "NextToken" in page
    while "NextToken" in page:
        page = sns.list_topics(NextToken=page["NextToken"])
        listed += [t["TopicArn"] for t in page["Topics"]]
    assert set(more) | {arn} <= set(listed) and len(listed) == len(set(listed))
    for t in [*more, arn]:
        sns.delete_topic(TopicArn=t)
    sns.delete_topic(TopicArn=arn)  # deleting a deleted topic is no error
    with pytest.raises(ClientError) as exc:
        sns.get_topic_attributes(TopicArn=arn)
    assert code(exc) == "NotFound"
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_names_and_attributes_are_checked(sns: Any, name: str) -> None:
    for bad, options in (
        ("has space", {}),
        ("x" * 257, {}),
        (f"{name}.fifo", {}),  # a .fifo name without FifoTopic
        (name, {"Attributes": {"FifoTopic": "true"}}),  # FifoTopic without .fifo
        (name, {"Attributes": {"Bogus": "1"}}),
        (name, {"Attributes": {"ContentBasedDeduplication": "true"}}),
    ):
        with pytest.raises(ClientError) as exc:
            sns.create_topic(Name=bad, **options)
        assert code(exc) == "InvalidParameter", (bad, options)
    with pytest.raises(ClientError) as exc:
        sns.get_topic_attributes(TopicArn="arn:aws:sqs:us-east-1:000000000000:x")
    assert code(exc) == "InvalidParameter"
    with pytest.raises(ClientError) as exc:
        sns.publish(TopicArn=f"arn:aws:sns:us-east-1:000000000000:{name}-none", Message="x")
    assert code(exc) == "NotFound"


def test_fan_out_envelope_raw_and_subscriptions(
    sns: Any, server: LiveServer, name: str, store: Client
) -> None:
    sqs = server.sqs()
    topic = sns.create_topic(Name=name)["TopicArn"]
    wrapped_url, wrapped_arn = queue(sqs, f"{name}-wrapped")
    raw_url, raw_arn = queue(sqs, f"{name}-raw")
    sub1 = sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=wrapped_arn)["SubscriptionArn"]
    sub2 = subscribe(sns, topic, raw_arn, RawMessageDelivery="true")
    assert sub1.startswith(topic + ":") and sub1 != sub2
    again = sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=wrapped_arn)
    assert again["SubscriptionArn"] == sub1  # idempotent
    with pytest.raises(ClientError) as exc:
        sns.subscribe(
            TopicArn=topic,
            Protocol="sqs",
            Endpoint=wrapped_arn,
            Attributes={"RawMessageDelivery": "true"},
        )
    assert code(exc) == "InvalidParameter"
    with pytest.raises(ClientError) as exc:
        sns.subscribe(TopicArn=topic, Protocol="email", Endpoint="a@example.com")
    assert code(exc) == "InvalidParameter" and "not served here" in message(exc)
    with pytest.raises(ClientError) as exc:
        sns.subscribe(TopicArn=topic, Protocol="test-protocol", Endpoint="x")
    assert message(exc) == (
        "Invalid parameter: Amazon SNS does not support this protocol string: test-protocol"
    )

    by_topic = sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
    assert {s["SubscriptionArn"] for s in by_topic} == {sub1, sub2}
    assert {s["Endpoint"] for s in by_topic} == {wrapped_arn, raw_arn}
    assert all(s["Protocol"] == "sqs" and s["TopicArn"] == topic for s in by_topic)
    assert {sub1, sub2} <= {s["SubscriptionArn"] for s in sns.list_subscriptions()["Subscriptions"]}
    attrs = sns.get_subscription_attributes(SubscriptionArn=sub2)["Attributes"]
    assert attrs["RawMessageDelivery"] == "true" and attrs["Endpoint"] == raw_arn
    assert attrs["PendingConfirmation"] == "false" and attrs["Protocol"] == "sqs"
    assert store.subscriptions(name)[f"{name}-raw"] == {
        "RawMessageDelivery": "true",
        "SubscriptionPrincipal": "arn:aws:iam::000000000000:user/anonymous",  # who subscribed
    }

    sent = sns.publish(
        TopicArn=topic,
        Message="hello",
        Subject="greeting",
        MessageAttributes={
            "kind": {"DataType": "String", "StringValue": "order"},
            "n": {"DataType": "Number", "StringValue": "42"},
            "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01"},
        },
    )
    [m] = bodies(sqs, wrapped_url)
    wrapped_id = m["MessageId"]
    envelope = json.loads(m["Body"])
    assert envelope["Type"] == "Notification" and envelope["MessageId"] == sent["MessageId"]
    assert envelope["TopicArn"] == topic and envelope["Message"] == "hello"
    assert envelope["Subject"] == "greeting" and envelope["Timestamp"].endswith("Z")
    assert envelope["SignatureVersion"] == "1" and envelope["Signature"]
    assert envelope["UnsubscribeURL"].endswith(f"/?Action=Unsubscribe&SubscriptionArn={sub1}")
    assert envelope["MessageAttributes"]["kind"] == {"Type": "String", "Value": "order"}
    assert envelope["MessageAttributes"]["n"] == {"Type": "Number", "Value": "42"}
    assert envelope["MessageAttributes"]["blob"] == {"Type": "Binary", "Value": "AAE="}
    [m] = bodies(sqs, raw_url, MessageAttributeNames=["All"])
    assert m["Body"] == "hello"
    # as on SNS, each queue's copy has an SQS message id of its own
    assert len({sent["MessageId"], wrapped_id, m["MessageId"]}) == 3
    assert all(uuid.UUID(i).version == 4 for i in (wrapped_id, m["MessageId"]))
    assert m["MessageAttributes"]["kind"] == {"StringValue": "order", "DataType": "String"}
    assert m["MessageAttributes"]["n"] == {"StringValue": "42", "DataType": "Number"}
    assert m["MessageAttributes"]["blob"] == {"BinaryValue": b"\x00\x01", "DataType": "Binary"}

    # MessageStructure json: the sqs entry goes to queues
    sns.publish(
        TopicArn=topic,
        MessageStructure="json",
        Message=json.dumps({"default": "plain", "sqs": "for queues"}),
    )
    assert [m["Body"] for m in bodies(sqs, raw_url)] == ["for queues"]
    assert json.loads(bodies(sqs, wrapped_url)[0]["Body"])["Message"] == "for queues"
    sns.publish(  # an entry that is not a string is ignored, as on SNS
        TopicArn=topic,
        MessageStructure="json",
        Message=json.dumps({"default": "plain", "sqs": {"field": "value"}}),
    )
    assert [m["Body"] for m in bodies(sqs, raw_url)] == ["plain"]
    assert json.loads(bodies(sqs, wrapped_url)[0]["Body"])["Message"] == "plain"
    for no_default in ('{"sqs": "x"}', '{"default": {"object": "x"}}', '["default"]'):
        with pytest.raises(ClientError) as exc:
            sns.publish(TopicArn=topic, MessageStructure="json", Message=no_default)
        assert message(exc) == (
            "Invalid parameter: Message Structure - No default entry in JSON message body"
        )
    with pytest.raises(ClientError) as exc:  # an application endpoint, which none are here
        sns.publish(TargetArn=f"{topic.rsplit(':', 1)[0]}:endpoint/APNS/app/1", Message="m")
    assert message(exc) == (
        "Invalid parameter: TargetArn Reason: No endpoint found for the target arn specified"
    )
    assert sns.publish(TargetArn=topic, Message="by its TargetArn")["MessageId"]
    assert [m["Body"] for m in bodies(sqs, raw_url)] == ["by its TargetArn"]
    bodies(sqs, wrapped_url)

    sns.set_subscription_attributes(
        SubscriptionArn=sub2, AttributeName="RawMessageDelivery", AttributeValue="false"
    )
    sns.publish(TopicArn=topic, Message="now wrapped")
    assert json.loads(bodies(sqs, raw_url)[0]["Body"])["Message"] == "now wrapped"
    bodies(sqs, wrapped_url)
    sns.unsubscribe(SubscriptionArn=sub2)
    sns.unsubscribe(SubscriptionArn=sub2)  # again: no error
    with pytest.raises(ClientError) as exc:
        sns.get_subscription_attributes(SubscriptionArn=sub2)
    assert code(exc) == "NotFound"
    sns.publish(TopicArn=topic, Message="only one")
    assert bodies(sqs, raw_url) == [] and len(bodies(sqs, wrapped_url)) == 1


def test_fifo_topic_to_fifo_queues_in_order_with_dedup(
    sns: Any, server: LiveServer, name: str
) -> None:
    sqs = server.sqs()
    topic = sns.create_topic(
        Name=f"{name}.fifo",
        Attributes={"FifoTopic": "true", "ContentBasedDeduplication": "true"},
    )["TopicArn"]
    assert sns.get_topic_attributes(TopicArn=topic)["Attributes"]["FifoTopic"] == "true"
    standard_url, standard_arn = queue(sqs, f"{name}-a-std")  # listed first
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=standard_arn)  # as SNS allows
    urls, arns = [], []
    for i in range(2):
        url, arn = queue(sqs, f"{name}-{i}.fifo", FifoQueue="true")
        arns.append(arn)
        sns.subscribe(
            TopicArn=topic,
            Protocol="sqs",
            Endpoint=arn,
            Attributes={"RawMessageDelivery": "true"},
        )
        urls.append(url)
    with pytest.raises(ClientError) as exc:
        sns.publish(TopicArn=topic, Message="no group")
    assert code(exc) == "InvalidParameter" and "MessageGroupId" in str(exc.value)
    ids = []
    for i in range(5):
        out = sns.publish(TopicArn=topic, Message=f"m{i}", MessageGroupId="g")
        assert out["SequenceNumber"].isdigit()
        ids.append(out["MessageId"])
    again = sns.publish(TopicArn=topic, Message="m0", MessageGroupId="g")  # content dedup
    assert again["MessageId"] == ids[0]
    for url in urls:
        got = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["MessageGroupId"]
        )["Messages"]
        assert [m["Body"] for m in got] == ["m0", "m1", "m2", "m3", "m4"]
        assert all(m["Attributes"]["MessageGroupId"] == "g" for m in got)
    # the standard queue gets the envelopes, and (de-duplication being the FIFO queues') the
    # duplicate too
    # duplicate too; a FIFO topic's group stays out of a standard queue
    standard = bodies(sqs, standard_url, AttributeNames=["All"])
    assert sorted(json.loads(m["Body"])["Message"] for m in standard) == [
        "m0", "m0", "m1", "m2", "m3", "m4"
    ]  # fmt: skip
    assert not any("MessageGroupId" in m["Attributes"] for m in standard)

    # a standard topic refuses de-duplication ids and FIFO queues, and passes a group on to
    # its standard queues (SQS fair queues)
    plain = sns.create_topic(Name=name)["TopicArn"]
    with pytest.raises(ClientError) as exc:
        sns.publish(TopicArn=plain, Message="x", MessageDeduplicationId="d")
    assert code(exc) == "InvalidParameter"
    sns.subscribe(TopicArn=plain, Protocol="sqs", Endpoint=standard_arn)
    sns.publish(TopicArn=plain, Message="fair", MessageGroupId="tenant-1")
    [fair] = bodies(sqs, standard_url, AttributeNames=["All"])
    assert fair["Attributes"]["MessageGroupId"] == "tenant-1"
    with pytest.raises(ClientError) as exc:
        sns.subscribe(TopicArn=plain, Protocol="sqs", Endpoint=arns[0])
    assert code(exc) == "InvalidParameter" and "FIFO" in str(exc.value)


def test_publish_batch_partial_failures(sns: Any, server: LiveServer, name: str) -> None:
    sqs = server.sqs()
    topic = sns.create_topic(Name=f"{name}.fifo", Attributes={"FifoTopic": "true"})["TopicArn"]
    url, arn = queue(sqs, f"{name}.fifo", FifoQueue="true", MaximumMessageSize="1024")
    dlq_url, dlq_arn = queue(sqs, f"{name}-dlq.fifo", FifoQueue="true")
    redrive = json.dumps({"deadLetterTargetArn": dlq_arn})
    subscribe(sns, topic, arn, RawMessageDelivery="true", RedrivePolicy=redrive)
    entries = [
        {"Id": "a", "Message": "one", "MessageGroupId": "g", "MessageDeduplicationId": "1"},
        {"Id": "b", "Message": "two", "MessageGroupId": "g"},  # no dedup id
        {"Id": "c", "Message": "three", "MessageGroupId": "g", "MessageDeduplicationId": "3"},
    ]
    with pytest.raises(ClientError) as exc:  # as on SNS: the whole batch, nothing published
        sns.publish_batch(TopicArn=topic, PublishBatchRequestEntries=entries)
    assert code(exc) == "InvalidParameter"
    assert message(exc) == (
        "Invalid parameter: The topic should either have ContentBasedDeduplication enabled or"
        " MessageDeduplicationId provided explicitly"
    )
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    entries[1] |= {"MessageDeduplicationId": "2", "Message": "x" * 2000}
    out = sns.publish_batch(TopicArn=topic, PublishBatchRequestEntries=entries)
    # as on SNS: what the topic takes is published; the queue subscribed refuses what is
    # too long for it, and that delivery goes to the subscription's dead-letter queue
    assert [s["Id"] for s in out["Successful"]] == ["a", "b", "c"] and out["Failed"] == []
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in got] == ["one", "three"]
    assert [m["Body"] for m in bodies(sqs, dlq_url)] == ["x" * 2000]

    bad: list[Any]
    for bad, expected in (
        ([], "EmptyBatchRequest"),
        ([{"Id": str(i), "Message": "x"} for i in range(11)], "TooManyEntriesInBatchRequest"),
        ([{"Id": "same", "Message": "x"}] * 2, "BatchEntryIdsNotDistinct"),
        ([{"Id": "x" * 81, "Message": "x"}], "InvalidBatchEntryId"),
        ([{"Id": "a.b", "Message": "x"}], "InvalidBatchEntryId"),  # letters, digits, - and _
        (
            [  # 256 KiB in all, counting the attributes' names, types and values
                {
                    "Id": str(i),
                    "Message": "x" * (131_072 - 8 + i),
                    "MessageGroupId": "g",
                    "MessageDeduplicationId": str(i),
                    "MessageAttributes": {"n": {"DataType": "Number", "StringValue": "1"}},
                }
                for i in range(2)
            ],
            "BatchRequestTooLong",
        ),
    ):
        with pytest.raises(ClientError) as exc:
            sns.publish_batch(TopicArn=topic, PublishBatchRequestEntries=bad)
        assert code(exc) == expected


def test_tags_and_regions(sns: Any, server: LiveServer, name: str, store: Client) -> None:
    arn = sns.create_topic(Name=name, Tags=[{"Key": "team", "Value": "a"}])["TopicArn"]
    sns.tag_resource(ResourceArn=arn, Tags=[{"Key": "env", "Value": "dev"}])
    assert sns.list_tags_for_resource(ResourceArn=arn)["Tags"] == [
        {"Key": "env", "Value": "dev"},
        {"Key": "team", "Value": "a"},
    ]
    sns.untag_resource(ResourceArn=arn, TagKeys=["team"])
    assert sns.list_tags_for_resource(ResourceArn=arn)["Tags"] == [{"Key": "env", "Value": "dev"}]
    with pytest.raises(ClientError) as exc:
        sns.list_tags_for_resource(ResourceArn=arn + "-none")
    assert code(exc) == "ResourceNotFound"
    # tags are not attributes
    assert "team" not in sns.get_topic_attributes(TopicArn=arn)["Attributes"]

    west = server.sns(region="eu-west-1")
    west_arn = west.create_topic(Name=name)["TopicArn"]
    assert west_arn == f"arn:aws:sns:eu-west-1:000000000000:{name}"
    assert west_arn not in [t["TopicArn"] for t in sns.list_topics()["Topics"]]
    assert f"eu-west-1:000000000000:{name}" in store.list_topics()


def test_a_queue_may_be_subscribed_before_it_exists(
    sns: Any, server: LiveServer, name: str
) -> None:
    sqs = server.sqs()
    topic = sns.create_topic(Name=name)["TopicArn"]
    arn = f"arn:aws:sqs:us-east-1:000000000000:{name}"
    sub = sns.subscribe(
        TopicArn=topic, Protocol="sqs", Endpoint=arn, Attributes={"RawMessageDelivery": "true"}
    )["SubscriptionArn"]
    listed = sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
    assert [s["SubscriptionArn"] for s in listed] == [sub]
    assert sns.get_topic_attributes(TopicArn=topic)["Attributes"]["SubscriptionsConfirmed"] == "1"
    sns.publish(TopicArn=topic, Message="nobody hears this")  # no queue yet: nothing kept
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sns.publish(TopicArn=topic, Message="now")
    assert [m["Body"] for m in bodies(sqs, url)] == ["now"]
    assert sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn)["SubscriptionArn"] == sub
    attrs = sns.get_subscription_attributes(SubscriptionArn=sub)["Attributes"]
    assert attrs["RawMessageDelivery"] == "true"
    # a waiting subscription can be changed and removed too
    later = f"arn:aws:sqs:us-east-1:000000000000:{name}-later"
    waiting = sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=later)["SubscriptionArn"]
    sns.set_subscription_attributes(
        SubscriptionArn=waiting, AttributeName="RawMessageDelivery", AttributeValue="true"
    )
    assert (
        sns.get_subscription_attributes(SubscriptionArn=waiting)["Attributes"]["RawMessageDelivery"]
        == "true"
    )
    sns.unsubscribe(SubscriptionArn=waiting)
    assert len(sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]) == 1
    with pytest.raises(ClientError) as exc:
        sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=url)  # a URL, not an ARN
    assert exc.value.response["Error"]["Message"] == "Invalid parameter: SQS endpoint ARN"


def test_regions_names_pages_and_caller_identity(sns: Any, server: LiveServer, name: str) -> None:
    long_name = "n" * 256
    arn = sns.create_topic(Name=long_name)["TopicArn"]
    assert arn.endswith(":" + long_name)
    west = server.sns(region="eu-west-1")
    assert west.create_topic(Name=long_name)["TopicArn"].startswith("arn:aws:sns:eu-west-1:")
    with pytest.raises(ClientError) as exc:
        west.publish(TopicArn=arn, Message="m")  # asked of another region's endpoint
    assert exc.value.response["Error"]["Message"] == "Invalid parameter: TopicArn"
    for bad_name, attributes in (("n.fifo", {"FifoTopic": "false"}), ("n", {"FifoTopic": "true"})):
        with pytest.raises(ClientError) as exc:
            sns.create_topic(Name=bad_name, Attributes=attributes)
        assert exc.value.response["Error"]["Message"] == "Invalid parameter: Topic Name"
    for bad_arn, parts in (("randomstring", 1), ("randomstring:1", 2), ("", 1)):
        with pytest.raises(ClientError) as exc:
            sns.publish(TopicArn=bad_arn, Message="m")
        assert exc.value.response["Error"]["Message"] == (
            f"Invalid parameter: TopicArn Reason: An ARN must have at least 6 elements, not {parts}"
        )
    for words, publication in (
        ("Empty message", {"Message": ""}),
        ("Subject", {"Message": "m", "Subject": ""}),
        ("Message too long", {"Message": "x" * 262145}),
    ):
        with pytest.raises(ClientError) as exc:
            sns.publish(TopicArn=arn, **publication)
        assert exc.value.response["Error"]["Message"] == f"Invalid parameter: {words}"
    plain = sns.create_topic(Name=name, Attributes={"FifoTopic": "false"})["TopicArn"]
    assert "FifoTopic" not in sns.get_topic_attributes(TopicArn=plain)["Attributes"]
    with pytest.raises(ClientError) as exc:
        sns.list_topics(NextToken="not-a-token")
    assert code(exc) == "InvalidParameter"
    sts = server.aws("sts", "us-east-1", "AKIDTEST", "x")
    identity = sts.get_caller_identity()
    assert identity["Account"] == "000000000000"
    assert identity["Arn"] == "arn:aws:iam::000000000000:user/anonymous"  # not verified
    for t in (arn, plain):
        sns.delete_topic(TopicArn=t)


def test_topics_and_subscriptions_answer_in_sns_words(
    sns: Any, server: LiveServer, name: str
) -> None:
    """What SNS itself answers (recorded against AWS): re-created topics and subscriptions,
    attribute values, tags and ARNs."""

    def error(call: Any, **params: Any) -> str:
        with pytest.raises(ClientError) as exc:
            call(**params)
        assert code(exc) == "InvalidParameter", exc.value.response
        return str(exc.value.response["Error"]["Message"])

    topic = sns.create_topic(Name=name, Attributes={"DisplayName": "one"})["TopicArn"]
    assert sns.create_topic(Name=name)["TopicArn"] == topic  # no attributes: the same topic
    sns.create_topic(Name=name, Attributes={"DisplayName": "one", "FifoTopic": "false"})
    for attributes in ({"DisplayName": "two"}, {"SignatureVersion": "2"}):
        assert error(sns.create_topic, Name=name, Attributes=attributes) == (
            "Invalid parameter: Attributes Reason: Topic already exists with different attributes"
        )
    assert error(sns.create_topic, Name=name, Tags=[{"Key": "k", "Value": "v"}]) == (
        "Invalid parameter: Tags Reason: Topic already exists with different tags"
    )
    twice = [{"Key": "k", "Value": "v"}, {"Key": "k", "Value": "v"}]
    assert error(sns.tag_resource, ResourceArn=topic, Tags=twice) == (
        "Invalid parameter: Duplicated keys are not allowed."
    )

    sqs = server.sqs()
    _, arn = queue(sqs, f"{name}-q")
    sub = subscribe(sns, topic, arn, RawMessageDelivery="True")
    attrs = sns.get_subscription_attributes(SubscriptionArn=sub)["Attributes"]
    assert attrs["RawMessageDelivery"] == "true"  # kept in lower case
    for same in ({"RawMessageDelivery": "true", "FilterPolicyScope": "MessageAttributes"}, {}):
        assert subscribe(sns, topic, arn, **same) == sub  # what it has, or defaults: the same
    assert (
        error(
            sns.subscribe,
            TopicArn=topic,
            Protocol="sqs",
            Endpoint=arn,
            Attributes={"FilterPolicyScope": "MessageBody"},
        )
        == "Invalid parameter: Attributes Reason: Subscription already exists with different"
        " attributes"
    )
    set_attribute = sns.set_subscription_attributes
    assert error(set_attribute, SubscriptionArn=sub, AttributeName="Nope", AttributeValue="x") == (
        "Invalid parameter: AttributeName"
    )
    assert (
        error(
            set_attribute,
            SubscriptionArn=sub,
            AttributeName="RawMessageDelivery",
            AttributeValue="x",
        )
        == "Invalid parameter: RawMessageDelivery: Invalid value [x]. Must be true or false."
    )
    for key in ("RedrivePolicy", "FilterPolicy"):
        assert (
            error(set_attribute, SubscriptionArn=sub, AttributeName=key, AttributeValue="{invalid")
            == f"Invalid parameter: {key}: failed to parse JSON."
        )
    assert (
        error(
            set_attribute,
            SubscriptionArn=sub,
            AttributeName="RedrivePolicy",
            AttributeValue=json.dumps({"deadLetterTargetArn": "fake-arn"}),
        )
        == "Invalid parameter: RedrivePolicy: deadLetterTargetArn is an invalid arn"
    )
    assert error(sns.confirm_subscription, TopicArn=topic, Token="abc") == (
        "Invalid parameter: Token"
    )
    # a malformed TopicArn is said before the token, in SNS's word for ConfirmSubscription
    assert error(sns.confirm_subscription, TopicArn="not-an-arn", Token="abc") == (
        "Invalid parameter: Topic"
    )
    for bad, words in (
        ("randomstring", "SubscriptionArn Reason: An ARN must have at least 6 elements, not 1"),
        (topic.rsplit(":", 1)[0], "SubscriptionArn Reason: An ARN must have at least 6 el"),
        (topic.rsplit(":", 1)[0] + ":random", "SubscriptionId"),
    ):
        assert error(sns.unsubscribe, SubscriptionArn=bad).startswith(f"Invalid parameter: {words}")


def test_fifo_topic_words_and_dead_letter_queue(sns: Any, server: LiveServer, name: str) -> None:
    """SNS's texts for a FIFO publish without its ids, and a FIFO subscription's
    dead-letter queue must be FIFO (as LocalStack's snapshots recorded from SNS)."""
    sqs = server.sqs()
    topic = sns.create_topic(Name=f"{name}.fifo", Attributes={"FifoTopic": "true"})["TopicArn"]
    _, fifo_arn = queue(sqs, f"{name}.fifo", FifoQueue="true")
    _, standard_arn = queue(sqs, f"{name}-std")
    _, fifo_dlq_arn = queue(sqs, f"{name}-dlq.fifo", FifoQueue="true")
    sub = subscribe(sns, topic, fifo_arn)
    with pytest.raises(ClientError) as exc:
        sns.set_subscription_attributes(
            SubscriptionArn=sub,
            AttributeName="RedrivePolicy",
            AttributeValue=json.dumps({"deadLetterTargetArn": standard_arn}),
        )
    assert message(exc) == (
        "Invalid parameter: RedrivePolicy: must use a FIFO queue as DLQ for a FIFO Subscription"
        " to a FIFO Topic."
    )
    sns.set_subscription_attributes(
        SubscriptionArn=sub,
        AttributeName="RedrivePolicy",
        AttributeValue=json.dumps({"deadLetterTargetArn": fifo_dlq_arn}),
    )
    standard_sub = subscribe(sns, topic, standard_arn)  # a standard queue's may be standard
    sns.set_subscription_attributes(
        SubscriptionArn=standard_sub,
        AttributeName="RedrivePolicy",
        AttributeValue=json.dumps({"deadLetterTargetArn": standard_arn}),
    )
    with pytest.raises(ClientError) as exc:
        sns.publish(TopicArn=topic, Message="m")
    assert message(exc) == (
        "Invalid parameter: The MessageGroupId parameter is required for FIFO topics"
    )
    with pytest.raises(ClientError) as exc:
        sns.publish(TopicArn=topic, Message="m", MessageGroupId="g")
    assert message(exc) == (
        "Invalid parameter: The topic should either have ContentBasedDeduplication enabled or"
        " MessageDeduplicationId provided explicitly"
    )


def test_a_subscription_outlives_its_queue_and_dead_letters_meanwhile(
    sns: Any, server: LiveServer, name: str
) -> None:
    """As on SNS: deleting a queue leaves its subscription; publishes made while the queue
    is gone go to the subscription's dead-letter queue (as the queue would have had them),
    and a queue made again under the name gets the publishes made after."""
    sqs = server.sqs()
    topic = sns.create_topic(Name=name)["TopicArn"]
    url, arn = queue(sqs, f"{name}-q")
    dlq_url, dlq_arn = queue(sqs, f"{name}-dlq")
    sub = subscribe(sns, topic, arn, RawMessageDelivery="true")
    sns.set_subscription_attributes(
        SubscriptionArn=sub,
        AttributeName="RedrivePolicy",
        AttributeValue=json.dumps({"deadLetterTargetArn": dlq_arn}),
    )
    sqs.delete_queue(QueueUrl=url)
    listed = sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
    assert [s["SubscriptionArn"] for s in listed] == [sub]
    assert sns.get_subscription_attributes(SubscriptionArn=sub)["Attributes"]["Endpoint"] == arn
    attributes = {"n": {"DataType": "Number", "StringValue": "111"}}
    sns.publish(TopicArn=topic, Message="while gone", MessageAttributes=attributes)
    [dead] = bodies(sqs, dlq_url, MessageAttributeNames=["All"])
    assert dead["Body"] == "while gone"
    assert dead["MessageAttributes"] == {"n": {"StringValue": "111", "DataType": "Number"}}
    url, _ = queue(sqs, f"{name}-q")
    sns.publish(TopicArn=topic, Message="back")
    assert [m["Body"] for m in bodies(sqs, url)] == ["back"]
    assert "Messages" not in sqs.receive_message(QueueUrl=dlq_url)
    sns.unsubscribe(SubscriptionArn=sub)
    sqs.delete_queue(QueueUrl=url)  # unsubscribed: nothing is kept
    assert sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"] == []


def test_the_x_ray_trace_header_of_a_publish_reaches_the_queues(
    sns: Any, server: LiveServer, name: str
) -> None:
    trace = "Root=1-3152b799-8954dae64eda91bc9a23a7e8;Parent=7fa8c0f79203be72;Sampled=1"

    def add_trace(request: Any, **_: Any) -> None:
        request.headers["X-Amzn-Trace-Id"] = trace

    sqs = server.sqs()
    topic = sns.create_topic(Name=name)["TopicArn"]
    wrapped_url, wrapped_arn = queue(sqs, f"{name}-wrapped")
    raw_url, raw_arn = queue(sqs, f"{name}-raw")
    subscribe(sns, topic, wrapped_arn)
    subscribe(sns, topic, raw_arn, RawMessageDelivery="true")
    sns.meta.events.register("before-send.sns.Publish", add_trace)
    try:
        sns.publish(TopicArn=topic, Message="traced")
    finally:
        sns.meta.events.unregister("before-send.sns.Publish", add_trace)
    sns.publish(TopicArn=topic, Message="plain")  # a request without one: none
    for url in (wrapped_url, raw_url):
        got = bodies(sqs, url, AttributeNames=["AWSTraceHeader"], MessageAttributeNames=["All"])
        traced = {
            m["Body"]
            if m["Body"] in ("traced", "plain")
            else json.loads(m["Body"])["Message"]: m.get("Attributes", {}).get("AWSTraceHeader")
            for m in got
        }
        assert traced == {"traced": trace, "plain": None}
        assert all("AWSTraceHeader" not in m.get("MessageAttributes", {}) for m in got)


def test_add_and_remove_permission_edit_the_topic_policy(sns: Any, name: str) -> None:
    topic = sns.create_topic(Name=name)["TopicArn"]

    def policy() -> dict[str, Any]:
        text = sns.get_topic_attributes(TopicArn=topic)["Attributes"]["Policy"]
        loaded: dict[str, Any] = json.loads(text)
        return loaded

    default = policy()
    assert default["Version"] == "2008-10-17"
    assert [st["Sid"] for st in default["Statement"]] == ["__default_statement_ID"]
    sns.add_permission(
        TopicArn=topic, Label="one", AWSAccountId=["111111111111"], ActionName=["Publish"]
    )
    sns.add_permission(
        TopicArn=topic,
        Label="two",
        AWSAccountId=["111111111111", "222222222222"],
        ActionName=["Publish", "Subscribe"],
    )
    statements = {st["Sid"]: st for st in policy()["Statement"]}
    assert statements["one"] == {
        "Sid": "one",
        "Effect": "Allow",
        "Principal": {"AWS": "arn:aws:iam::111111111111:root"},
        "Action": "SNS:Publish",
        "Resource": topic,
    }
    assert statements["two"]["Action"] == ["SNS:Publish", "SNS:Subscribe"]
    assert len(statements["two"]["Principal"]["AWS"]) == 2

    def error(**params: Any) -> tuple[str, str]:
        with pytest.raises(ClientError) as exc:
            sns.add_permission(**params)
        e = exc.value.response["Error"]
        return e["Code"], e["Message"]

    again = {"AWSAccountId": ["111111111111"], "ActionName": ["Publish"]}
    assert error(TopicArn=topic, Label="one", **again) == (
        "InvalidParameter",
        "Invalid parameter: Statement already exists",
    )
    assert error(TopicArn=f"{topic}-gone", Label="x", **again) == (
        "NotFound",
        "Topic does not exist",
    )
    assert error(TopicArn=topic, Label="x", AWSAccountId=["111111111111"], ActionName=["Nope"]) == (
        "InvalidParameter",
        "Invalid parameter: Policy statement action out of service scope!",
    )
    sns.remove_permission(TopicArn=topic, Label="one")
    sns.remove_permission(TopicArn=topic, Label="two")
    assert policy() == default


def test_a_copy_s_id_is_its_own_and_leads_back_to_the_publish() -> None:
    publish = str(uuid.uuid4())
    one, two = copy_id(publish, "a"), copy_id(publish, "b")
    assert len({publish, one, two}) == 3
    assert uuid.UUID(one).version == 4 and uuid.UUID(two).variant == uuid.RFC_4122
    assert copy_id(one, "a") == publish and copy_id(two, "b") == publish
    assert copy_id("order-1", "a") == "order-1"  # a sender's own id is kept as it is


def test_content_type_json_and_regions_that_are_not_region_names(
    server: LiveServer, name: str
) -> None:
    """SNS answers JSON to `ContentType=JSON` (errors too); a signature's region must be a
    region name (a client pointed at 127.0.0.1 may sign for region `0`)."""
    import httpx

    r = httpx.post(
        server.url + "/", data={"Action": "CreateTopic", "Name": name, "ContentType": "JSON"}
    )
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    arn = r.json()["CreateTopicResponse"]["CreateTopicResult"]["TopicArn"]
    assert arn.endswith(f":{name}")
    r = httpx.post(
        server.url + "/",
        data={"Action": "GetTopicAttributes", "TopicArn": arn + "x", "ContentType": "JSON"},
    )
    assert r.status_code == 404 and r.json()["Error"]["Code"] == "NotFound"
    assert "RequestId" in r.json()
    auth = (
        "AWS4-HMAC-SHA256 Credential=AKIDTEST/20260101/0/sns/aws4_request,"
        " SignedHeaders=host, Signature=" + "0" * 64
    )
    r = httpx.post(server.url + "/", data={"Action": "ListTopics"}, headers={"Authorization": auth})
    assert r.status_code == 403 and "is not a region name" in r.text
