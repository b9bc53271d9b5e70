"""The AWS CLI (from PyPI) against a live server, as a user would run it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ..support.live import LiveServer

AWS = shutil.which("aws", path=str(Path(sys.executable).parent)) or shutil.which("aws")


def aws(server: LiveServer, *args: str, service: str = "sqs") -> Any:
    if AWS is None:
        pytest.fail("the AWS CLI is not installed (pip install awscli)")
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "AKIDCLI",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }
    done = subprocess.run(
        [AWS, "--endpoint-url", server.url, "--output", "json", service, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    if done.returncode != 0:
        raise AssertionError(f"aws {service} {' '.join(args)} failed: {done.stderr}")
    return json.loads(done.stdout) if done.stdout.strip() else None


def test_aws_cli_round_trip(server: LiveServer, name: str) -> None:
    url = aws(server, "create-queue", "--queue-name", name, "--attributes", "VisibilityTimeout=15")[
        "QueueUrl"
    ]
    assert url == f"{server.url}/000000000000/{name}"
    assert url in aws(server, "list-queues", "--queue-name-prefix", name)["QueueUrls"]
    aws(
        server,
        "send-message",
        "--queue-url",
        url,
        "--message-body",
        "from the cli",
        "--message-attributes",
        '{"k":{"DataType":"String","StringValue":"v"}}',
    )
    entries = json.dumps([{"Id": str(i), "MessageBody": f"b{i}"} for i in range(3)])
    sent = aws(server, "send-message-batch", "--queue-url", url, "--entries", entries)
    assert len(sent["Successful"]) == 3
    got = aws(
        server,
        "receive-message",
        "--queue-url",
        url,
        "--max-number-of-messages",
        "10",
        "--message-attribute-names",
        "All",
        "--wait-time-seconds",
        "1",
    )["Messages"]
    assert sorted(m["Body"] for m in got) == ["b0", "b1", "b2", "from the cli"]
    aws(server, "delete-message", "--queue-url", url, "--receipt-handle", got[0]["ReceiptHandle"])
    attrs = aws(server, "get-queue-attributes", "--queue-url", url, "--attribute-names", "All")
    assert attrs["Attributes"]["VisibilityTimeout"] == "15"
    assert attrs["Attributes"]["ApproximateNumberOfMessagesNotVisible"] == "3"
    aws(server, "purge-queue", "--queue-url", url)
    aws(server, "delete-queue", "--queue-url", url)
    assert not (aws(server, "list-queues", "--queue-name-prefix", name) or {}).get("QueueUrls")


def test_aws_cli_sns_publish_reaches_a_subscribed_queue(server: LiveServer, name: str) -> None:
    sqs = server.sqs()
    topic = aws(server, "create-topic", "--name", name, service="sns")["TopicArn"]
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    aws(server, "subscribe", "--topic-arn", topic, "--protocol", "sqs",
        "--notification-endpoint", arn["QueueArn"], service="sns")  # fmt: skip
    sent = aws(server, "publish", "--topic-arn", topic, "--message", "from the cli",
               "--subject", "cli", service="sns")  # fmt: skip
    [m] = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"]
    envelope = json.loads(m["Body"])
    assert envelope["Message"] == "from the cli" and envelope["Subject"] == "cli"
    assert envelope["MessageId"] == sent["MessageId"] and envelope["TopicArn"] == topic
