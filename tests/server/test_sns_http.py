"""SNS's http subscriptions against real HTTP receivers on loopback, through a real
`conveyor serve`: confirmation (by the SubscribeURL and by ConfirmSubscription), signed
notifications as SNS POSTs them, retries by the delivery policy and then the subscription's
dead-letter queue, an endpoint that hangs holding up no other, a refused endpoint, and
deliveries that wait out a server restart."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore.exceptions import ClientError

from conveyor.server.sns.signing import verify

from ..conftest import unavailable
from ..support.certs import make_cert
from ..support.waiting import free_port, logged

JS = Path(__file__).parent.parent / "js"


class Receiver:
    """An HTTP endpoint that records what it is POSTed; `answer(post)` gives its status."""

    def __init__(self, answer: Callable[[dict[str, Any]], int] = lambda post: 200) -> None:
        self.posts: list[dict[str, Any]] = []
        self.answer = answer
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                post = {"headers": dict(self.headers.items()), "body": body}
                receiver.posts.append(post)
                status = receiver.answer(post)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [p for p in self.posts if p["headers"].get("x-amz-sns-message-type") == kind]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Serve:
    def __init__(self, tmp: Path, store: str, *, tls: tuple[Path, Path] | None = None) -> None:
        self.port = free_port()
        self.tls = tls
        self.url = f"https://localhost:{self.port}" if tls else f"http://127.0.0.1:{self.port}"
        self.log = tmp / f"serve-{self.port}.log"
        more = ["--tls-cert", str(tls[0]), "--tls-key", str(tls[1])] if tls else []
        self.proc = logged(
            [sys.executable, "-m", "conveyor", "--store", store, "serve", "--port",
             str(self.port), "--sns-http-allow", "127.0.0.1", *more],
            self.log,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(self.url + "/livez", verify=self.verify).raise_for_status()
                return
            except httpx.HTTPError:
                assert self.proc.poll() is None and time.monotonic() < deadline, (
                    self.log.read_text()
                )
                time.sleep(0.05)

    @property
    def verify(self) -> Any:
        return ssl.create_default_context(cafile=str(self.tls[0])) if self.tls else True

    def client(self, service: str) -> Any:
        return boto3.client(
            service,
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id="k",
            aws_secret_access_key="s",
            verify=str(self.tls[0]) if self.tls else None,
        )

    def stop(self) -> None:
        self.proc.terminate()
        assert self.proc.wait(30) == 0, self.log.read_text()


def until(check: Callable[[], Any], seconds: float = 20) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    made: list[Receiver] = []
    yield made
    for r in made:
        r.close()


def confirmed(sns: Any, topic: str, receiver: Receiver, cert: bytes, by_url: bool) -> str:
    """Confirm the subscription whose SubscriptionConfirmation `receiver` got; its ARN."""
    [post] = until(lambda: receiver.of_type("SubscriptionConfirmation"))
    message = json.loads(post["body"])
    assert post["headers"]["x-amz-sns-topic-arn"] == topic == message["TopicArn"]
    assert post["headers"]["Content-Type"] == "text/plain; charset=UTF-8"
    assert verify(message, cert), "the confirmation's signature does not verify"
    if by_url:
        r = httpx.get(message["SubscribeURL"])
        assert r.status_code == 200, r.text
    else:
        sns.confirm_subscription(TopicArn=topic, Token=message["Token"])
    subs = sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
    [arn] = [s["SubscriptionArn"] for s in subs if s["Endpoint"] == receiver.url]
    assert arn.startswith(topic + ":")
    return str(arn)


def test_webhooks_confirm_sign_retry_dead_letter_and_hold_up_nobody(
    tmp_path: Path, receivers: list[Receiver]
) -> None:
    store = f"sqlite:///{tmp_path / 'sns.db'}"
    serve = Serve(tmp_path, store)
    try:
        sns, sqs = serve.client("sns"), serve.client("sqs")
        topic = sns.create_topic(Name="events")["TopicArn"]
        cert = httpx.get(f"{serve.url}/SimpleNotificationService-conveyor.pem").content
        good, raw = Receiver(), Receiver()
        failing = Receiver(lambda post: 200 if "Confirmation" in post["body"] else 500)

        def hang(post: dict[str, Any]) -> int:
            if "Confirmation" not in post["body"]:
                time.sleep(60)  # past the server's 15 s: it gives up, and tries again later
            return 200

        hanging = Receiver(hang)
        receivers += [good, raw, failing, hanging]

        # an endpoint the operator did not allow is refused at Subscribe, in SNS's words
        with pytest.raises(ClientError) as refused:
            sns.subscribe(TopicArn=topic, Protocol="http", Endpoint="http://10.9.8.7/hook")
        assert refused.value.response["Error"]["Code"] == "InvalidParameter"
        assert "--sns-http-allow" in refused.value.response["Error"]["Message"]

        pending = sns.subscribe(TopicArn=topic, Protocol="http", Endpoint=good.url)
        assert pending["SubscriptionArn"] == "pending confirmation"
        listed = sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
        assert [s["SubscriptionArn"] for s in listed] == ["PendingConfirmation"]
        good_arn = confirmed(sns, topic, good, cert, by_url=True)
        attrs = sns.get_subscription_attributes(SubscriptionArn=good_arn)["Attributes"]
        assert attrs["Protocol"] == "http" and attrs["Endpoint"] == good.url
        assert attrs["PendingConfirmation"] == "false"
        assert json.loads(attrs["EffectiveDeliveryPolicy"])["healthyRetryPolicy"]["numRetries"] == 3

        sns.subscribe(
            TopicArn=topic,
            Protocol="http",
            Endpoint=raw.url,
            Attributes={"RawMessageDelivery": "true"},
        )
        confirmed(sns, topic, raw, cert, by_url=False)
        dlq = sqs.create_queue(QueueName="hooks-dlq")["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        retry_fast = {
            "healthyRetryPolicy": {"numRetries": 2, "minDelayTarget": 1, "maxDelayTarget": 1}
        }
        sns.subscribe(
            TopicArn=topic,
            Protocol="http",
            Endpoint=failing.url,
            Attributes={
                "DeliveryPolicy": json.dumps(retry_fast),
                "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn}),
            },
        )
        confirmed(sns, topic, failing, cert, by_url=False)
        sns.subscribe(TopicArn=topic, Protocol="http", Endpoint=hanging.url)
        confirmed(sns, topic, hanging, cert, by_url=False)

        started = time.monotonic()
        for i in range(10):
            sns.publish(TopicArn=topic, Message=f"event {i}", Subject="s")
        # the hanging endpoint holds up nobody: the others have all ten within seconds
        until(lambda: len(good.of_type("Notification")) >= 10, 15)
        until(lambda: len(raw.posts) >= 11, 15)
        assert time.monotonic() - started < 15
        notes = good.of_type("Notification")
        assert sorted(json.loads(p["body"])["Message"] for p in notes) == [
            f"event {i}" for i in range(10)
        ]
        for post in notes:
            message = json.loads(post["body"])
            assert verify(message, cert)
            assert post["headers"]["x-amz-sns-subscription-arn"] == good_arn
            assert post["headers"]["x-amz-sns-message-id"] == message["MessageId"]
            assert message["SigningCertURL"].startswith(serve.url)
        assert sorted(p["body"] for p in raw.posts[1:]) == [f"event {i}" for i in range(10)]

        # the failing endpoint: the first attempt and two retries a message, then its
        # dead-letter queue
        def dead_letters() -> list[str]:
            got = sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10).get("Messages", [])
            for m in got:
                sqs.delete_message(QueueUrl=dlq, ReceiptHandle=m["ReceiptHandle"])
                letters.append(json.loads(m["Body"])["Message"])
            return letters if len(letters) >= 10 else []

        letters: list[str] = []
        until(dead_letters, 30)
        assert sorted(letters) == [f"event {i}" for i in range(10)]
        assert len(failing.of_type("Notification")) == 30  # 3 attempts each

        # unsubscribed: the endpoint is told, and its delivery queue goes once it is empty
        def deliveries() -> list[str]:
            return list(sqs.list_queues(QueueNamePrefix="sns-http-").get("QueueUrls", []))

        assert len(deliveries()) == 4
        sns.unsubscribe(SubscriptionArn=good_arn)
        [bye] = until(lambda: good.of_type("UnsubscribeConfirmation"))
        assert verify(json.loads(bye["body"]), cert)
        until(lambda: len(deliveries()) == 3, 30)
    finally:
        serve.stop()


def test_deliveries_wait_out_a_restart_and_none_is_made_twice(
    tmp_path: Path, receivers: list[Receiver]
) -> None:
    """Publishes accepted while the endpoint is down are delivered once it is back, by a
    server started again: each once (the endpoint answered 200 to every one it got)."""
    store = f"sqlite:///{tmp_path / 'sns.db'}"
    up = threading.Event()
    endpoint = Receiver(lambda post: 200 if up.is_set() or "Confirmation" in post["body"] else 503)
    receivers.append(endpoint)
    serve = Serve(tmp_path, store)
    sns = serve.client("sns")
    topic = sns.create_topic(Name="orders")["TopicArn"]
    cert = httpx.get(f"{serve.url}/SimpleNotificationService-conveyor.pem").content
    policy = {"healthyRetryPolicy": {"numRetries": 20, "minDelayTarget": 1, "maxDelayTarget": 1}}
    sns.subscribe(
        TopicArn=topic,
        Protocol="http",
        Endpoint=endpoint.url,
        Attributes={"DeliveryPolicy": json.dumps(policy)},
    )
    confirmed(sns, topic, endpoint, cert, by_url=False)
    for i in range(20):
        sns.publish(TopicArn=topic, Message=f"order {i}")
    until(lambda: endpoint.of_type("Notification"))  # it is trying, and refused
    serve.stop()
    up.set()
    tried = len(endpoint.posts)
    serve = Serve(tmp_path, store)
    try:

        def taken() -> list[str]:
            got = [
                json.loads(p["body"])["Message"]
                for p in endpoint.of_type("Notification")[tried - 1 :]
            ]
            return got if len(set(got)) >= 20 else []

        until(taken, 30)
        time.sleep(1.5)  # a retry made twice would show by now
        delivered = [json.loads(p["body"]) for p in endpoint.posts[tried:]]
        ids = [m["MessageId"] for m in delivered]
        assert sorted(m["Message"] for m in delivered) == sorted(f"order {i}" for i in range(20))
        assert len(ids) == len(set(ids)) == 20
    finally:
        serve.stop()


def test_a_standard_validator_verifies_the_signatures(
    tmp_path: Path, receivers: list[Receiver]
) -> None:
    """sns-validator (npm), unmodified but told to trust certificates from this server's
    host, verifies the confirmation and notifications, SignatureVersion 1 and 2."""
    node = shutil.which("node")
    if node is None or not (JS / "node_modules" / "sns-validator").is_dir():
        unavailable("sns-validator (node, and npm ci in tests/js)")
    cert, key = make_cert(tmp_path)
    serve = Serve(tmp_path, f"sqlite:///{tmp_path / 'sns.db'}", tls=(cert, key))
    endpoint = Receiver()
    receivers.append(endpoint)
    try:
        sns = serve.client("sns")
        signing = httpx.get(
            f"{serve.url}/SimpleNotificationService-conveyor.pem", verify=serve.verify
        ).content
        messages, confirmations = [], []
        for version in ("1", "2"):
            topic = sns.create_topic(Name=f"signed{version}")["TopicArn"]
            sns.set_topic_attributes(
                TopicArn=topic, AttributeName="SignatureVersion", AttributeValue=version
            )
            sns.subscribe(TopicArn=topic, Protocol="http", Endpoint=endpoint.url)
            confirmed(sns, topic, endpoint, signing, by_url=False)
            sns.publish(TopicArn=topic, Message=f"signed with version {version}", Subject="hi")
            [post] = until(
                lambda t=topic: [  # type: ignore[misc]
                    p
                    for p in endpoint.of_type("Notification")
                    if p["headers"]["x-amz-sns-topic-arn"] == t
                ]
            )
            note = json.loads(post["body"])
            assert note["SignatureVersion"] == version
            messages.append(note)
            [asked] = endpoint.of_type("SubscriptionConfirmation")
            confirmations.append(json.loads(asked["body"]))
            endpoint.posts.clear()
        confirmation = confirmations[1]  # and a message tampered with: refused
        tampered = {**messages[1], "Message": "not what was signed"}
        lines = "\n".join(json.dumps(m) for m in [*messages, tampered, confirmation])
        done = subprocess.run(
            [node, str(JS / "sns_validate.cjs"), r"^localhost:\d+$"],
            input=lines, capture_output=True, text=True, timeout=60,
            env={"PATH": "/usr/bin:/bin", "NODE_EXTRA_CA_CERTS": str(cert)},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        results = done.stdout.split("\n")[:4]
        assert results[:2] == ["valid", "valid"] and results[3] == "valid", done.stdout
        assert results[2].startswith("invalid"), done.stdout
    finally:
        serve.stop()
