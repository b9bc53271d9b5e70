"""The AWS SDKs for JavaScript (tests/js, installed by scripts/test with npm) against a live
server: clients in another language, which check every body's MD5 themselves. v3 speaks
the JSON protocol, v2 (still in many deployed programs) the Query protocol, as SNS does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from ..conftest import unavailable
from ..support.live import LiveServer

JS = Path(__file__).parent.parent / "js"


def run_js_client(script: str, server: LiveServer, name: str) -> Any:
    node = shutil.which("node")
    if node is None or not (JS / "node_modules" / "@aws-sdk" / "client-sqs").is_dir():
        unavailable("the AWS SDKs for JavaScript (node, and npm ci in tests/js)")
        raise AssertionError  # unreachable: unavailable() skips or fails
    done = subprocess.run(
        [node, str(JS / script), server.url, name],
        capture_output=True,
        text=True,
        cwd=JS,
        env={**os.environ, "NODE_NO_WARNINGS": "1"},
        timeout=120,
    )
    if done.returncode != 0:
        raise AssertionError(f"the JavaScript client failed:\n{done.stderr}")
    return json.loads(done.stdout)


def test_the_javascript_sdk_sends_receives_and_deletes(server: LiveServer, name: str) -> None:
    seen = run_js_client("sqs_client.mjs", server, name)
    assert seen["queueUrl"] == f"{server.url}/000000000000/{name}"
    # bodies' MD5s were checked by the SDK; attributes' against SQS's algorithm in JavaScript
    assert seen["sendAttributesMd5Matches"] is True
    assert seen["receiveAttributesMd5Matches"] == [True]
    assert seen["binaryBack"] == [0, 1, 2, 254, 255]
    assert seen["textBack"] == "héllo ✓ \U0001f600"
    assert seen["receiveCount"] == "1"
    assert (seen["batchSent"], seen["batchFailed"], seen["deleteFailed"]) == (10, 0, 0)
    assert seen["bodies"] == sorted([f"body {i} ✓" for i in range(10)] + ["first ✓"])
    assert (seen["left"], seen["inFlight"]) == (0, 0)
    assert seen["wokenBody"] == "wake" and seen["wokenAfterMs"] < 5000
    assert seen["fifoDuplicateSameId"] is True and seen["fifoSequenceGrows"] is True
    assert seen["fifoBodies"] == ["a", "b"] and seen["fifoGroup"] == "g"
    assert seen["errors"] == {
        "missingQueue": "QueueDoesNotExist",
        "badReceipt": "ReceiptHandleIsInvalid",
        "tooMany": "TooManyEntriesInBatchRequest",
        "fifoWithoutGroup": "MissingParameter",
    }


def test_the_javascript_sdk_v2_over_the_query_protocol(server: LiveServer, name: str) -> None:
    seen = run_js_client("sqs_query_client.cjs", server, name)
    assert seen["queueUrl"] == f"{server.url}/000000000000/{name}"
    assert seen["batch"] == [10, 0] and seen["deleteFailed"] == 0
    # XML-escaped characters and non-ASCII come back as sent
    assert seen["bodies"] == sorted([f"body {i} &" for i in range(10)] + ["first <&> ✓ \U0001f600"])
    assert (seen["text"], seen["raw"], seen["receiveCount"]) == ("héllo <b>", [0, 1, 255], "1")
    assert seen["left"] == "0"
    assert seen["tags"] == {"team": "a&b"}
    assert seen["listed"] == [seen["queueUrl"]] and seen["afterDelete"] == []
    assert seen["errors"] == {
        "missingQueue": "AWS.SimpleQueueService.NonExistentQueue",
        "badReceipt": "ReceiptHandleIsInvalid",
        "badAttribute": "InvalidAttributeValue",
    }


def test_the_javascript_sns_client_fans_out_to_queues(server: LiveServer, name: str) -> None:
    seen = run_js_client("sns_client.mjs", server, name)
    topic = seen["topicArn"]
    assert topic == f"arn:aws:sns:us-east-1:000000000000:{name}"
    assert seen["protocols"] == ["sqs", "sqs"]
    assert seen["batch"] == [["one", "two"], 0]
    # raw delivery with a filter policy: the red messages alone, bodies and attributes as sent
    assert sorted(seen["raw"], key=lambda m: m["body"]) == [
        {"body": "batch red", "attributes": {"color": "red"}},
        {"body": "red <&> ✓", "attributes": {"color": "red", "bytes": [1, 2, 255]}},
    ]
    # no filter, no raw delivery: every message, in SNS's envelope
    wrapped = sorted(seen["wrapped"], key=lambda m: m["message"])
    assert [m["message"] for m in wrapped] == ["batch plain", "batch red", "blue", "red <&> ✓"]
    assert {m["type"] for m in wrapped} == {"Notification"} and {m["topic"] for m in wrapped} == {
        topic
    }
    assert seen["publishedId"] in {m["id"] for m in wrapped}
    assert seen["missingTopic"] == "NotFoundException"
    assert topic not in seen["topicsAfter"]
