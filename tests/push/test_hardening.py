"""The push gateway against hostile and careless peers: HTTP on its port, malformed and
fuzzed frames, timeouts, a thousand connections, authentication, its configuration."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conveyor import Client
from conveyor.exceptions import InvalidInput
from conveyor.push import (
    GatewayConfig,
    PushConsumer,
    PushProducer,
    PushRefused,
)
from conveyor.push.codec import Frame
from conveyor.push.config import check_gateway_exposure

from ..support.push import Peer, Running, Start, register
from ..support.waiting import until


def test_an_http_request_closes_the_connection_before_its_body_is_read(start: Start) -> None:
    """A browser can be made to post a form to the gateway's port for another site's page;
    its body can hold frames. The request's first line closes the connection: nothing in
    the body is sent, and the gateway serves on."""
    gw = start()
    body = b"type=queue\r\nappid=victim\r\nmsgid=m1\r\ncontent=from a page\r\n\r\n"
    request = (
        b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    ) + body
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        sock.sendall(request)
        assert sock.recv(65536) == b""  # closed, with no reply
    p = Peer(gw.port)
    p.send(Frame(type="queue", appid="other", content=b"fine"))
    assert p.resp() == {"status": "ack", "content": "Message enqueue successful"}
    assert "victim" not in gw.client.list_queues()


def test_malformed_frames_get_an_error_and_the_connection_goes_on(start: Start) -> None:
    gw = start(max_frame=4096)
    p = Peer(gw.port)
    p.send(b"this is not a frame\r\n\r\n")
    assert p.resp()["status"] == "error"
    p.send(b"appid=x\r\ncontent=no type\r\n\r\n")
    assert "type" in p.resp()["content"]
    p.send(b"type=queue\r\nappid=x\r\ncontent=" + b"a" * 5000 + b"\r\n\r\n")
    assert "over" in p.resp()["content"]
    p.send(b"type=bogus\r\nappid=x\r\n\r\n")
    assert "unknown type" in p.resp()["content"]
    p.send(b"type=queue\r\nappid=bad name!\r\nmsgid=m-7\r\ncontent=x\r\n\r\n")
    reply = p.next()  # the refusal says which message it answers
    answer = json.loads(reply.content)
    assert answer["status"] == "reject" and "appid" in answer["content"]
    assert reply.msgid == "m-7"
    p.send(b"type=topic\r\nmsgid=m-8\r\ncontent=x\r\n\r\n")
    assert p.next().msgid == "m-8"
    p.send(b"type=register\r\ncontent={not json\r\n\r\n")
    assert p.resp()["content"].startswith("Invalid parameters")
    p.send(b"type=register\r\ncontent=" + b"[" * 2000 + b"]" * 2000 + b"\r\n\r\n")
    assert p.resp()["content"].startswith("Invalid parameters")  # nested past the parser
    # an id with a lone LF could not be written back in the reply: refused, not dropped
    p.send(b"type=queue\r\nappid=x\r\nmsgid=0\n\nping\r\ncontent=x\r\n\r\n")
    assert "CR or LF" in p.resp()["content"]
    p.send(Frame(type="queue", appid="x", content=b"fine"))
    assert p.resp() == {"status": "ack", "content": "Message enqueue successful"}


@settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(junk=st.lists(st.binary(max_size=300), min_size=1, max_size=5))
def test_fuzzed_input_never_stops_the_gateway(shared_gateway: Running, junk: list[bytes]) -> None:
    p = Peer(shared_gateway.port)
    try:
        for chunk in junk:
            p.send(chunk)
        p.send(b"\r\n\r\nping\r\n\r\n")  # whatever came before, this frame is answered
        while True:
            frame = p.next()
            if frame.type == "pong":
                break
            assert frame.type in ("resp", "push", "ping"), frame
    finally:
        p.close()
    q = Peer(shared_gateway.port)
    q.send(b"ping\r\n\r\n")
    assert q.next().type == "pong"
    q.close()


def test_timeouts_close_idle_and_stalled_connections(start: Start) -> None:
    gw = start(idle_timeout=0.3, read_timeout=0.3)
    idle = Peer(gw.port)
    stalled = Peer(gw.port)
    stalled.send(b"type=queue\r\nappid=a\r\n")  # a frame begun, never finished
    assert idle.closed(timeout=10) and stalled.closed(timeout=10)


def test_a_frame_begun_has_the_read_timeout_and_a_talking_peer_no_idle_timeout(
    start: Start,
) -> None:
    """A connection's deadline moves with what it reads: a frame left unfinished closes it
    after `read_timeout`, well before `idle_timeout`; a peer that sends a frame now and then
    stays open long past `idle_timeout`; one that goes silent is closed after it."""
    gw = start(idle_timeout=1.0, read_timeout=0.2)
    idle, stalled, talker = Peer(gw.port), Peer(gw.port), Peer(gw.port)
    stalled.send(b"type=queue\r\nappid=a\r\n")
    assert stalled.closed(timeout=0.7)  # the read timeout, not the idle one
    assert not idle.closed(timeout=0.05)
    for _ in range(6):  # 1.8 s of a ping each 0.3 s: past the idle timeout
        talker.send(b"ping\r\n\r\n")
        assert talker.next().type == "pong"
        time.sleep(0.3)
    assert idle.closed(timeout=5)
    talker.send(b"ping\r\n\r\n")
    assert talker.next().type == "pong"
    assert talker.closed(timeout=5)  # silent now: closed after the idle timeout


def test_a_thousand_connections_at_once(start: Start) -> None:
    gw = start()
    peers = [Peer(gw.port) for _ in range(1000)]
    for p in peers:
        p.send(b"ping\r\n\r\n")
    for p in peers:
        assert p.next().type == "pong"
    for p in peers:
        p.close()


def test_authentication(start: Start) -> None:
    with pytest.raises(InvalidInput, match="--auth-token"):
        check_gateway_exposure(GatewayConfig(host="0.0.0.0"), insecure=False)
    check_gateway_exposure(GatewayConfig(host="0.0.0.0", auth_token="t"), insecure=False)
    check_gateway_exposure(GatewayConfig(host="127.0.0.1"), insecure=False)
    gw = start(auth_token="s3cret")
    anonymous = Peer(gw.port)
    anonymous.send(Frame(type="queue", appid="a", content=b"x"))
    assert anonymous.resp()["status"] == "error" and anonymous.closed()
    wrong = Peer(gw.port)
    wrong.send(Frame(type="auth", content=b"guess"))
    assert wrong.resp()["content"] == "wrong token" and wrong.closed()
    with pytest.raises(PushRefused), PushProducer(gw.url, token="guess") as producer:
        producer.send("a", b"x")
    with PushProducer(gw.url, token="s3cret") as producer:
        assert producer.send("a", b"x") == "Message enqueue successful"
    consumer = Peer(gw.port)
    assert register(consumer, "a", "c", token="s3cret")["status"] == "ack"
    assert consumer.next().content == b"x"
    got: list[bytes] = []
    with PushConsumer(f"{gw.url}?token=s3cret", "b", lambda m: got.append(m.content)):
        with PushProducer(gw.url, token="s3cret") as producer:
            producer.send("b", b"y")
        until(lambda: got == [b"y"], what="delivery with a token")


def test_connections_that_never_authenticate_do_not_keep_a_producer_out(start: Start) -> None:
    """With a token, a connection has `auth_timeout` to authenticate and then is closed, and
    at most a tenth of `max_connections` wait at once (a new one closes the one waiting
    longest): silent connections cannot keep out a producer with the token."""
    gw = start(auth_token="s3cret", max_connections=20, auth_timeout=1.0)
    silent = []
    for _ in range(4):  # the share of 20 is two; each is in until others come
        p = Peer(gw.port)
        p.send(b"ping\r\n\r\n")  # answered before authenticating
        assert p.next().type == "pong"
        silent.append(p)
    for p in silent[:2]:
        assert p.resp()["content"] == "closed to make room: authenticate sooner"
        assert p.closed()
    for _ in range(3):  # each producer's connection makes room, then authenticates
        with PushProducer(gw.url, token="s3cret") as producer:
            sent = producer.send("a", b"x")
        assert sent == "Message enqueue successful"
    for p in silent[2:]:  # made room for the producers, or timed out
        assert p.resp()["content"].startswith(("closed to make room", "authenticate within"))
        assert p.closed()
    late = Peer(gw.port)  # waits its whole second, then is told and closed
    assert late.resp()["content"].startswith("authenticate within 1 s") and late.closed()
    with pytest.raises(InvalidInput, match="auth_timeout"):
        GatewayConfig(auth_timeout=0)


def test_config_reads_skmqs_conf_json(tmp_path: Path) -> None:
    conf = tmp_path / "conf.json"
    conf.write_text(
        json.dumps(
            {
                "retry_times": 3,
                "ack_timeout": 30000,
                "rate": 200,
                "listener_host": "127.0.0.1",
                "listener_port": "2734",
                "log_level": "info",
                "flow_backlog": 500,
                "flow_wait": 250,
            }
        )
    )
    config = GatewayConfig.from_json(conf)
    assert (config.retry_times, config.ack_timeout, config.rate, config.port) == (3, 30, 200, 2734)
    assert (config.flow_backlog, config.flow_wait) == (500, 0.25)
    assert GatewayConfig.from_json(conf, port=0).port == 0
    conf.write_text('{"retry_time": 3}')
    with pytest.raises(InvalidInput, match="unknown setting 'retry_time'"):
        GatewayConfig.from_json(conf)
    conf.write_text('{"ack_timeout": -5}')
    with pytest.raises(InvalidInput, match="ack_timeout"):
        GatewayConfig.from_json(conf)
    conf.write_text('{"flow_backlog": -1}')
    with pytest.raises(InvalidInput, match="flow_backlog=-1"):
        GatewayConfig.from_json(conf)


@pytest.fixture(scope="module")
def shared_gateway() -> Iterator[Running]:
    client = Client("memory://")
    r = Running(client, GatewayConfig(port=0, max_frame=2048, read_timeout=5))
    yield r
    r.close()
    client.close()
