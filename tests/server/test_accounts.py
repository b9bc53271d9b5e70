"""Accounts kept apart: another account's queues and topics are reached only where their
policies let it in (SQS queue policies, SNS topic policies, dead-letter queues, topic copies),
and a webhook's confirmation where requests must be signed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conveyor import Client
from conveyor.server import ServerConfig
from conveyor.server.front.auth import load_credentials

from ..support.credentials import CREDENTIALS, PARTNER_CREDENTIALS
from ..support.live import LiveServer


@pytest.fixture(scope="module")
def accounts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    path: Path = tmp_path_factory.mktemp("acct") / "credentials"
    path.write_text(PARTNER_CREDENTIALS)
    with (
        Client("memory://") as client,
        LiveServer(client, ServerConfig(aws_keys=load_credentials(path))) as live,
    ):
        yield live


def code_of(call: Any) -> str:
    from botocore.exceptions import ClientError

    try:
        call()
    except ClientError as exc:
        return str(exc.response["Error"]["Code"])
    return "ok"


def test_accounts_keep_others_out_unless_the_policy_lets_them_in(accounts: LiveServer) -> None:
    owner = accounts.sqs(key="AKIDGOOD", secret="s3cret")
    partner = accounts.sqs(key="AKIDPARTNER", secret="other")
    url = owner.create_queue(QueueName="shared")["QueueUrl"]
    assert "/000000000000/shared" in url
    send = lambda: partner.send_message(QueueUrl=url, MessageBody="hi")  # noqa: E731
    receive = lambda: partner.receive_message(QueueUrl=url)  # noqa: E731
    assert code_of(send) == "AccessDenied"
    assert code_of(lambda: partner.get_queue_attributes(QueueUrl=url)) == "AccessDenied"
    lookup = lambda: partner.get_queue_url(  # noqa: E731
        QueueName="shared", QueueOwnerAWSAccountId="000000000000"
    )
    assert code_of(lookup) == "AccessDenied"
    owner.add_permission(
        QueueUrl=url, Label="p1", AWSAccountIds=["111122223333"], Actions=["SendMessage"]
    )
    assert code_of(send) == "ok"
    assert code_of(lambda: partner.send_message_batch(
        QueueUrl=url, Entries=[{"Id": "1", "MessageBody": "b"}])) == "ok"  # fmt: skip
    assert code_of(receive) == "AccessDenied"
    owner.add_permission(QueueUrl=url, Label="p2", AWSAccountIds=["111122223333"], Actions=["*"])
    assert code_of(receive) == "ok" and code_of(lookup) == "ok"
    # some actions are the owner's alone, whatever the policy says
    attrs = lambda: partner.set_queue_attributes(  # noqa: E731
        QueueUrl=url, Attributes={"DelaySeconds": "1"}
    )
    assert code_of(attrs) == "AccessDenied"
    assert code_of(lambda: partner.delete_queue(QueueUrl=url)) == "AccessDenied"
    # a Deny wins over every Allow
    owner.remove_permission(QueueUrl=url, Label="p2")
    policy = json.loads(owner.get_queue_attributes(
        QueueUrl=url, AttributeNames=["Policy"])["Attributes"]["Policy"])  # fmt: skip
    policy["Statement"].append(
        {"Effect": "Deny", "Principal": "*", "Action": "sqs:Send*", "Resource": "*"}
    )
    owner.set_queue_attributes(QueueUrl=url, Attributes={"Policy": json.dumps(policy)})
    assert code_of(send) == "AccessDenied"
    # the owner is never limited by its own queue's policy
    assert code_of(lambda: owner.send_message(QueueUrl=url, MessageBody="mine")) == "ok"
    move = lambda: partner.start_message_move_task(  # noqa: E731
        SourceArn="arn:aws:sqs:us-east-1:000000000000:shared"
    )
    assert code_of(move) == "AccessDenied"
    # the partner's own queues are its own
    mine = partner.create_queue(QueueName="shared")["QueueUrl"]
    assert "/111122223333/shared" in mine
    assert code_of(lambda: owner.send_message(QueueUrl=mine, MessageBody="x")) == "AccessDenied"


def test_another_accounts_queue_is_a_dead_letter_queue_only_where_its_policy_allows(
    accounts: LiveServer,
) -> None:
    """Account B may not make A's queue its dead-letter queue (so write into it) unless A's
    Policy lets B send to it; the refusal is the one for a queue that is not there, so it
    tells B nothing of A's names. B cannot cancel A's move task either."""
    from botocore.exceptions import ClientError

    owner = accounts.sqs(key="AKIDGOOD", secret="s3cret")
    partner = accounts.sqs(key="AKIDPARTNER", secret="other")
    dlq_url = owner.create_queue(QueueName="owner-dlq")["QueueUrl"]
    dlq_arn = "arn:aws:sqs:us-east-1:000000000000:owner-dlq"

    def refusal(target: str) -> tuple[str, str]:
        policy = json.dumps({"deadLetterTargetArn": target, "maxReceiveCount": 1})
        try:
            partner.create_queue(QueueName="src", Attributes={"RedrivePolicy": policy})
        except ClientError as exc:
            error = exc.response["Error"]
            return error["Code"], error["Message"].replace(target, "ARN")
        return "ok", ""

    there, absent = refusal(dlq_arn), refusal(dlq_arn + "-absent")
    assert there[0] == "InvalidAttributeValue" and "does not exist" in there[1]
    assert there == absent  # the same words whether A has such a queue or not
    assert refusal("arn:aws:sqs:eu-west-1:000000000000:owner-dlq")[0] == "InvalidAttributeValue"
    owner.add_permission(
        QueueUrl=dlq_url, Label="dlq", AWSAccountIds=["111122223333"], Actions=["SendMessage"]
    )
    assert refusal(dlq_arn) == ("ok", "")
    src = partner.get_queue_url(QueueName="src")["QueueUrl"]
    partner.send_message(QueueUrl=src, MessageBody="to the owner's dlq")
    partner.receive_message(QueueUrl=src, VisibilityTimeout=0)
    partner.receive_message(QueueUrl=src)  # past maxReceiveCount: moved
    got = owner.receive_message(QueueUrl=dlq_url, WaitTimeSeconds=1).get("Messages", [])
    assert [m["Body"] for m in got] == ["to the owner's dlq"]
    # a move task of A's: B holding its handle cannot cancel it
    owner.create_queue(QueueName="slow-dlq")
    slow = owner.get_queue_url(QueueName="slow-dlq")["QueueUrl"]
    owner.create_queue(QueueName="slow-src", Attributes={"RedrivePolicy": json.dumps(
        {"deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:slow-dlq",
         "maxReceiveCount": 1})})  # fmt: skip
    owner.send_message_batch(
        QueueUrl=slow, Entries=[{"Id": str(i), "MessageBody": "m"} for i in range(10)]
    )
    handle = owner.start_message_move_task(
        SourceArn="arn:aws:sqs:us-east-1:000000000000:slow-dlq",
        DestinationArn="arn:aws:sqs:us-east-1:000000000000:slow-src",
        MaxNumberOfMessagesPerSecond=1,
    )["TaskHandle"]
    cancel = lambda: partner.cancel_message_move_task(TaskHandle=handle)  # noqa: E731
    assert code_of(cancel) == "AccessDenied"
    assert code_of(lambda: owner.cancel_message_move_task(TaskHandle=handle)) == "ok"


def test_policy_evaluation() -> None:
    from conveyor.server.sqs.policy import allows

    arn = "arn:aws:sqs:us-east-1:000000000000:q"

    def policy(*statements: dict[str, Any]) -> str:
        return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})

    grant = {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::111122223333:root"},
             "Action": ["SQS:SendMessage"], "Resource": arn}  # fmt: skip
    assert allows(policy(grant), "111122223333", "SendMessage", arn)
    assert allows(policy(grant), "111122223333", "SendMessageBatch", arn)
    assert not allows(policy(grant), "111122223333", "ReceiveMessage", arn)
    assert not allows(policy(grant), "444455556666", "SendMessage", arn)
    assert not allows(policy(grant), "111122223333", "SendMessage", arn + "2")
    assert allows(policy({**grant, "Principal": "*", "Action": "sqs:*"}), "9" * 12,
                  "DeleteMessage", arn)  # fmt: skip
    assert not allows(policy({**grant, "Condition": {"Bool": {"aws:SecureTransport": "true"}}}),
                      "111122223333", "SendMessage", arn)  # fmt: skip
    assert not allows(policy({**grant, "NotAction": "x"}), "111122223333", "SendMessage", arn)
    assert not allows(None, "111122223333", "SendMessage", arn)
    assert not allows("not json", "111122223333", "SendMessage", arn)
    assert not allows("[" * 100_000, "111122223333", "SendMessage", arn)


def test_sns_keeps_accounts_apart(accounts: LiveServer) -> None:
    owner = accounts.sns(key="AKIDGOOD", secret="s3cret")
    partner = accounts.sns(key="AKIDPARTNER", secret="other")
    topic = owner.create_topic(Name="news")["TopicArn"]
    assert topic == "arn:aws:sns:us-east-1:000000000000:news"
    publish = lambda: partner.publish(TopicArn=topic, Message="x")  # noqa: E731
    assert code_of(publish) == "AuthorizationError"
    assert code_of(lambda: partner.get_topic_attributes(TopicArn=topic)) == "AuthorizationError"
    assert code_of(lambda: partner.delete_topic(TopicArn=topic)) == "AuthorizationError"
    assert code_of(lambda: owner.publish(TopicArn=topic, Message="x")) == "ok"
    mine = partner.create_topic(Name="news")["TopicArn"]
    assert mine == "arn:aws:sns:us-east-1:111122223333:news"
    assert [t["TopicArn"] for t in partner.list_topics()["Topics"]] == [mine]
    owner_queue = accounts.sqs(key="AKIDGOOD", secret="s3cret").create_queue(QueueName="inbox")
    assert owner_queue["QueueUrl"].endswith("/000000000000/inbox")
    subscribe = lambda: partner.subscribe(  # noqa: E731
        TopicArn=mine, Protocol="sqs", Endpoint="arn:aws:sqs:us-east-1:000000000000:inbox"
    )
    assert code_of(subscribe) == "AuthorizationError"
    forged = accounts.sns(key="AKIDGOOD", secret="wrong")
    assert code_of(lambda: forged.list_topics()) == "SignatureDoesNotMatch"
    stranger = accounts.sns(key="AKIDNOBODY", secret="x")
    assert code_of(lambda: stranger.list_topics()) == "InvalidClientTokenId"


def test_a_topic_policy_lets_another_account_publish_and_subscribe(accounts: LiveServer) -> None:
    """AddPermission's statement lets the partner publish (singly and in batches) and
    subscribe its own queue; what it does not grant stays refused, and the partner acts on
    its own subscription; RemovePermission takes it back."""
    owner = accounts.sns(key="AKIDGOOD", secret="s3cret")
    partner = accounts.sns(key="AKIDPARTNER", secret="other")
    partner_sqs = accounts.sqs(key="AKIDPARTNER", secret="other")
    topic = owner.create_topic(Name="granted")["TopicArn"]
    owner.add_permission(
        TopicArn=topic,
        Label="partner",
        AWSAccountId=["111122223333"],
        ActionName=["Publish", "Subscribe"],
    )
    url = partner_sqs.create_queue(QueueName="mirror")["QueueUrl"]
    arn = "arn:aws:sqs:us-east-1:111122223333:mirror"
    sub = partner.subscribe(
        TopicArn=topic,
        Protocol="sqs",
        Endpoint=arn,
        Attributes={"RawMessageDelivery": "true"},
        ReturnSubscriptionArn=True,
    )["SubscriptionArn"]
    assert partner.publish(TopicArn=topic, Message="one")["MessageId"]
    batch = [{"Id": "b", "Message": "two"}]
    assert partner.publish_batch(TopicArn=topic, PublishBatchRequestEntries=batch)["Successful"]
    got = partner_sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in got) == ["one", "two"]
    attributes = partner.get_subscription_attributes(SubscriptionArn=sub)["Attributes"]
    assert attributes["SubscriptionPrincipal"] == "arn:aws:iam::111122223333:user/partner"
    assert attributes["Owner"] == "111122223333"  # the subscriber's account, as on SNS
    listed = owner.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
    assert [s["Owner"] for s in listed] == ["111122223333"]
    assert code_of(lambda: partner.get_topic_attributes(TopicArn=topic)) == "AuthorizationError"
    assert code_of(lambda: partner.delete_topic(TopicArn=topic)) == "AuthorizationError"
    remove = lambda: partner.remove_permission(TopicArn=topic, Label="partner")  # noqa: E731
    assert code_of(remove) == "AuthorizationError"
    missing = topic + "-none"
    assert code_of(lambda: partner.publish(TopicArn=missing, Message="x")) == "AuthorizationError"
    owner.remove_permission(TopicArn=topic, Label="partner")
    assert code_of(lambda: partner.publish(TopicArn=topic, Message="x")) == "AuthorizationError"
    assert code_of(lambda: partner.unsubscribe(SubscriptionArn=sub)) == "ok"  # its own
    owner.delete_topic(TopicArn=topic)


def test_another_accounts_queue_takes_a_topics_copies_only_where_its_policy_allows(
    accounts: LiveServer,
) -> None:
    """As SNS: a topic delivers to another account's queue (or dead-letter queue) when that
    queue's Policy lets sns.amazonaws.com SendMessage from the topic; otherwise Subscribe is
    refused in the same words whether or not the queue exists."""
    owner_sqs = accounts.sqs(key="AKIDGOOD", secret="s3cret")
    partner = accounts.sns(key="AKIDPARTNER", secret="other")
    topic = partner.create_topic(Name="alerts")["TopicArn"]
    url = owner_sqs.create_queue(QueueName="alerts-in")["QueueUrl"]
    queue_arn = "arn:aws:sqs:us-east-1:000000000000:alerts-in"

    def subscribe(arn: str) -> Any:
        return partner.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn)

    refused = []
    for arn in (queue_arn, "arn:aws:sqs:us-east-1:000000000000:no-such-queue"):
        try:
            subscribe(arn)
        except Exception as exc:  # botocore's ClientError
            refused.append(str(exc).replace(arn, "ARN"))
    assert len(refused) == 2 and refused[0] == refused[1] and "AuthorizationError" in refused[0]

    def policy(source: str, effect: str = "Allow") -> str:
        return json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": effect,
                        "Principal": {"Service": "sns.amazonaws.com"},
                        "Action": "sqs:SendMessage",
                        "Resource": queue_arn,
                        "Condition": {"ArnEquals": {"aws:SourceArn": source}},
                    }
                ],
            }
        )

    other_topic = "arn:aws:sns:us-east-1:111122223333:other"
    owner_sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": policy(other_topic)})
    assert code_of(lambda: subscribe(queue_arn)) == "AuthorizationError"  # another topic's
    owner_sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": policy(topic)})
    assert code_of(lambda: subscribe(queue_arn)) == "ok"
    partner.publish(TopicArn=topic, Message="across")
    [m] = owner_sqs.receive_message(QueueUrl=url)["Messages"]
    assert json.loads(m["Body"])["Message"] == "across"
    # a dead-letter queue of the subscription in another account: by its policy too
    dlq = json.dumps({"deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:alerts-dlq"})
    owner_sqs.create_queue(QueueName="alerts-dlq")
    [sub] = partner.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
    set_dlq = lambda: partner.set_subscription_attributes(  # noqa: E731
        SubscriptionArn=sub["SubscriptionArn"], AttributeName="RedrivePolicy", AttributeValue=dlq
    )
    assert code_of(set_dlq) == "AuthorizationError"


def test_a_webhook_confirms_by_its_token_where_requests_must_be_signed(
    tmp_path: Path,
) -> None:
    """With signatures checked, the GET of a SubscribeURL (which an endpoint makes unsigned,
    as it does on SNS) confirms by its token alone; a wrong token confirms nothing, and every
    other unsigned SNS request is still refused."""
    path = tmp_path / "credentials"
    path.write_text(CREDENTIALS)
    config = ServerConfig(aws_keys=load_credentials(path), sns_http_allow=("127.0.0.1",))
    with Client("memory://") as client, LiveServer(client, config) as live:
        sns = live.sns(key="AKIDGOOD", secret="s3cret")
        topic = sns.create_topic(Name="hooks")["TopicArn"]
        sns.subscribe(TopicArn=topic, Protocol="http", Endpoint="http://127.0.0.1:9/hook")
        [queue] = client.list_queues("sns-http-")
        [m] = client.queue(queue).peek(1)  # the confirmation, waiting for the deliverer
        confirmation = json.loads(m.text)
        wrong = confirmation["SubscribeURL"].replace(confirmation["Token"], "0" * 128)
        assert httpx.get(wrong).status_code == 400
        r = httpx.get(confirmation["SubscribeURL"])
        assert r.status_code == 200, r.text
        subs = sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
        assert [s["SubscriptionArn"].startswith(topic + ":") for s in subs] == [True]
        unsigned = httpx.get(live.url + "/", params={"Action": "ListTopics"})
        assert unsigned.status_code == 403
