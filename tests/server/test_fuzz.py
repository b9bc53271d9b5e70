"""A bounded fuzz of the SQS JSON and Query parsers and the REST API over real HTTP: no 5xx,
no traceback in the log, every reply well-formed in its protocol, and a queue's counts still
add up afterwards."""

from __future__ import annotations

import json
import logging
import string
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conveyor import Client

from ..conftest import STORES
from ..support import sqlstores
from ..support.live import LiveServer

ACTIONS = [
    "CreateQueue", "DeleteQueue", "ListQueues", "GetQueueUrl", "GetQueueAttributes",
    "SetQueueAttributes", "PurgeQueue", "SendMessage", "SendMessageBatch", "ReceiveMessage",
    "DeleteMessage", "DeleteMessageBatch", "ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch", "TagQueue", "UntagQueue", "ListQueueTags", "AddPermission",
    "RemovePermission", "ListDeadLetterSourceQueues", "StartMessageMoveTask",
    "CancelMessageMoveTask", "ListMessageMoveTasks",
]  # fmt: skip
PARAMS = [
    "QueueName", "QueueUrl", "MessageBody", "DelaySeconds", "MaxNumberOfMessages",
    "VisibilityTimeout", "WaitTimeSeconds", "ReceiptHandle", "Entries", "Attributes",
    "AttributeNames", "MessageAttributes", "MessageGroupId", "MessageDeduplicationId", "Tags",
    "TagKeys", "Label", "AWSAccountIds", "Actions", "SourceArn", "TaskHandle", "MaxResults",
    "NextToken", "QueueNamePrefix", "Id", "MessageSystemAttributes",
]  # fmt: skip
QUEUE_URL = "http://127.0.0.1/000000000000/fuzz"

text = st.text(max_size=40) | st.sampled_from(["fuzz", QUEUE_URL, "0", "-1", "99999999999", ""])
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(PARAMS), inner, max_size=4)
    ),
    max_leaves=12,
)


@pytest.fixture(scope="module", params=["memory", "sqlite", "postgres"])
def fuzzed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """A server on each kind of store: what the memory store takes in its stride (a priority
    past a column's range, an offset past 64 bits) a database may refuse with a 500."""
    url = STORES[request.param](tmp_path_factory.mktemp("fuzz"))
    try:
        with Client(url) as client, LiveServer(client, request_timeout=10) as live:
            client.create_queue("fuzz")
            yield live
    finally:
        sqlstores.drop(url)


@pytest.fixture(autouse=True)
def no_tracebacks(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    with caplog.at_level(logging.WARNING, logger="conveyor"):
        yield
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not errors, caplog.text


SETTINGS = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@SETTINGS
@given(
    # what can stand in a header at all (anything else never leaves the client)
    action=st.sampled_from(ACTIONS)
    | st.text(string.ascii_letters + string.digits + "._-", max_size=20),
    params=st.dictionaries(st.sampled_from(PARAMS) | st.text(max_size=10), json_values, max_size=6),
)
def test_sqs_json_protocol(fuzzed: LiveServer, action: str, params: dict[str, Any]) -> None:
    if "WaitTimeSeconds" in params:
        params["WaitTimeSeconds"] = 0
    r = httpx.post(
        fuzzed.url + "/",
        content=json.dumps(params).encode(),
        headers={
            "X-Amz-Target": f"AmazonSQS.{action}",
            "Content-Type": "application/x-amz-json-1.0",
        },
        timeout=30,
    )
    assert r.status_code < 500, r.text
    body = r.json()
    if r.status_code >= 400:
        assert "__type" in body and "message" in body


@SETTINGS
@given(
    action=st.sampled_from(ACTIONS) | st.text(max_size=20),
    # names may repeat, and may spell one list place twice (.1 and .01)
    params=st.lists(
        st.tuples(
            (st.sampled_from(PARAMS) | st.just("Action")).flatmap(
                lambda p: st.sampled_from(
                    [p, f"{p}.1", f"{p}.01", f"{p}.1.Id", f"{p}.member.1", f"{p}.1.Name"]
                )
            )
            | st.text(max_size=10),
            text,
        ),
        max_size=6,
    ),
)
def test_sqs_query_protocol(fuzzed: LiveServer, action: str, params: list[tuple[str, str]]) -> None:
    params = [(k, v) for k, v in params if not k.startswith("WaitTimeSeconds")]
    r = httpx.post(
        fuzzed.url + "/",
        content=urlencode([("Action", action), *params]).encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        timeout=30,
    )
    assert r.status_code < 500, r.text
    root = ET.fromstring(r.content)  # well-formed, whatever was echoed
    if r.status_code >= 400:
        assert root.find(".//{*}Code") is not None


@SETTINGS
@given(
    method=st.sampled_from(["GET", "PUT", "POST", "DELETE"]),
    path=st.sampled_from(
        [
            "/queues/fuzz",
            "/queues/fuzz/messages",
            "/queues/fuzz/receive",
            "/queues/fuzz/delete",
            "/queues/fuzz/visibility",
            "/queues/fuzz/peek",
            "/queues/fuzz/redrive",
            "/topics/t",
            "/queues/%00",
            "/queues/" + "x" * 300,
            "/topics/t/queues/fuzz",
        ]
    ),
    body=json_values,
)
def test_rest_api(fuzzed: LiveServer, method: str, path: str, body: Any) -> None:
    if isinstance(body, dict):
        body.pop("wait", None)
    r = httpx.request(method, fuzzed.url + path, json=body, timeout=30)
    assert r.status_code < 500, r.text
    if r.status_code >= 400 and r.content:
        body = r.json()
        if (method, path) == ("GET", "/queues/fuzz") and r.status_code == 404:
            assert body == "There is no queue named fuzz"  # Dynamiq's answer (docs/server.md)
        else:
            assert set(body) == {"error", "code"}, r.text


def test_counts_add_up_after_the_fuzz(fuzzed: LiveServer) -> None:
    sqs = fuzzed.sqs()
    url = sqs.create_queue(QueueName="after-fuzz")["QueueUrl"]
    for i in range(10):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{i}")
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=4)["Messages"]
    for m in got[:2]:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    visible = int(attrs["ApproximateNumberOfMessages"])
    in_flight = int(attrs["ApproximateNumberOfMessagesNotVisible"])
    assert (visible, in_flight) == (10 - len(got), len(got) - 2)
