"""What the SNS tests share: an error's code and message, a queue made and subscribed, and
the bodies a queue holds (read and deleted)."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError


def code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


def message(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return str(exc.value.response["Error"]["Message"])


def queue(sqs: Any, name: str, **attributes: str) -> tuple[str, str]:
    url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    return url, arn["QueueArn"]


def subscribe(sns: Any, topic: str, arn: str, **attributes: str) -> str:
    """Subscribe a queue (by ARN) with these attributes; the subscription's ARN."""
    made: str = sns.subscribe(
        TopicArn=topic,
        Protocol="sqs",
        Endpoint=arn,
        Attributes=attributes,
        ReturnSubscriptionArn=True,
    )["SubscriptionArn"]
    return made


def bodies(sqs: Any, url: str, n: int = 10, **options: Any) -> list[dict[str, Any]]:
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=n, **options)
    messages = got.get("Messages", [])
    for m in messages:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return list(messages)
