"""SNS beyond SQS and webhooks, through boto3 against a live server: outboxes for the
protocols the server does not send over (--sns-outbox), who subscribed
(SubscriptionPrincipal), FIFO topics' own sequence numbers, data protection policies and
page tokens."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError

from conveyor import Client
from conveyor.server import ServerConfig
from conveyor.server.front.auth import load_credentials
from conveyor.server.sns.api import ACTIONS, SnsApi
from conveyor.server.sns.outbox import OUTBOX_PROTOCOLS, outbox_protocols

from ..support.live import LiveServer
from .snsclients import bodies, code, message, queue, subscribe


@pytest.fixture
def outboxes(store: Client) -> Iterator[LiveServer]:
    config = ServerConfig(sns_outbox=frozenset({"email", "email-json", "sms"}))
    with LiveServer(store, config) as live:
        yield live


def _outbox(sqs: Any, protocol: str) -> str:
    """The URL of the one outbox queue of `protocol`."""
    urls = sqs.list_queues(QueueNamePrefix=f"sns-outbox-{protocol}-").get("QueueUrls", [])
    assert len(urls) == 1, urls
    return str(urls[0])


def test_outboxes_keep_what_email_and_sms_subscribers_would_get(
    outboxes: LiveServer, name: str
) -> None:
    sns, sqs = outboxes.sns(), outboxes.sqs()
    topic = sns.create_topic(Name=name)["TopicArn"]
    # an SMS subscription is confirmed when made, as on SNS
    sms = sns.subscribe(TopicArn=topic, Protocol="sms", Endpoint="+15555550100")
    assert sms["SubscriptionArn"].startswith(topic + ":")
    # an e-mail one waits for the token of the confirmation written to its outbox
    pending = sns.subscribe(TopicArn=topic, Protocol="email", Endpoint="ops@example.com")
    assert pending["SubscriptionArn"] == "pending confirmation"
    listed = sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
    assert sorted(s["SubscriptionArn"] for s in listed) == sorted(
        ["PendingConfirmation", sms["SubscriptionArn"]]
    )
    attrs = sns.get_topic_attributes(TopicArn=topic)["Attributes"]
    assert (attrs["SubscriptionsConfirmed"], attrs["SubscriptionsPending"]) == ("1", "1")
    mail = _outbox(sqs, "email")
    [confirmation] = bodies(sqs, mail, MessageAttributeNames=["All"])
    letter = json.loads(confirmation["Body"])
    assert letter["Type"] == "SubscriptionConfirmation" and letter["TopicArn"] == topic
    assert confirmation["MessageAttributes"]["Endpoint"]["StringValue"] == "ops@example.com"
    sns.publish(TopicArn=topic, Message="before the confirmation")
    assert bodies(sqs, mail) == []  # nothing goes to a pending subscription
    confirmed = sns.confirm_subscription(
        TopicArn=topic, Token=letter["Token"], AuthenticateOnUnsubscribe="true"
    )
    structure = {"default": "plain", "sms": "short", "email": "long text"}
    sns.publish(TopicArn=topic, Message=json.dumps(structure), MessageStructure="json")
    assert [m["Body"] for m in bodies(sqs, mail)] == ["long text"]
    texts = [m["Body"] for m in bodies(sqs, _outbox(sqs, "sms"), MessageAttributeNames=["All"])]
    assert texts == ["before the confirmation", "short"]
    attributes = sns.get_subscription_attributes(SubscriptionArn=confirmed["SubscriptionArn"])
    assert attributes["Attributes"]["Protocol"] == "email"
    assert attributes["Attributes"]["PendingConfirmation"] == "false"
    assert attributes["Attributes"]["ConfirmationWasAuthenticated"] == "true"
    # confirmed with AuthenticateOnUnsubscribe: the unsigned GET of an UnsubscribeURL is
    # refused, a signed Unsubscribe is not
    envelope_url = (
        f"{outboxes.url}/?Action=Unsubscribe&SubscriptionArn={confirmed['SubscriptionArn']}"
    )
    refused = httpx.get(envelope_url)
    assert refused.status_code == 403 and "AuthorizationError" in refused.text
    sms_url = f"{outboxes.url}/?Action=Unsubscribe&SubscriptionArn={sms['SubscriptionArn']}"
    assert httpx.get(sms_url).status_code == 200  # without it, anyone with the URL may
    sns.unsubscribe(SubscriptionArn=confirmed["SubscriptionArn"])
    assert sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"] == []
    # subscribing again is idempotent; the same endpoint has one outbox
    again = sns.subscribe(TopicArn=topic, Protocol="sms", Endpoint="+15555550100")
    assert again["SubscriptionArn"] == sms["SubscriptionArn"]
    for endpoint, protocol, words in (
        ("not-a-phone", "sms", "SMS endpoint"),
        ("no-at-sign", "email", "Email address"),
        ("arn:aws:lambda:us-east-1:000000000000:function:f", "lambda", "not served here"),
    ):
        with pytest.raises(ClientError) as exc:
            sns.subscribe(TopicArn=topic, Protocol=protocol, Endpoint=endpoint)
        assert code(exc) == "InvalidParameter" and words in message(exc), protocol


def test_a_text_to_a_phone_number_is_kept_in_the_direct_outbox(outboxes: LiveServer) -> None:
    sns, sqs = outboxes.sns(), outboxes.sqs()
    sent = sns.publish(PhoneNumber="+33600000000", Message="your code is 1234")
    url = sqs.get_queue_url(QueueName="sns-outbox-sms-direct")["QueueUrl"]
    [got] = bodies(sqs, url, MessageAttributeNames=["All"])
    assert got["Body"] == "your code is 1234" and sent["MessageId"]
    assert got["MessageAttributes"]["Endpoint"]["StringValue"] == "+33600000000"
    for bad in ("+1a234", "NAA+15551234567", "+15--551234567"):
        with pytest.raises(ClientError) as exc:
            sns.publish(PhoneNumber=bad, Message="x")
        assert (
            message(exc)
            == f"Invalid parameter: PhoneNumber Reason: {bad} is not valid to publish to"
        )
    topic = sns.create_topic(Name="texts")["TopicArn"]
    for bad in ("NAA+15551234567", "+15551234567.", "/+15551234567"):  # SNS's words
        with pytest.raises(ClientError) as exc:
            sns.subscribe(TopicArn=topic, Protocol="sms", Endpoint=bad)
        assert message(exc) == f"Invalid SMS endpoint: {bad}"
    for protocol, endpoint in (
        ("email", "a" * 3000 + "@example.com"),
        ("http", "http://x/" + "a" * 3000),
    ):
        with pytest.raises(ClientError) as exc:
            sns.subscribe(TopicArn=topic, Protocol=protocol, Endpoint=endpoint)
        assert "longer than 2048 characters" in message(exc)
    sns.delete_topic(TopicArn=topic)


def test_without_the_flag_other_protocols_are_refused(sns: Any, name: str) -> None:
    topic = sns.create_topic(Name=name)["TopicArn"]
    with pytest.raises(ClientError) as exc:
        sns.subscribe(TopicArn=topic, Protocol="email", Endpoint="ops@example.com")
    assert code(exc) == "InvalidParameter" and "--sns-outbox" in message(exc)
    with pytest.raises(ClientError) as exc:
        sns.publish(PhoneNumber="+15555550100", Message="x")
    assert code(exc) == "InvalidParameter" and "--sns-outbox" in message(exc)
    assert outbox_protocols(["all"]) == OUTBOX_PROTOCOLS
    assert outbox_protocols(["sms,email", "lambda"]) == {"sms", "email", "lambda"}
    with pytest.raises(ValueError, match="'fax' is not one of"):
        outbox_protocols(["fax"])


def test_the_subscription_principal_is_who_subscribed(tmp_path: Path, name: str) -> None:
    path = tmp_path / "credentials"
    path.write_text(
        "[alice]\naws_access_key_id = AKIDALICE\naws_secret_access_key = s3cret\n"
        "account = 111111111111\n"
    )
    config = ServerConfig(aws_keys=load_credentials(path))
    with Client("memory://") as client, LiveServer(client, config) as live:
        sns, sqs = (
            live.sns(key="AKIDALICE", secret="s3cret"),
            live.sqs("us-east-1", "AKIDALICE", "s3cret"),
        )
        topic = sns.create_topic(Name=name)["TopicArn"]
        _, arn = queue(sqs, f"{name}-q")
        sub = subscribe(sns, topic, arn)
        attributes = sns.get_subscription_attributes(SubscriptionArn=sub)["Attributes"]
        assert attributes["SubscriptionPrincipal"] == "arn:aws:iam::111111111111:user/alice"
        who = live.aws("sts", "us-east-1", "AKIDALICE", "s3cret").get_caller_identity()
        assert who["Arn"] == "arn:aws:iam::111111111111:user/alice"
        assert who["Account"] == "111111111111"


def test_a_fifo_topic_numbers_its_publications_itself(
    sns: Any, server: LiveServer, name: str
) -> None:
    """The SequenceNumber a publish answers is the one its copies carry, in the queue and
    in the subscription's dead-letter queue alike (the queue's own numbers differ)."""
    sqs = server.sqs()
    topic = sns.create_topic(Name=f"{name}.fifo", Attributes={"FifoTopic": "true"})["TopicArn"]
    url, arn = queue(sqs, f"{name}.fifo", FifoQueue="true")
    gone_url, gone_arn = queue(sqs, f"{name}-gone.fifo", FifoQueue="true")
    dlq_url, dlq_arn = queue(sqs, f"{name}-dlq.fifo", FifoQueue="true")
    subscribe(sns, topic, arn)
    dead = subscribe(sns, topic, gone_arn)
    sns.set_subscription_attributes(
        SubscriptionArn=dead,
        AttributeName="RedrivePolicy",
        AttributeValue=json.dumps({"deadLetterTargetArn": dlq_arn}),
    )
    sqs.delete_queue(QueueUrl=gone_url)
    numbers = []
    for i in range(3):
        numbers.append(
            sns.publish(
                TopicArn=topic, Message=f"m{i}", MessageGroupId="g", MessageDeduplicationId=str(i)
            )["SequenceNumber"]
        )
    assert numbers == sorted(numbers) and len(set(numbers)) == 3
    assert all(len(n) == 20 and n.isdigit() for n in numbers)
    for where in (url, dlq_url):
        got = bodies(sqs, where, AttributeNames=["SequenceNumber"])
        assert [json.loads(m["Body"])["SequenceNumber"] for m in got] == numbers
        assert [m["Attributes"]["SequenceNumber"] for m in got] != numbers


def test_data_protection_policies_and_page_tokens(sns: Any, sqs: Any, name: str) -> None:
    topic = sns.create_topic(Name=name)["TopicArn"]
    assert sns.get_data_protection_policy(ResourceArn=topic)["DataProtectionPolicy"] == ""
    policy = {"Name": "p", "Version": "2021-06-01", "Statement": []}
    sns.put_data_protection_policy(ResourceArn=topic, DataProtectionPolicy=json.dumps(policy))
    got = sns.get_data_protection_policy(ResourceArn=topic)["DataProtectionPolicy"]
    assert json.loads(got) == policy
    assert "DataProtectionPolicy" not in sns.get_topic_attributes(TopicArn=topic)["Attributes"]
    with pytest.raises(ClientError) as exc:
        sns.put_data_protection_policy(ResourceArn=topic, DataProtectionPolicy="{not json")
    assert code(exc) == "InvalidParameter"
    with pytest.raises(ClientError) as exc:
        sns.get_data_protection_policy(ResourceArn=f"{topic}-none")
    assert code(exc) == "NotFound"
    for i in range(101):
        _, arn = queue(sqs, f"{name}-{i}")
        subscribe(sns, topic, arn)
    page = sns.list_subscriptions_by_topic(TopicArn=topic)
    assert len(page["Subscriptions"]) == 100
    assert base64.b64decode(page["NextToken"])  # opaque, base64 as SNS's are
    rest = sns.list_subscriptions_by_topic(TopicArn=topic, NextToken=page["NextToken"])
    assert len(rest["Subscriptions"]) == 1 and "NextToken" not in rest
    for bad in ("12", "-1", base64.b64encode(b"-5").decode()):
        with pytest.raises(ClientError) as exc:
            sns.list_subscriptions_by_topic(TopicArn=topic, NextToken=bad)
        assert code(exc) == "InvalidParameter", bad


def test_every_sns_action_is_routed_to_sns_unsigned(server: LiveServer, name: str) -> None:
    """An unsigned request is routed by its action's name: every action the SNS API serves
    is in the set the endpoint routes by."""
    assert set(SnsApi(server.conveyor.client).actions) == ACTIONS
    topic = server.sns().create_topic(Name=name)["TopicArn"]
    r = httpx.post(
        server.url + "/", data={"Action": "GetDataProtectionPolicy", "ResourceArn": topic}
    )
    assert r.status_code == 200 and "GetDataProtectionPolicyResponse" in r.text, r.text
