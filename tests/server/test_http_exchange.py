"""Requests to the SQS endpoint answered by the server's HTTP protocol without ASGI: the
same answers as through ASGI, in order behind a request that waits, closed connections
where HTTP says so (and answers to clients that half-close), and the access log's lines."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from conveyor import Client
from conveyor.server.app import BodyLimit, ServerConfig

from ..support.live import LiveServer

JSON = "application/x-amz-json-1.0"


@pytest.fixture
def live() -> Iterator[LiveServer]:
    with Client("memory://") as client, LiveServer(client) as server:
        yield server


@pytest.fixture
def asgi_calls() -> Iterator[list[str]]:
    """The paths of the requests that went through the ASGI application."""
    calls: list[str] = []
    real = BodyLimit.__call__

    async def counted(self: BodyLimit, scope: Any, receive: Any, send: Any) -> None:
        calls.append(scope.get("path", ""))
        await real(self, scope, receive, send)

    with mock.patch.object(BodyLimit, "__call__", counted):
        yield calls


def request(
    action: str, params: dict[str, Any], *, path: str = "/", extra: str = "", version: str = "1.1"
) -> bytes:
    body = json.dumps(params).encode()
    return (
        f"POST {path} HTTP/{version}\r\nHost: 127.0.0.1\r\nContent-Type: {JSON}\r\n"
        f"X-Amz-Target: AmazonSQS.{action}\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


def chunked(raw: bytes) -> bytes:
    """A request of `request`'s with its body sent in one chunk instead of with a length."""
    head, body = raw.split(b"\r\n\r\n", 1)
    lines = [line for line in head.split(b"\r\n") if not line.startswith(b"Content-Length:")]
    lines.append(b"Transfer-Encoding: chunked")
    return b"\r\n".join(lines) + b"\r\n\r\n" + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


class Reader:
    """Responses read off a socket one by one."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.data = b""

    def response(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.data:
            chunk = self.sock.recv(65536)
            assert chunk, f"the connection closed with {self.data!r} unanswered"
            self.data += chunk
        head, self.data = self.data.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        status = int(lines[0].split()[1])
        if status < 200:  # informational: no body
            return status, headers, b""
        length = int(headers["content-length"])
        while len(self.data) < length:
            chunk = self.sock.recv(65536)
            assert chunk, "the connection closed mid-body"
            self.data += chunk
        body, self.data = self.data[:length], self.data[length:]
        return status, headers, body

    def closed(self) -> bool:
        return self.data == b"" and self.sock.recv(1) == b""


class Transport(asyncio.Transport):
    """A connection's server side that keeps what is written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.data = b""
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.data += bytes(data)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def connect(live: LiveServer) -> tuple[socket.socket, Reader]:
    sock = socket.create_connection(("127.0.0.1", live.port), timeout=15)
    return sock, Reader(sock)


def test_the_protocol_answers_sqs_requests_as_asgi_does(
    live: LiveServer, asgi_calls: list[str]
) -> None:
    created = {"QueueName": "jobs"}
    sock, reader = connect(live)
    with sock:
        sock.sendall(request("CreateQueue", created))
        status, headers, body = reader.response()
        assert status == 200 and json.loads(body)["QueueUrl"].endswith("/jobs")
        assert asgi_calls == []  # answered by the protocol
        fast = [
            request("ListQueues", {}),
            request("GetQueueUrl", {"QueueName": "nope"}),  # an error
            request("SendMessage", {"MessageBody": "hi"}, path="/000000000000/jobs"),
        ]
        # the same requests with chunked bodies (no length declared): through ASGI
        through_asgi = [chunked(r) for r in fast]
        answers = []
        for raw in fast + through_asgi:
            sock.sendall(raw)
            answers.append(reader.response())
    assert asgi_calls == ["/", "/", "/000000000000/jobs"]
    for (status, headers, body), (status2, headers2, body2) in zip(
        answers[:3], answers[3:], strict=True
    ):
        assert status == status2
        assert headers.keys() == headers2.keys()
        for name in ("content-type", "server", "x-amzn-query-error"):
            assert headers.get(name) == headers2.get(name)
        one, two = json.loads(body), json.loads(body2)
        if "MessageId" in one:  # a new message each time
            del one["MessageId"], two["MessageId"]
        assert one == two
    assert answers[1][0] == 400 and json.loads(answers[1][2])["__type"].endswith(
        "QueueDoesNotExist"
    )


def test_requests_that_need_uvicorn_take_the_asgi_path(
    live: LiveServer, asgi_calls: list[str]
) -> None:
    """A chunked body, `Expect: 100-continue` and proxy headers are uvicorn's to handle:
    such requests go through ASGI and are answered as the others are."""
    body = json.dumps({"QueueName": "viaasgi"}).encode()
    head = (
        f"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {JSON}\r\n"
        "X-Amz-Target: AmazonSQS.CreateQueue\r\n"
    ).encode()
    sock, reader = connect(live)
    with sock:
        sock.sendall(
            head + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        )
        status, _, answer = reader.response()
        assert status == 200 and json.loads(answer)["QueueUrl"].endswith("/viaasgi")
        sock.sendall(head + b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        status, _, _ = reader.response()
        assert status == 100  # uvicorn asks for the body
        sock.sendall(body)
        status, _, answer = reader.response()
        assert status == 200 and json.loads(answer)["QueueUrl"].endswith("/viaasgi")
    assert asgi_calls == ["/", "/"]


@pytest.mark.parametrize(("trusted", "scheme"), [((), "http"), (("127.0.0.1",), "https")])
def test_forwarding_headers_on_the_protocols_path(
    trusted: tuple[str, ...], scheme: str, asgi_calls: list[str]
) -> None:
    """X-Forwarded-Proto changes the queue URL only from a --trusted-proxy, on the path
    without ASGI as on the ASGI one."""
    extra = "X-Forwarded-Proto: https\r\nX-Forwarded-Host: queues.example.com\r\n"
    host = "queues.example.com" if trusted else "127.0.0.1"
    with (
        Client("memory://") as client,
        LiveServer(client, ServerConfig(trusted_proxies=trusted)) as live,
    ):
        sock, reader = connect(live)
        with sock:
            create = request("CreateQueue", {"QueueName": "q"}, extra=extra)
            for raw in (create, chunked(request("GetQueueUrl", {"QueueName": "q"}, extra=extra))):
                sock.sendall(raw)
                status, _, answer = reader.response()
                assert status == 200
                assert json.loads(answer)["QueueUrl"] == f"{scheme}://{host}/000000000000/q"
    assert asgi_calls == ["/"]  # the chunked one


def test_requests_pipelined_behind_a_long_poll_are_answered_in_order(
    live: LiveServer, asgi_calls: list[str]
) -> None:
    sqs = live.sqs()
    waiting = sqs.create_queue(QueueName="waiting")["QueueUrl"]
    other = sqs.create_queue(QueueName="other")["QueueUrl"]
    sock, reader = connect(live)
    with sock:
        sock.sendall(
            request("ReceiveMessage", {"QueueUrl": waiting, "WaitTimeSeconds": 10})
            + request("SendMessage", {"QueueUrl": other, "MessageBody": "second"})
            + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            + request("GetQueueAttributes", {"QueueUrl": other, "AttributeNames": ["All"]})
        )
        deadline = time.monotonic() + 10
        while not live.conveyor.aio.waits.counts().get("waiting"):
            assert time.monotonic() < deadline, "the long poll never began"
            time.sleep(0.01)
        # held behind the long poll: the send has not happened
        assert (
            sqs.get_queue_attributes(QueueUrl=other, AttributeNames=["All"])["Attributes"][
                "ApproximateNumberOfMessages"
            ]
            == "0"
        )
        sqs.send_message(QueueUrl=waiting, MessageBody="first")
        first, second, health, attributes = (reader.response() for _ in range(4))
    assert [m["Body"] for m in json.loads(first[2])["Messages"]] == ["first"]
    assert "MessageId" in json.loads(second[2])
    assert json.loads(health[2])["status"] == "ok"
    assert json.loads(attributes[2])["Attributes"]["ApproximateNumberOfMessages"] == "1"
    assert asgi_calls == ["/healthz"]


@pytest.mark.parametrize("durability", ["normal", "full"])
def test_requests_on_many_connections_at_once_are_all_answered(
    tmp_path: Path, durability: str
) -> None:
    """Requests that arrive together on many connections share one SQLite transaction (and
    its commit): each waits for that commit, and every one is answered."""
    url = f"sqlite:///{tmp_path}/many.db?durability={durability}"
    with Client(url) as client, LiveServer(client) as live:
        queue = live.sqs().create_queue(QueueName="many")["QueueUrl"]
        entries = [{"Id": str(i), "MessageBody": f"m{i}"} for i in range(10)]
        send = request("SendMessageBatch", {"QueueUrl": queue, "Entries": entries})
        connections = [connect(live) for _ in range(16)]
        try:
            for _ in range(10):
                for sock, _ in connections:
                    sock.sendall(send)
                for _, reader in connections:
                    status, _, body = reader.response()
                    assert status == 200, body
                    assert len(json.loads(body)["Successful"]) == 10
        finally:
            for sock, _ in connections:
                sock.close()
        assert client.queue("many").stats().ready == 1600


@pytest.mark.parametrize(
    ("version", "extra"),
    [("1.1", "Connection: close\r\n"), ("1.0", ""), ("1.0", "Connection: keep-alive\r\n")],
)
def test_connections_close_where_http_says_so(live: LiveServer, version: str, extra: str) -> None:
    """As uvicorn does, HTTP/1.0 connections are not kept alive."""
    sock, reader = connect(live)
    with sock:
        sock.sendall(request("ListQueues", {}, extra=extra, version=version))
        status, headers, _ = reader.response()
        assert status == 200
        assert headers["connection"] == "close"
        assert reader.closed()


def test_a_client_that_has_sent_all_it_will_still_gets_its_answers(live: LiveServer) -> None:
    """A client may shut its side of the connection once its request is out (HTTP/1.1
    half-close): the answer still comes, then the server closes."""
    sqs = live.sqs()
    url = sqs.create_queue(QueueName="halfclosed")["QueueUrl"]
    for raw in [request("ListQueues", {})] * 5 + [b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"]:
        sock, reader = connect(live)
        with sock:  # answered at once (the last one by the REST API, through ASGI)
            sock.sendall(raw)
            sock.shutdown(socket.SHUT_WR)
            assert reader.response()[0] == 200
            assert reader.closed()
    sock, reader = connect(live)
    with sock:  # a long poll answers at its next wake-up, claiming nothing for it
        sock.sendall(request("ReceiveMessage", {"QueueUrl": url, "WaitTimeSeconds": 10}))
        _until_waiting(live, "halfclosed", 1)
        sock.shutdown(socket.SHUT_WR)  # (a client that closed its socket looks the same)
        sqs.send_message(QueueUrl=url, MessageBody="late")
        status, _, body = reader.response()
        assert status == 200 and "Messages" not in json.loads(body)
        assert reader.closed()
    [late] = sqs.receive_message(QueueUrl=url, AttributeNames=["All"])["Messages"]
    assert late["Body"] == "late" and late["Attributes"]["ApproximateReceiveCount"] == "1"


def _until_waiting(live: LiveServer, queue: str, n: int) -> None:
    deadline = time.monotonic() + 10
    while live.conveyor.aio.waits.counts().get(queue, 0) != n:
        assert time.monotonic() < deadline, f"{n} long poll(s) of {queue} never began"
        time.sleep(0.01)


def test_a_long_poll_whose_client_went_away_takes_no_message(live: LiveServer) -> None:
    """A consumer killed during a long poll: its wait, first in line, is woken (by the
    queue's ticker, or by a send) and goes, claiming nothing and passing the wake-up on,
    rather than claim the next message for nobody (where it would stay invisible for its
    visibility timeout, its receive counted)."""
    sqs = live.sqs()
    url = sqs.create_queue(QueueName="ghost")["QueueUrl"]
    sock, _ = connect(live)
    sock.sendall(request("ReceiveMessage", {"QueueUrl": url, "WaitTimeSeconds": 20}))
    _until_waiting(live, "ghost", 1)
    sock.close()
    assert _received_behind_a_ghost(live, url, "ghost") == [("for the living", "1")]


def test_a_rest_long_poll_whose_client_went_away_takes_no_message(live: LiveServer) -> None:
    """The same for the REST API's receive (through ASGI)."""
    sqs = live.sqs()
    url = sqs.create_queue(QueueName="ghostrest")["QueueUrl"]
    body = json.dumps({"max_messages": 1, "wait": 20}).encode()
    sock, _ = connect(live)
    sock.sendall(
        b"POST /queues/ghostrest/receive HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    _until_waiting(live, "ghostrest", 1)
    sock.close()
    assert _received_behind_a_ghost(live, url, "ghostrest") == [("for the living", "1")]


def _received_behind_a_ghost(live: LiveServer, url: str, queue: str) -> list[tuple[str, str]]:
    """What a receiver gets of the next send, its body and receive count, once a gone
    client's long poll has left its wait: the queue's ticker wakes the longest waiter every
    poll interval, and the gone one then goes without a claim (a long poll that did not see
    its client go would wait out its 20 seconds)."""
    _until_waiting(live, queue, 0)
    got: list[Any] = []
    other = threading.Thread(
        target=lambda: got.extend(
            live.sqs()
            .receive_message(QueueUrl=url, WaitTimeSeconds=10, AttributeNames=["All"])
            .get("Messages", [])
        )
    )
    other.start()
    _until_waiting(live, queue, 1)
    live.sqs().send_message(QueueUrl=url, MessageBody="for the living")
    other.join(15)
    return [(m["Body"], m["Attributes"]["ApproximateReceiveCount"]) for m in got]


def test_a_kept_alive_connection_serves_request_after_request(live: LiveServer) -> None:
    sock, reader = connect(live)
    with sock:
        for _ in range(3):
            sock.sendall(request("ListQueues", {}))
            status, headers, _ = reader.response()
            assert status == 200 and "connection" not in headers


def test_the_access_log_has_a_line_for_each_request(
    live: LiveServer, asgi_calls: list[str]
) -> None:
    lines: list[str] = []

    class Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    access = logging.getLogger("uvicorn.access")
    handler = Lines()
    level = access.level
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    try:
        sqs = live.sqs()
        sqs.create_queue(QueueName="logged")
        with pytest.raises(sqs.exceptions.QueueDoesNotExist):
            sqs.get_queue_url(QueueName="missing")
    finally:
        access.removeHandler(handler)
        access.setLevel(level)
    assert [line.split(" - ", 1)[1] for line in lines] == [
        '"POST / HTTP/1.1" 200',
        '"POST / HTTP/1.1" 400',
    ]
    assert lines[0].startswith("127.0.0.1:")
    assert asgi_calls == []


def test_requests_stepped_in_one_turn_may_wait_for_one_future() -> None:
    """The protocol steps a request's coroutine before any task runs it: two requests that
    arrive in one turn of the loop and both wait for one future (a commit they share) are
    both answered once it is resolved."""
    import asyncio

    import uvicorn
    from uvicorn.server import ServerState

    from conveyor.server import ConveyorServer
    from conveyor.server.front.endpoint import Incoming, Reply
    from conveyor.server.front.protocol import guarded

    with Client("memory://") as client:
        server = ConveyorServer(client)

        async def scenario() -> None:
            shared: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            async def answer(request: Incoming, started: float, refusal: Any = None) -> Reply:
                try:
                    await shared
                except RuntimeError as exc:  # what a second awaiter met without the care
                    return 500, b"text/plain", str(exc).encode(), []
                return 200, b"text/plain", b"done", []

            server.app.endpoint.answer = answer  # type: ignore[method-assign]
            config = uvicorn.Config(server.app, lifespan="off", http=guarded(30))
            config.load()
            protocol = config.http_protocol_class
            state = ServerState()
            transports = [Transport(), Transport()]
            for transport in transports:
                p = protocol(config=config, server_state=state, app_state={})  # type: ignore[call-arg]
                p.connection_made(transport)
                p.data_received(request("ListQueues", {}))  # stepped: waits for `shared`
            shared.set_result(None)
            for _ in range(10):
                await asyncio.sleep(0)
            for transport in transports:
                assert transport.data.startswith(b"HTTP/1.1 200 "), transport.data
                assert transport.data.endswith(b"done")

        asyncio.run(scenario())


def test_a_wait_for_the_disk_is_resumed_without_a_task(tmp_path: Path) -> None:
    """At durability=full a write is answered once the log is fsynced: the protocol resumes
    the request from the disk wait's callback (no task); a request that waits again after
    it gets a task then, and one that fails after it has its connection closed."""
    import uvicorn
    from uvicorn.server import ServerState

    from conveyor.commits import CommitWait
    from conveyor.server import ConveyorServer
    from conveyor.server.front.endpoint import Incoming, Reply
    from conveyor.server.front.protocol import guarded

    transports: list[Transport] = []
    with Client(f"sqlite:///{tmp_path}/full.db?durability=full") as client:
        server = ConveyorServer(client)
        queue = client.create_queue("q")
        real = server.app.endpoint.answer

        async def scenario() -> None:
            loop = asyncio.get_running_loop()
            config = uvicorn.Config(server.app, lifespan="off", http=guarded(30))
            config.load()
            state = ServerState()

            def arrive(data: bytes) -> Transport:
                transport = Transport()
                p = config.http_protocol_class(config=config, server_state=state, app_state={})  # type: ignore[call-arg]
                p.connection_made(transport)
                p.data_received(data)
                transports.append(transport)
                return transport

            entries = [{"Id": str(i), "MessageBody": f"m{i}"} for i in range(10)]
            url = f"http://127.0.0.1/000000000000/{queue.name}"
            sent = arrive(request("SendMessageBatch", {"QueueUrl": url, "Entries": entries}))
            assert sent.data == b"" and not state.tasks  # waits for the fsync, without a task
            await until_answered(sent)
            assert sent.data.startswith(b"HTTP/1.1 200 "), sent.data
            assert len(json.loads(sent.data.split(b"\r\n\r\n", 1)[1])["Successful"]) == 10

            disk: list[CommitWait] = []

            async def waits_twice(request: Incoming, started: float, refusal: Any = None) -> Reply:
                disk.append(CommitWait(loop=loop))
                await disk[-1]
                await asyncio.sleep(0)  # a second wait: a task's
                return 200, b"text/plain", b"twice", []

            async def fails_after(request: Incoming, started: float, refusal: Any = None) -> Reply:
                disk.append(CommitWait(loop=loop))
                await disk[-1]
                raise RuntimeError("broken after the disk")

            for answer, expected in ((waits_twice, 1), (fails_after, 0)):
                server.app.endpoint.answer = answer  # type: ignore[method-assign]
                transport = arrive(request("ListQueues", {}))
                assert not state.tasks
                disk[-1].set_result(None)
                await asyncio.sleep(0)
                assert len(state.tasks) == expected
                await until_answered(transport)
            server.app.endpoint.answer = real  # type: ignore[method-assign]

        asyncio.run(scenario())
        assert queue.stats().ready == 10
    assert transports[1].data.endswith(b"twice") and not transports[1].closed
    assert transports[2].data == b"" and transports[2].closed


def test_a_write_is_answered_in_the_turn_of_the_loop_that_commits_it(tmp_path: Path) -> None:
    """On SQLite a send, receive or delete made on the loop is committed at the loop's
    next turn: the request is stepped on and its reply written in that turn (the commit's
    `CommitWait.settled`, then one write), not one and two turns later."""
    import uvicorn
    from uvicorn.server import ServerState

    from conveyor.server import ConveyorServer
    from conveyor.server.front.protocol import guarded

    with Client(f"sqlite:///{tmp_path}/normal.db?durability=normal") as client:
        server = ConveyorServer(client)
        queue = client.create_queue("q")
        url = f"http://127.0.0.1/000000000000/{queue.name}"

        async def scenario() -> None:
            config = uvicorn.Config(server.app, lifespan="off", http=guarded(30))
            config.load()
            state = ServerState()

            async def answered_after_one_turn(action: str, params: dict[str, Any]) -> Any:
                transport = Transport()
                p = config.http_protocol_class(config=config, server_state=state, app_state={})  # type: ignore[call-arg]
                p.connection_made(transport)
                p.data_received(request(action, params))
                assert transport.data == b"" and not state.tasks  # it waits for the commit
                await asyncio.sleep(0)  # one turn of the loop
                assert transport.data.startswith(b"HTTP/1.1 200 "), (action, transport.data)
                return json.loads(transport.data.split(b"\r\n\r\n", 1)[1])

            entries = [{"Id": str(i), "MessageBody": f"m{i}"} for i in range(10)]
            sent = await answered_after_one_turn(
                "SendMessageBatch", {"QueueUrl": url, "Entries": entries}
            )
            assert len(sent["Successful"]) == 10
            got = await answered_after_one_turn(
                "ReceiveMessage", {"QueueUrl": url, "MaxNumberOfMessages": 10}
            )
            receipts = [m["ReceiptHandle"] for m in got["Messages"]]
            assert len(receipts) == 10
            deleted = await answered_after_one_turn(
                "DeleteMessageBatch",
                {
                    "QueueUrl": url,
                    "Entries": [{"Id": str(i), "ReceiptHandle": r} for i, r in enumerate(receipts)],
                },
            )
            assert len(deleted["Successful"]) == 10

        asyncio.run(scenario())
        assert queue.stats().ready == 0 and queue.stats().in_flight == 0


def test_replies_made_as_requests_arrive_go_out_at_the_loops_next_turn() -> None:
    """A request answered as it arrives (nothing to wait for: the memory store) has its
    reply held to the loop's next turn, with the replies to the other requests read in
    this one: the loop reads what has arrived before it writes (written at once, each reply
    lets its client send again at once, and the loop turns once a request)."""
    import uvicorn
    from uvicorn.server import ServerState

    from conveyor.server import ConveyorServer
    from conveyor.server.front.protocol import guarded

    with Client("memory://") as client:
        server = ConveyorServer(client)
        client.create_queue("q")

        async def scenario() -> None:
            config = uvicorn.Config(server.app, lifespan="off", http=guarded(30))
            config.load()
            state = ServerState()
            transports = [Transport() for _ in range(3)]
            for transport in transports:
                p = config.http_protocol_class(config=config, server_state=state, app_state={})  # type: ignore[call-arg]
                p.connection_made(transport)
                p.data_received(request("ListQueues", {}))
            assert [t.data for t in transports] == [b""] * 3  # answered, not yet written
            await asyncio.sleep(0)
            assert all(t.data.startswith(b"HTTP/1.1 200 ") for t in transports)

        asyncio.run(scenario())


def test_a_connection_keeps_one_timer_however_many_requests_it_serves() -> None:
    """The request deadline and the keep-alive's end share one timer a connection, moved
    lazily (a later deadline leaves it where it is): fifty requests on one connection make
    two timers, not two a request (one for the deadline, one for the keep-alive)."""
    import uvicorn
    from uvicorn.server import ServerState

    from conveyor.server import ConveyorServer
    from conveyor.server.front.protocol import guarded

    with Client("memory://") as client:
        server = ConveyorServer(client)
        client.create_queue("q")

        async def scenario() -> None:
            loop = asyncio.get_running_loop()
            config = uvicorn.Config(server.app, lifespan="off", http=guarded(30))
            config.load()
            transport = Transport()
            p = config.http_protocol_class(config=config, server_state=ServerState(), app_state={})  # type: ignore[call-arg]
            with (
                mock.patch.object(loop, "call_at", wraps=loop.call_at) as call_at,
                mock.patch.object(loop, "call_later", wraps=loop.call_later) as call_later,
            ):
                p.connection_made(transport)
                for n in range(1, 51):
                    p.data_received(request("ListQueues", {}))
                    await asyncio.sleep(0)
                    assert transport.data.count(b"HTTP/1.1 200 ") == n
                timers = call_at.call_count + call_later.call_count
            assert timers == 2, timers
            assert not transport.closed

        asyncio.run(scenario())


def test_a_commit_wait_calls_back_as_it_is_settled() -> None:
    """`CommitWait.settled`: called as the future is resolved (result or error), or at once
    where it already is; one callback that fails is reported as a loop reports a failed
    callback and the others still run."""
    from conveyor.commits import CommitWait

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        reported: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _, context: reported.append(context))
        calls: list[str] = []

        def broken(fut: CommitWait) -> None:
            raise RuntimeError("broken callback")

        ok = CommitWait(loop=loop)
        ok.settled(lambda f: calls.append(f"first {f.result()}"))
        ok.settled(broken)
        ok.settled(lambda f: calls.append("third"))
        assert calls == []
        ok.set_result(None)
        assert calls == ["first None", "third"]  # before any other turn of the loop
        assert [str(c["exception"]) for c in reported] == ["broken callback"]
        ok.settled(lambda f: calls.append("late"))
        assert calls[-1] == "late"

        failed = CommitWait(loop=loop)
        failed.settled(lambda f: calls.append(f"error {f.exception()}"))
        failed.set_exception(OSError("disk gone"))
        assert calls[-1] == "error disk gone"
        with pytest.raises(OSError):
            await failed

    asyncio.run(scenario())


async def until_answered(transport: Transport) -> None:
    for _ in range(2000):
        if transport.data or transport.closed:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("no answer within 10 s")


def test_a_request_whose_handler_fails_closes_its_connection_alone(
    live: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The endpoint answers its own errors; should it fail all the same (a bug), before or
    after a wait, the connection is closed rather than left without an answer, it is
    logged, and the server goes on."""
    import asyncio

    from conveyor.server.front.endpoint import Incoming, Reply

    endpoint = live.conveyor.app.endpoint
    real = endpoint.answer

    async def at_once(request: Incoming, started: float, refusal: Any = None) -> Reply:
        raise RuntimeError("broken at once")

    async def later(request: Incoming, started: float, refusal: Any = None) -> Reply:
        await asyncio.sleep(0.01)
        raise RuntimeError("broken after a wait")

    try:
        for broken in (at_once, later):
            endpoint.answer = broken  # type: ignore[method-assign]
            sock, reader = connect(live)
            with sock, caplog.at_level(logging.ERROR, logger="conveyor.server"):
                sock.sendall(request("ListQueues", {}))
                assert reader.closed()
    finally:
        endpoint.answer = real  # type: ignore[method-assign]
    assert "broken at once" in caplog.text and "broken after a wait" in caplog.text
    sock, reader = connect(live)
    with sock:
        sock.sendall(request("ListQueues", {}))
        assert reader.response()[0] == 200
