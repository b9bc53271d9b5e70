"""Auth on and off, StatsD emission."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from botocore.exceptions import ClientError

from conveyor import Client
from conveyor.exceptions import InvalidInput
from conveyor.server import ServerConfig, check_exposure
from conveyor.server.front.auth import load_credentials

from ..support.credentials import PARTNER_CREDENTIALS
from ..support.live import LiveServer


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    path: Path = tmp_path_factory.mktemp("auth") / "credentials"
    path.write_text(PARTNER_CREDENTIALS)
    config = ServerConfig(auth_token="t0ken", aws_keys=load_credentials(path))
    with Client("memory://") as client, LiveServer(client, config) as live:
        yield live


def test_sigv4_is_verified(secured: LiveServer) -> None:
    good = secured.sqs(key="AKIDGOOD", secret="s3cret")
    url = good.create_queue(QueueName="signed")["QueueUrl"]
    good.send_message(QueueUrl=url, MessageBody="ok")
    partner = secured.sqs(key="AKIDPARTNER", secret="other")
    assert partner.create_queue(QueueName="signed")["QueueUrl"].endswith("/111122223333/signed")
    for key, secret, expected in (
        ("AKIDGOOD", "wrong", "SignatureDoesNotMatch"),
        ("AKIDUNKNOWN", "s3cret", "InvalidClientTokenId"),
    ):
        with pytest.raises(ClientError) as exc:
            secured.sqs(key=key, secret=secret).list_queues()
        assert exc.value.response["Error"]["Code"] == expected
        assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    r = httpx.post(secured.url + "/", data={"Action": "ListQueues"})  # unsigned
    assert r.status_code == 403 and b"AccessDenied" in r.content


def test_rest_needs_the_bearer_token(secured: LiveServer) -> None:
    r = httpx.get(secured.url + "/queues")
    assert r.status_code == 401 and r.json()["code"] == "Unauthorized"
    assert httpx.get(secured.url + "/metrics").status_code == 401
    ok = httpx.get(secured.url + "/queues", headers={"Authorization": "Bearer t0ken"})
    assert ok.status_code == 200
    assert httpx.get(secured.url + "/healthz").status_code == 200


def test_exposure_beyond_loopback_needs_auth(tmp_path: Path) -> None:
    check_exposure("127.0.0.1", ServerConfig(), insecure=False)
    with pytest.raises(InvalidInput, match="--auth-token"):
        check_exposure("0.0.0.0", ServerConfig(), insecure=False)
    check_exposure("0.0.0.0", ServerConfig(), insecure=True)
    (tmp_path / "c").write_text(PARTNER_CREDENTIALS)
    keys = load_credentials(tmp_path / "c")
    check_exposure("0.0.0.0", ServerConfig(auth_token="t", aws_keys=keys), insecure=False)
    (tmp_path / "bad").write_text("[x]\naws_access_key_id = A\n")
    with pytest.raises(InvalidInput, match=r"\[x\]: needs aws_access_key_id and aws_secret"):
        load_credentials(tmp_path / "bad")


def test_statsd_gets_the_predecessor_names() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.bind(("127.0.0.1", 0))
        udp.settimeout(5)
        port = udp.getsockname()[1]
        config = ServerConfig(statsd=f"127.0.0.1:{port}")
        with Client("memory://") as client, LiveServer(client, config) as live:
            sqs = live.sqs()
            url = sqs.create_queue(QueueName="stats")["QueueUrl"]
            sqs.send_message_batch(
                QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(3)]
            )
            got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=4)["Messages"]
            sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
            live.conveyor.metrics.flush_depths()
            seen: set[str] = set()
            while not {"stats.deleted.count:1|c", "stats.approximate_depth.count:0|g"} <= seen:
                seen.update(udp.recv(4096).decode().split("\n"))
        assert "stats.sent.count:3|c" in seen
        assert "stats.received.count:3|c" in seen
        assert "stats.fill.count:75|g" in seen
        assert "stats.depth.count:2|g" in seen
