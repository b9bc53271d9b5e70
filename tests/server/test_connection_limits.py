"""The server against hostile connections: ones that never finish, headers past the
bound, refusals before routing, clients gone mid-request, responses in one write, TLS for
HTTP and the push gateway."""

from __future__ import annotations

import json
import logging
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from conveyor import Client

from ..support.certs import make_cert
from ..support.live import LiveServer
from ..support.waiting import free_port, wait_port


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
        wait_port(proc, tcp, http)
        context = ssl.create_default_context(cafile=str(cert))
        with PushProducer(f"skmqs://localhost:{tcp}", ssl_context=context) as producer:
            producer.send("tls", b"secret")
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
    _, err = proc.communicate(timeout=30)  # (and its pipe closed)
    assert b"https://127.0.0.1" in err
