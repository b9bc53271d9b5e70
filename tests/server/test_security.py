"""The server against hostile clients: signatures bound to the body, presigned URLs,
malformed and hostile input, connections that never finish, the one error shape, TLS."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import socket
import ssl
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
import pytest
from botocore.auth import SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from conveyor import Client
from conveyor.server import ServerConfig
from conveyor.server.front.auth import load_credentials

from ..support.live import LiveServer, free_port

CREDENTIALS = """\
[default]
aws_access_key_id = AKIDGOOD
aws_secret_access_key = s3cret
"""
GOOD = Credentials("AKIDGOOD", "s3cret")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    path: Path = tmp_path_factory.mktemp("sec") / "credentials"
    path.write_text(CREDENTIALS)
    config = ServerConfig(
        auth_token="t0ken", metrics_token="scrape", aws_keys=load_credentials(path)
    )
    with Client("memory://") as client, LiveServer(client, config, request_timeout=1) as live:
        yield live


def signed(
    url: str, body: str, *, extra: dict[str, str] | None = None, service: str = "sqs"
) -> AWSRequest:
    request = AWSRequest(
        method="POST",
        url=url + "/",
        data=body.encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded", **(extra or {})},
    )
    SigV4Auth(GOOD, service, "us-east-1").add_auth(request)
    return request


def send(request: AWSRequest, body: bytes | None = None) -> httpx.Response:
    data = body if body is not None else request.body
    assert isinstance(data, bytes)
    return httpx.post(request.url, content=data, headers=dict(request.headers.items()))


def test_a_signature_binds_the_body(secured: LiveServer) -> None:
    listing = signed(secured.url, "Action=ListQueues")
    assert send(listing).status_code == 200
    # the captured signature replayed with another body (another action) is refused
    replay = send(listing, b"Action=CreateQueue&QueueName=evil")
    assert replay.status_code == 403 and b"SignatureDoesNotMatch" in replay.content
    # a payload hash header that is signed but is not the body's hash
    forged = signed(
        secured.url,
        "Action=ListQueues",
        extra={"X-Amz-Content-SHA256": hashlib.sha256(b"Action=ListQueues").hexdigest()},
    )
    assert send(forged).status_code == 200
    replay = send(forged, b"Action=CreateQueue&QueueName=evil")
    assert replay.status_code == 403
    # a payload hash header left out of the signature
    unsigned = signed(secured.url, "Action=ListQueues")
    headers = dict(unsigned.headers.items())
    headers["X-Amz-Content-SHA256"] = "UNSIGNED-PAYLOAD"
    r = httpx.post(unsigned.url, content=unsigned.body, headers=headers)
    assert r.status_code == 403 and b"not signed" in r.content
    # a valid signature with anything after it in the header is not that signature
    for tail in ("0", ", Signature=" + "0" * 64, " junk"):
        request = signed(secured.url, "Action=CreateQueue&QueueName=evil")
        headers = dict(request.headers.items())
        headers["Authorization"] += tail
        r = httpx.post(request.url, content=request.body, headers=headers)
        assert r.status_code == 403 and b"SignatureDoesNotMatch" in r.content, tail
    with Client("memory://") as check:
        assert "evil" not in check.list_queues()


def test_a_signature_for_another_service_is_refused(secured: LiveServer) -> None:
    """The credential scope names the service the signature is for: an SQS request signed
    for S3 (or for DynamoDB) is refused as SQS refuses it, whether in the Authorization
    header or presigned; SNS takes its own scope (and STS's, for GetCallerIdentity)."""
    for service in ("s3", "dynamodb"):
        r = send(signed(secured.url, "Action=CreateQueue&QueueName=scoped", service=service))
        assert r.status_code == 403 and b"SignatureDoesNotMatch" in r.content, service
        assert b"Credential should be scoped to correct service: 'sqs'." in r.content
        request = AWSRequest(
            method="GET",
            url=secured.url + "/",
            params={"Action": "CreateQueue", "QueueName": "scoped", "Version": "2012-11-05"},
        )
        SigV4QueryAuth(GOOD, service, "us-east-1", expires=60).add_auth(request)
        r = httpx.get(str(request.prepare().url))
        assert r.status_code == 403 and b"SignatureDoesNotMatch" in r.content, service
    with Client("memory://") as check:
        assert "scoped" not in check.list_queues()
    topics = send(signed(secured.url, "Action=ListTopics", service="sns"))
    assert topics.status_code == 200 and b"ListTopicsResponse" in topics.content
    who = send(signed(secured.url, "Action=GetCallerIdentity", service="sts"))
    assert who.status_code == 200 and b"AKIDGOOD" not in who.content
    assert send(signed(secured.url, "Action=ListQueues")).status_code == 200


def test_with_credentials_a_browser_may_name_the_server_as_it_likes(secured: LiveServer) -> None:
    """Where the server asks for credentials, a page that has none gets nothing by naming
    it otherwise: requests carrying them pass by any host name (a proxy's public one)."""
    headers = {"Sec-Fetch-Site": "same-origin", "Host": "queues.example.com"}
    r = httpx.get(secured.url + "/queues", headers={**headers, "Authorization": "Bearer t0ken"})
    assert r.status_code == 200
    assert httpx.get(secured.url + "/queues", headers=headers).status_code == 401
    listing = signed(secured.url, "Action=ListQueues", extra={"Sec-Fetch-Site": "same-origin"})
    assert send(listing).status_code == 200


def test_a_signature_from_another_time_is_refused(secured: LiveServer) -> None:
    then = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(minutes=20)
    with mock.patch("botocore.auth.get_current_datetime", return_value=then):
        old = signed(secured.url, "Action=ListQueues")
    r = send(old)
    assert r.status_code == 403 and b"Signature expired" in r.content


def presign(url: str, expires: int, when: dt.datetime | None = None) -> str:
    request = AWSRequest(
        method="GET", url=url + "/", params={"Action": "ListQueues", "Version": "2012-11-05"}
    )
    if when is None:
        SigV4QueryAuth(GOOD, "sqs", "us-east-1", expires=expires).add_auth(request)
    else:
        with mock.patch("botocore.auth.get_current_datetime", return_value=when):
            SigV4QueryAuth(GOOD, "sqs", "us-east-1", expires=expires).add_auth(request)
    return str(request.prepare().url)


def test_presigned_urls(secured: LiveServer) -> None:
    url = presign(secured.url, 300)
    ok = httpx.get(url)
    assert ok.status_code == 200 and b"ListQueuesResponse" in ok.content
    tampered = url.replace("ListQueues", "ListQueuez", 1)
    assert httpx.get(tampered).status_code == 403
    bad = url[:-4] + ("0000" if not url.endswith("0000") else "1111")
    r = httpx.get(bad)
    assert r.status_code == 403 and b"SignatureDoesNotMatch" in r.content
    then = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(minutes=10)
    expired = httpx.get(presign(secured.url, 60, then))
    assert expired.status_code == 403 and b"expired" in expired.content
    still = httpx.get(presign(secured.url, 3600, then))
    assert still.status_code == 200


def test_deeply_nested_json_is_a_400(server: LiveServer) -> None:
    body = b'{"QueueNamePrefix": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    r = httpx.post(
        server.url + "/",
        content=body,
        headers={
            "X-Amz-Target": "AmazonSQS.ListQueues",
            "Content-Type": "application/x-amz-json-1.0",
        },
    )
    assert r.status_code == 400, r.text
    assert "__type" in r.json()
    rest = httpx.post(
        server.url + "/queues/nested/messages",
        content=b'{"body": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        headers={"Content-Type": "application/json"},
    )
    assert rest.status_code in (400, 422) and set(rest.json()) == {"error", "code"}


def test_a_page_of_another_site_cannot_act_through_a_browser(
    server: LiveServer, store: Client
) -> None:
    """A browser's request for a page elsewhere (a form posted here, an image naming a query
    action) carries an Origin that is not this host, or Sec-Fetch-Site saying so: refused
    with AccessDenied before it does anything, on the SQS, SNS and REST APIs alike. Reads of
    the REST API and the dashboard stay open to links; programs send no Origin, and the
    dashboard's own requests come from its origin."""
    url = server.url
    queue = f"{url}/000000000000/kept"
    store.create_queue("kept").send(b"m")
    evil = {"Origin": "http://evil.example"}
    attempts = [
        ("POST", "/", evil, {"Action": "CreateQueue", "QueueName": "made"}),
        ("POST", "/", {"Origin": "null"}, {"Action": "PurgeQueue", "QueueUrl": queue}),
        ("GET", "/", {"Sec-Fetch-Site": "cross-site"}, {"Action": "PurgeQueue", "QueueUrl": queue}),
        ("GET", "/000000000000/kept", {"Sec-Fetch-Site": "same-site"}, {"Action": "PurgeQueue"}),
        ("POST", "/", evil, {"Action": "CreateTopic", "Name": "made"}),
        # a port of this host is another origin: a page served there is refused too
        (
            "POST",
            "/",
            {"Origin": "http://127.0.0.1:1"},
            {"Action": "DeleteQueue", "QueueUrl": queue},
        ),
    ]
    for method, path, headers, params in attempts:
        if method == "GET":
            r = httpx.get(url + path, params=params, headers=headers)
        else:
            r = httpx.post(url + path, data=params, headers=headers)
        assert r.status_code == 403, (headers, params)
        code = ET.fromstring(r.content).find(".//{*}Code")
        assert code is not None and code.text == "AccessDenied"
        assert "another site" in r.text
    sent = httpx.post(
        url + "/",
        content=json.dumps({"QueueUrl": queue, "MessageBody": "x"}),
        headers={
            **evil,
            "X-Amz-Target": "AmazonSQS.SendMessage",
            "Content-Type": "application/x-amz-json-1.0",
        },
    )
    assert sent.status_code == 403 and sent.json()["__type"].endswith("AccessDenied")
    posted = httpx.post(
        url + "/queues/kept/messages",
        content=json.dumps({"messages": [{"body": "x"}]}),
        headers={**evil, "Content-Type": "text/plain"},
    )
    assert posted.status_code == 403 and posted.json()["code"] == "AccessDenied"
    assert store.queue("kept").stats().ready == 1  # nothing was sent, purged or deleted
    assert store.list_queues() == ["kept"]
    assert not store.list_topics()
    # reads and the dashboard: a link from elsewhere opens them
    cross = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
    assert httpx.get(url + "/ui", headers=cross).status_code == 200
    assert httpx.get(url + "/queues", headers=cross).status_code == 200
    # the dashboard's own requests, and programs
    own = {"Origin": url, "Sec-Fetch-Site": "same-origin"}
    for headers in (own, {}):
        r = httpx.post(url + "/", data={"Action": "ListQueues"}, headers=headers)
        assert r.status_code == 200 and "kept" in r.text
    assert server.sqs().get_queue_url(QueueName="kept")["QueueUrl"] == queue


def test_a_browser_naming_the_server_otherwise_is_refused_without_credentials() -> None:
    """DNS rebinding: a page at a name made to resolve to this machine is the server's own
    origin to the browser. Without credentials to ask for, a browser's request (it carries
    Origin or Sec-Fetch-Site) naming the server by a host that is not localhost, an IP
    address or an --allowed-host is refused, reads included; programs (no such headers),
    the server's own names and allowed ones pass, and so do requests with credentials."""
    browser = {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}

    def calls(url: str, host: str, **extra: str) -> list[int]:
        headers = {**browser, "Host": host, "Origin": f"http://{host}", **extra}
        return [
            httpx.post(url + "/", data={"Action": "ListQueues"}, headers=headers).status_code,
            httpx.get(url + "/queues", headers=headers).status_code,
            httpx.get(url + "/ui", headers=headers).status_code,
        ]

    with Client("memory://") as client, LiveServer(client) as live:
        port = live.port
        refused = httpx.get(
            live.url + "/queues", headers={**browser, "Host": f"rebind.example:{port}"}
        )
        assert refused.status_code == 403 and "--allowed-host rebind.example" in refused.text
        assert calls(live.url, f"rebind.example:{port}") == [403, 403, 403]
        sqs = httpx.post(
            live.url + "/",
            data={"Action": "ListQueues"},
            headers={**browser, "Host": "rebind.example"},
        )
        assert sqs.status_code == 403 and "or give it --aws-credentials" in sqs.text
        assert "or give it --auth-token" in refused.text
        for own in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "app.localhost"):
            assert calls(live.url, own) == [200, 200, 200], own
        program = {"Host": f"rebind.example:{port}"}  # a proxy's, say: no browser headers
        assert httpx.get(live.url + "/queues", headers=program).status_code == 200
    config = ServerConfig(allowed_hosts=("queues.example.com",))
    with Client("memory://") as client, LiveServer(client, config) as live:
        assert calls(live.url, "queues.example.com") == [200, 200, 200]
        assert calls(live.url, "other.example.com") == [403, 403, 403]


def test_query_errors_never_carry_what_xml_cannot(server: LiveServer) -> None:
    for action in ("List\x00Queues", "Bad\uffffAction", "x\x1b"):
        r = httpx.post(server.url + "/", data={"Action": action})
        assert r.status_code == 400
        root = ET.fromstring(r.content)  # parses: the reply is well-formed
        assert root.find(".//{*}Code") is not None


def test_rest_errors_have_one_shape(server: LiveServer) -> None:
    missing = httpx.get(server.url + "/no/such/route")
    assert missing.status_code == 404
    assert missing.json() == {"error": "Not Found", "code": "NotFound"}
    wrong = httpx.put(server.url + "/healthz")
    assert wrong.status_code == 405 and wrong.json()["code"] == "MethodNotAllowed"
    assert "GET" in wrong.headers["allow"]
    invalid = httpx.post(server.url + "/queues/any/messages", json={"delay": "soon"})
    assert invalid.status_code == 400 and set(invalid.json()) == {"error", "code"}


def test_metrics_token_opens_metrics_alone(secured: LiveServer) -> None:
    scrape = {"Authorization": "Bearer scrape"}
    assert httpx.get(secured.url + "/metrics", headers=scrape).status_code == 200
    assert httpx.get(secured.url + "/queues", headers=scrape).status_code == 401
    full = {"Authorization": "Bearer t0ken"}
    assert httpx.get(secured.url + "/metrics", headers=full).status_code == 200
    assert httpx.get(secured.url + "/metrics").status_code == 401


def test_silent_and_trickling_connections_are_closed(secured: LiveServer) -> None:
    def connect() -> socket.socket:
        s = socket.create_connection(("127.0.0.1", secured.port), timeout=15)
        return s

    silent = [connect() for _ in range(200)]
    trickling = connect()
    trickling.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nAction=")
    slow_headers = connect()
    slow_headers.sendall(b"GET /healthz HTTP/1.1\r\nHo")
    for s in [*silent, trickling, slow_headers]:
        data = b""
        while True:  # read until the server closes it (the timeout is 1 s)
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        assert data in (b"", b"") or data.startswith(b"HTTP/1.1 408"), data
        s.close()
    # the server still answers
    assert httpx.get(secured.url + "/healthz").status_code == 200


def test_deadlines_hold_on_a_connection_that_has_served_many_requests() -> None:
    """A connection's deadlines move with each request (one timer a connection, moved
    lazily): requests kept coming for longer than both timeouts are all answered; idle
    after them, the connection closes at the keep-alive's end; a request begun later and
    left unfinished has its connection closed a request timeout after its first byte."""
    with (
        Client("memory://") as client,
        LiveServer(client, request_timeout=1.5, keep_alive=1) as live,
    ):
        health = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"

        def answered(s: socket.socket) -> bytes:
            data = b""
            while not data.endswith(b"}"):  # /healthz answers a JSON object
                chunk = s.recv(4096)
                assert chunk, data
                data += chunk
            return data

        def busy(seconds: float) -> socket.socket:
            s = socket.create_connection(("127.0.0.1", live.port), timeout=15)
            until = time.monotonic() + seconds
            while time.monotonic() < until:
                s.sendall(health)
                assert answered(s).startswith(b"HTTP/1.1 200 ")
                time.sleep(0.1)  # within the keep-alive
            return s

        idle = busy(2.0)
        went_idle = time.monotonic()
        assert idle.recv(1) == b""  # closed by the server
        assert 0.8 < time.monotonic() - went_idle < 1.4
        idle.close()

        partial = busy(2.0)
        partial.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nAct")
        begun = time.monotonic()
        data = b""
        while chunk := partial.recv(4096):
            data += chunk
        assert data.startswith(b"HTTP/1.1 408 ") and b'"RequestTimeout"' in data, data
        assert 1.3 < time.monotonic() - begun < 2.1
        partial.close()


def test_headers_past_the_bound_get_431_and_the_server_goes_on(secured: LiveServer) -> None:
    """A request whose line and headers take more than MAX_HEAD bytes is answered 431 and its
    connection closed: a client still sending its headers reads the answer (it is not reset),
    a request line as long is refused alike, and headers within the bound are served."""
    from conveyor.server.front.protocol import MAX_HEAD

    def exchange(head: bytes) -> bytes:
        s = socket.create_connection(("127.0.0.1", secured.port), timeout=15)
        try:
            s.sendall(head)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
            return data
        finally:
            s.close()

    huge = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (4 * 1024 * 1024) + b"\r\n\r\n"
    answer = exchange(huge)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:80]
    assert b"send fewer or shorter headers" in answer
    many = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 60) for i in range(MAX_HEAD // 64 + 10))
    assert exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n").startswith(
        b"HTTP/1.1 431 "
    )
    long_line = b"GET /healthz?" + b"q" * (MAX_HEAD + 1) + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    assert exchange(long_line).startswith(b"HTTP/1.1 431 ")
    within = {f"x-h{i}": "v" * 60 for i in range(MAX_HEAD // 128)}  # about half the bound
    assert httpx.get(secured.url + "/healthz", headers=within).status_code == 200


def test_refusals_before_routing_answer_in_the_error_shape(secured: LiveServer) -> None:
    """What is refused before it reaches a route (not HTTP: 400; headers past the bound: 431;
    a request not whole in time: 408) answers JSON `{"error", "code"}` saying what to fix."""

    def exchange(data: bytes) -> tuple[bytes, dict[str, str]]:
        with socket.create_connection(("127.0.0.1", secured.port), timeout=15) as s:
            s.sendall(data)
            got = b""
            while chunk := s.recv(65536):
                got += chunk
        head, _, body = got.partition(b"\r\n\r\n")
        assert b"content-type: application/json" in head.lower(), head
        return head, json.loads(body)

    head, error = exchange(b"NOT HTTP AT ALL\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and error["code"] == "MalformedRequest"
    assert "well-formed HTTP/1.1" in error["error"]
    head, error = exchange(b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 ") and error["code"] == "RequestHeaderFieldsTooLarge"
    head, error = exchange(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nAc")
    assert head.startswith(b"HTTP/1.1 408 ") and error["code"] == "RequestTimeout"
    assert "did not arrive whole" in error["error"]


def test_a_response_goes_out_in_one_write() -> None:
    """uvicorn writes a response's status line and headers, then its body: the server's
    protocol sends both in one write (one system call, one TCP segment), on a keep-alive
    connection and on one the response closes, which still delivers it whole."""
    import asyncio

    from conveyor.server.front.protocol import GuardedHttpProtocol

    writes: list[int] = []  # the transport's writes, per connection

    class Counting:
        def __init__(self, transport: asyncio.Transport, index: int) -> None:
            self.transport = transport
            self.index = index

        def write(self, data: bytes) -> None:
            writes[self.index] += 1
            self.transport.write(data)

        def writelines(self, data: list[bytes]) -> None:
            writes[self.index] += 1
            self.transport.writelines(data)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.transport, name)

    class Probe(GuardedHttpProtocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            writes.append(0)
            counted = Counting(transport, len(writes) - 1)  # type: ignore[arg-type]
            super().connection_made(counted)  # type: ignore[arg-type]

    def response(s: socket.socket) -> tuple[bytes, bytes]:
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(65536)
        head, body = data.split(b"\r\n\r\n", 1)
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        while len(body) < length:
            body += s.recv(65536)
        return head, body

    list_queues = (
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-amz-json-1.0\r\n"
        b"X-Amz-Target: AmazonSQS.ListQueues\r\nContent-Length: 2\r\n%s\r\n{}"
    )
    with Client("memory://") as client, LiveServer(client, http=Probe) as live:
        client.create_queue("jobs")
        s = socket.create_connection(("127.0.0.1", live.port), timeout=15)
        for _ in range(3):
            s.sendall(list_queues % b"")
            head, body = response(s)
            assert head.startswith(b"HTTP/1.1 200") and b"/jobs" in body
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        head, _ = response(s)
        assert head.startswith(b"HTTP/1.1 200")
        s.sendall(list_queues % b"Connection: close\r\n")
        head, body = response(s)
        assert b"/jobs" in body
        assert s.recv(1) == b""  # closed after the whole response
        s.close()
    assert writes == [5]


def test_a_client_gone_mid_request_is_not_a_server_error(
    server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="conveyor.server"):
        for path in ("/", "/queues"):
            s = socket.create_connection(("127.0.0.1", server.port))
            s.sendall(
                f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                "X-Amz-Target: AmazonSQS.ListQueues\r\nContent-Length: 1000\r\n\r\n{".encode()
            )
            time.sleep(0.2)  # the request is being read: now the client vanishes
            s.close()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and "went away" not in caplog.text:
            time.sleep(0.05)
    assert "went away" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    assert 'status="500"' not in httpx.get(server.url + "/metrics").text


def make_cert(tmp: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_tls_for_http_and_the_push_gateway(tmp_path: Path) -> None:
    import boto3

    from conveyor.push import PushProducer

    cert, key = make_cert(tmp_path)
    http, tcp = free_port(), free_port()
    store = f"sqlite:///{tmp_path / 'tls.db'}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "conveyor", "--store", store, "serve", "--port", str(http),
         "--tls-cert", str(cert), "--tls-key", str(key), "--tcp", f"127.0.0.1:{tcp}",
         "--request-timeout", "2"],
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", tcp), timeout=1).close()
                socket.create_connection(("127.0.0.1", http), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        context = ssl.create_default_context(cafile=str(cert))
        PushProducer(f"skmqs://localhost:{tcp}", ssl_context=context).send("tls", b"secret")
        sqs = boto3.client(
            "sqs",
            endpoint_url=f"https://localhost:{http}",
            region_name="us-east-1",
            aws_access_key_id="k",
            aws_secret_access_key="s",
            verify=str(cert),
        )
        url = sqs.get_queue_url(QueueName="tls")["QueueUrl"]
        assert url.startswith("https://")
        [m] = sqs.receive_message(QueueUrl=url)["Messages"]
        assert m["Body"] == "secret"
        with pytest.raises(httpx.HTTPError):  # plain HTTP on the TLS port gets nowhere
            httpx.get(f"http://127.0.0.1:{http}/healthz", timeout=5)
        # a connection that never starts its handshake is closed at the request timeout
        # (2 s here), not at the event loop's 60 s
        with socket.create_connection(("127.0.0.1", http), timeout=30) as idle:
            opened = time.monotonic()
            assert idle.recv(1) == b""
            assert time.monotonic() - opened < 15
    finally:
        proc.terminate()
        proc.wait(30)
    assert proc.stderr is not None
    assert b"https://127.0.0.1" in proc.stderr.read()


PARTNER_CREDENTIALS = (
    CREDENTIALS
    + """
[partner]
aws_access_key_id = AKIDPARTNER
aws_secret_access_key = other
account = 111122223333
"""
)


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
