"""SNS message attributes as Publish checks them, in SNS's words, and the filter policies
that choose by them (or by the body) which subscribed queues get a message."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from ..support.live import LiveServer
from .snsclients import bodies, code, message, queue, subscribe


def test_json_nested_past_the_parsers_depth_is_bad_json_not_a_failure(
    sns: Any, server: LiveServer, name: str
) -> None:
    """A filter policy, a topic policy or a JSON message structure nested deeper than the
    parser goes is refused as JSON that does not parse; a message body nested so deep does
    not match a body filter and is published to the others, and nothing fails."""
    sqs = server.sqs()
    deep = "[" * 5000 + "]" * 5000
    topic = sns.create_topic(Name=name)["TopicArn"]
    url, arn = queue(sqs, f"{name}-body")
    policy = json.dumps({"kind": ["order"]})
    sub = subscribe(
        sns,
        topic,
        arn,
        RawMessageDelivery="true",
        FilterPolicy=policy,
        FilterPolicyScope="MessageBody",
    )
    plain_url, plain_arn = queue(sqs, f"{name}-all")
    subscribe(sns, topic, plain_arn, RawMessageDelivery="true")
    for call, params, words in (
        (
            sns.set_subscription_attributes,
            {"SubscriptionArn": sub, "AttributeName": "FilterPolicy", "AttributeValue": deep},
            "Invalid parameter: FilterPolicy: failed to parse JSON.",
        ),
        (
            sns.set_topic_attributes,
            {"TopicArn": topic, "AttributeName": "Policy", "AttributeValue": deep},
            "Invalid parameter: Policy: not valid JSON",
        ),
        (
            sns.publish,
            {"TopicArn": topic, "Message": deep, "MessageStructure": "json"},
            "Invalid parameter: Message Structure - JSON message body failed to parse",
        ),
    ):
        with pytest.raises(ClientError) as exc:
            call(**params)
        assert code(exc) == "InvalidParameter" and message(exc) == words
    sns.publish(TopicArn=topic, Message=deep)
    sns.publish(TopicArn=topic, Message=json.dumps({"kind": "order"}))
    assert [m["Body"] for m in bodies(sqs, url)] == ['{"kind": "order"}']
    assert sorted(m["Body"] for m in bodies(sqs, plain_url)) == sorted([deep, '{"kind": "order"}'])
    attributes = sns.get_subscription_attributes(SubscriptionArn=sub)["Attributes"]
    assert attributes["FilterPolicy"] == policy


def test_filter_policies_on_attributes_and_body(sns: Any, server: LiveServer, name: str) -> None:
    sqs = server.sqs()
    topic = sns.create_topic(Name=name)["TopicArn"]
    urls: dict[str, str] = {}
    policies = {
        "exact": ({"kind": ["order", "refund"]}, "MessageAttributes"),
        "numeric": ({"price": [{"numeric": [">=", 10, "<", 100]}]}, "MessageAttributes"),
        "prefix": ({"region": [{"prefix": "eu-"}]}, "MessageAttributes"),
        "anything": ({"kind": [{"anything-but": ["order"]}]}, "MessageAttributes"),
        "missing": ({"vip": [{"exists": False}]}, "MessageAttributes"),
        "body": ({"order": {"total": [{"numeric": [">", 5]}]}}, "MessageBody"),
        "either": (
            {"$or": [{"kind": ["refund"]}, {"region": ["us-east-1"]}]},
            "MessageAttributes",
        ),
    }
    for key, (policy, scope) in policies.items():
        url, arn = queue(sqs, f"{name}-{key}")
        urls[key] = url
        sns.subscribe(
            TopicArn=topic,
            Protocol="sqs",
            Endpoint=arn,
            Attributes={
                "RawMessageDelivery": "true",
                "FilterPolicy": json.dumps(policy),
                "FilterPolicyScope": scope,
            },
        )

    def publish(message: str, **attributes: Any) -> None:
        wire = {
            k: {"DataType": "Number", "StringValue": str(v)}
            if isinstance(v, int)
            else {"DataType": "String", "StringValue": v}
            for k, v in attributes.items()
        }
        sns.publish(TopicArn=topic, Message=message, MessageAttributes=wire)

    publish("m1", kind="order", price=50, region="eu-west-1")
    publish("m2", kind="refund", price=5, region="us-east-1", vip="yes")
    publish("m3", kind="other", price=100)
    publish(json.dumps({"order": {"total": 9}}))
    publish(json.dumps({"order": {"total": 2}}), kind="order")

    got = {key: sorted(m["Body"] for m in bodies(sqs, url)) for key, url in urls.items()}
    assert got["exact"] == sorted(['{"order": {"total": 2}}', "m1", "m2"])
    assert got["numeric"] == ["m1"]  # 5 is below, 100 not below 100
    assert got["prefix"] == ["m1"]
    assert got["anything"] == ["m2", "m3"]  # present and not "order"; absent never matches
    assert got["missing"] == sorted(
        ['{"order": {"total": 2}}', '{"order": {"total": 9}}', "m1", "m3"]
    )
    assert got["body"] == ['{"order": {"total": 9}}']
    assert got["either"] == ["m2"]

    [sub] = [
        s["SubscriptionArn"]
        for s in sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
        if s["Endpoint"].endswith(f"{name}-exact")
    ]
    for bad in ('{"kind": "order"}', "not json", '{"a": [{"numeric": ["~", 1]}]}',
                '{"a": [1], "b": [1], "c": [1], "d": [1], "e": [1], "f": [1]}'):  # fmt: skip
        with pytest.raises(ClientError) as exc:
            sns.set_subscription_attributes(
                SubscriptionArn=sub, AttributeName="FilterPolicy", AttributeValue=bad
            )
        assert code(exc) == "InvalidParameter", bad
    attrs = sns.get_subscription_attributes(SubscriptionArn=sub)["Attributes"]
    assert json.loads(attrs["FilterPolicy"]) == policies["exact"][0]
    assert attrs["FilterPolicyScope"] == "MessageAttributes"
    # the scope is shown with a policy only, and applies to the policy set after it
    _, arn = queue(sqs, f"{name}-scoped")
    scoped = sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn)["SubscriptionArn"]
    sns.set_subscription_attributes(
        SubscriptionArn=scoped, AttributeName="FilterPolicyScope", AttributeValue="MessageBody"
    )
    shown = sns.get_subscription_attributes(SubscriptionArn=scoped)["Attributes"]
    assert "FilterPolicyScope" not in shown
    sns.set_subscription_attributes(
        SubscriptionArn=scoped, AttributeName="FilterPolicy", AttributeValue='{"a": {"b": ["c"]}}'
    )
    shown = sns.get_subscription_attributes(SubscriptionArn=scoped)["Attributes"]
    assert shown["FilterPolicyScope"] == "MessageBody"
    with pytest.raises(ClientError) as exc:
        sns.set_subscription_attributes(
            SubscriptionArn=sub, AttributeName="FilterPolicyScope", AttributeValue="Random"
        )
    assert exc.value.response["Error"]["Message"] == (
        "Invalid parameter: FilterPolicyScope: Invalid value [Random]. Please use either"
        " MessageBody or MessageAttributes"
    )
    # a subscription's attributes are checked before its protocol, as SNS does
    with pytest.raises(ClientError) as exc:
        sns.subscribe(
            TopicArn=topic,
            Protocol="sms",
            Endpoint="+15005550006",
            Attributes={"FilterPolicy": '{"kind": "order"}'},
        )
    assert exc.value.response["Error"]["Message"] == (
        'Invalid parameter: Attributes Reason: FilterPolicy: "kind" must be an object or an array'
    )


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ({"a": {"DataType": "String", "StringValue": ""}}, "non-empty message attribute value"),
        ({"a": {"DataType": "String"}}, "type 'String'."),
        ({"a": {"DataType": "Binary", "BinaryValue": b""}}, "type 'Binary'."),
        ({"a": {"DataType": "String", "BinaryValue": b"1"}}, "with type 'String' must use"),
        ({"a": {"DataType": "Number", "BinaryValue": b"1"}}, "must use field 'String'."),
        ({"a": {"DataType": "Binary", "StringValue": "1"}}, "must use field 'Binary'."),
        ({"a": {"DataType": "Other", "StringValue": "1"}}, "invalid message attribute type"),
        ({"a": {"DataType": "String.", "StringValue": "1"}}, "invalid message attribute type"),
        ({"a": {"DataType": "Stringy", "StringValue": "1"}}, "invalid message attribute type"),
        ({"a": {"DataType": "Number", "StringValue": "one"}}, "Could not cast"),
        ({"a": {"DataType": "Number", "StringValue": "1_0"}}, "Could not cast"),
        ({"a": {"DataType": "Number", "StringValue": "inf"}}, "Could not cast"),
        ({"a" * 256: {"DataType": "String", "StringValue": "1"}}, "less than 256 bytes"),
        ({"a^*": {"DataType": "String", "StringValue": "1"}}, "character '#x5E' was found"),
        ({".a": {"DataType": "String", "StringValue": "1"}}, "starting with character '.'"),
        ({"a.": {"DataType": "String", "StringValue": "1"}}, "ending with character '.'"),
        ({"a..b": {"DataType": "String", "StringValue": "1"}}, "successive '.' character"),
        ({"AWS.a": {"DataType": "String", "StringValue": "1"}}, "reserved for use by AWS"),
    ],
)
def test_message_attribute_errors_in_sns_words(
    server: LiveServer, name: str, attributes: dict[str, Any], expected: str
) -> None:
    """As SNS answers them (LocalStack's snapshots recorded from SNS): ParameterValueInvalid
    with SNS's text, from Publish and for the whole of a PublishBatch."""
    sns = server.sns(validate=False)
    topic = sns.create_topic(Name=name)["TopicArn"]
    with pytest.raises(ClientError) as exc:
        sns.publish(TopicArn=topic, Message="m", MessageAttributes=attributes)
    assert code(exc) == "ParameterValueInvalid" and expected in message(exc)
    entries = [{"Id": "1", "Message": "m", "MessageAttributes": attributes}]
    with pytest.raises(ClientError) as exc:
        sns.publish_batch(
            TopicArn=topic, PublishBatchRequestEntries=[*entries, {"Id": "2", "Message": "ok"}]
        )
    assert code(exc) == "ParameterValueInvalid" and expected in message(exc)


def test_message_attribute_without_type_is_a_validation_error(
    server: LiveServer, name: str
) -> None:
    sns = server.sns(validate=False)
    topic = sns.create_topic(Name=name)["TopicArn"]
    attributes = {"a": {"StringValue": "1"}}
    with pytest.raises(ClientError) as exc:
        sns.publish(TopicArn=topic, Message="m", MessageAttributes=attributes)
    assert code(exc) == "ValidationError"
    assert "Value null at 'messageAttributes.a.member.dataType'" in message(exc)
    entries = [
        {"Id": "x", "Message": "ok"},
        {"Id": "y", "Message": "m", "MessageAttributes": attributes},
    ]
    with pytest.raises(ClientError) as exc:
        sns.publish_batch(TopicArn=topic, PublishBatchRequestEntries=entries)
    assert "at 'publishBatchRequestEntries.2.member.messageAttributes.a.member" in message(exc)
