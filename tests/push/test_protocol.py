"""The push gateway over real sockets: SKMQ's frames byte for byte, and its delivery mode
where the gateway dials the consumer."""

from __future__ import annotations

import json
import socket

from conveyor.push import (
    PushConsumer,
    PushProducer,
)
from conveyor.push.codec import Frame, encode

from ..support.push import Peer, Start, register
from ..support.waiting import until

# -- the protocol, byte for byte --------------------------------------------------------


def test_the_seeds_frames_over_a_socket(start: Start) -> None:
    gw = start()
    consumer = Peer(gw.port)
    register_frame = (
        b"type=register\r\ncontent="
        b'{"id":"r1","app_id":"billing","host":"","port":"","weight":0}\r\n\r\n'
    )
    consumer.send(register_frame)
    assert consumer.raw == b"" and consumer.resp() == {
        "status": "ack",
        "content": "Recipient register successful.",
    }
    assert consumer.raw.startswith(b"type=resp\r\ncontent={")
    producer = Peer(gw.port)
    producer.send(b"type=queue\r\nappid=billing\r\nmsgid=inv-1\r\ncontent=hello\r\n\r\n")
    assert producer.resp() == {"status": "ack", "content": "Message enqueue successful"}
    push = consumer.next()
    assert encode(push) == b"type=push\r\nappid=billing\r\nmsgid=inv-1\r\ncontent=hello\r\n\r\n"
    consumer.send(b"msgid=inv-1\r\ntype=arrived\r\n\r\n")
    assert consumer.resp()["status"] == "ack"
    consumer.send(b"msgid=inv-1\r\ntype=ack\r\n\r\n")
    assert consumer.resp()["status"] == "ack"
    until(lambda: gw.client.queue("billing").stats().deleted == 1, what="the ack's delete")
    # ping is answered with a bare pong, not a resp frame
    producer.raw = b""
    producer.send(b"ping\r\n\r\n")
    assert producer.next().type == "pong" and producer.raw == b"pong\r\n\r\n"
    # an answer for a message nobody holds is an error, and the connection goes on
    consumer.send(b"msgid=inv-1\r\ntype=ack\r\n\r\n")
    assert consumer.resp()["status"] == "error"
    producer.send(Frame(type="queue", appid="billing", content=b"two"))
    assert producer.resp()["status"] == "ack"
    assert consumer.next().content == b"two"


def test_reject_and_error_answers(start: Start) -> None:
    gw = start(retry_times=5)
    consumer = Peer(gw.port)
    register(consumer, "jobs", "c1")
    producer = gw.producer()
    producer.send("jobs", b"retry me", msgid="m-1")
    first = consumer.next()
    consumer.send(Frame(type="reject", msgid=first.msgid))
    # the reply and the message's retry (at once: SKMQ waited minutes), in either order
    two = sorted([consumer.next(), consumer.next()], key=lambda f: f.type)
    assert [f.type for f in two] == ["push", "resp"]
    again, reply = two
    assert json.loads(reply.content)["status"] == "ack"
    assert again.msgid == "m-1" and again.content == b"retry me"
    consumer.send(Frame(type="error", msgid="m-1"))
    assert consumer.resp()["status"] == "ack"
    dead = gw.client.queue("jobs-dlq").peek(10)
    assert [(m.id, m.body) for m in dead] == [("m-1", b"retry me")]
    assert gw.client.queue("jobs").stats().ready == 0


def test_content_with_crlf_and_binary_travels_whole(start: Start) -> None:
    gw = start()
    got: list[bytes] = []
    with PushConsumer(gw.url, "blobs", lambda m: got.append(m.content)):
        body = b"line 1\r\n\r\nline 2\x00\xff"
        with PushProducer(gw.url) as producer:
            producer.send("blobs", body)
        until(lambda: got == [body], what="delivery")


# -- SKMQ's delivery mode: the gateway dials the consumer ---------------------------------


def test_a_consumer_listening_on_its_own_port(start: Start) -> None:
    gw = start()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    admin = Peer(gw.port)
    info = {"id": "r9", "app_id": "dial", "host": "127.0.0.1", "port": str(port), "weight": 1}
    admin.send(Frame(type="register", content=json.dumps(info).encode()))
    assert admin.resp()["status"] == "ack"
    admin.close()
    producer = gw.producer()
    producer.send("dial", b"first", msgid="d-1")
    listener.settimeout(10)
    conn, _ = listener.accept()
    pushed = Peer(0, conn)
    frame = pushed.next()
    assert (frame.type, frame.msgid, frame.content) == ("push", "d-1", b"first")
    pushed.send(Frame(type="ack", msgid="d-1"))
    assert pushed.resp()["status"] == "ack"
    assert pushed.closed(), "the gateway closes a dialled connection after its reply"
    until(lambda: gw.client.queue("dial").stats().deleted == 1, what="delete")
    # SKMQ's process 1: arrived, then the ack on the same connection, which the gateway
    # keeps open for it ("MQ will wait for a while")
    producer.send("dial", b"second", msgid="d-2")
    conn, _ = listener.accept()
    pushed = Peer(0, conn)
    assert pushed.next().msgid == "d-2"
    pushed.send(b"msgid=d-2\r\ntype=arrived\r\n\r\n")
    assert pushed.resp()["status"] == "ack"
    assert not pushed.closed(timeout=0.5), "the gateway waits for the ack"
    pushed.send(b"msgid=d-2\r\ntype=ack\r\n\r\n")
    assert pushed.resp()["status"] == "ack" and pushed.closed()
    until(lambda: gw.client.queue("dial").stats().deleted == 2, what="the ack on the connection")
    # process 2: arrived, the consumer goes, and acks later on a connection of its own
    producer.send("dial", b"third", msgid="d-3")
    conn, _ = listener.accept()
    pushed = Peer(0, conn)
    assert pushed.next().msgid == "d-3"
    pushed.send(Frame(type="arrived", msgid="d-3"))
    assert pushed.resp()["status"] == "ack"
    pushed.close()
    assert gw.client.queue("dial").stats().in_flight == 1
    later = Peer(gw.port)
    later.send(b"msgid=d-3\r\ntype=ack\r\n\r\n")
    assert later.resp()["status"] == "ack"
    until(lambda: gw.client.queue("dial").stats().deleted == 3, what="the late ack")
    listener.close()


def test_a_dialled_consumer_that_only_says_arrived_gets_it_again(start: Start) -> None:
    """No ack on the connection nor later: the gateway closes at the end of the ack window,
    and the message is pushed again (after `ack_timeout`)."""
    gw = start(ack_timeout=1.0, retry_times=5)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    admin = Peer(gw.port)
    info = {"id": "lazy", "app_id": "late", "host": "127.0.0.1", "port": port, "weight": 1}
    admin.send(Frame(type="register", content=json.dumps(info).encode()))
    assert admin.resp()["status"] == "ack"
    with PushProducer(gw.url) as producer:
        producer.send("late", b"again", msgid="a-1")
    listener.settimeout(10)
    first = Peer(0, listener.accept()[0])
    assert first.next().msgid == "a-1"
    first.send(Frame(type="arrived", msgid="a-1"))
    assert first.resp()["status"] == "ack"
    assert first.closed(timeout=5), "closed at the end of the ack window"
    second = Peer(0, listener.accept()[0])
    again = second.next()
    assert (again.msgid, again.content) == ("a-1", b"again")
    second.send(Frame(type="ack", msgid="a-1"))
    assert second.resp()["status"] == "ack"
    until(lambda: gw.client.queue("late").stats().deleted == 1, what="the ack")
    listener.close()


def test_a_dialled_consumer_that_is_gone_is_dropped(start: Start) -> None:
    gw = start()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nobody listens there
    admin = Peer(gw.port)
    info = {"id": "gone", "app_id": "away", "host": "127.0.0.1", "port": port, "weight": 0}
    admin.send(Frame(type="register", content=json.dumps(info).encode()))
    assert admin.resp()["status"] == "ack"
    with PushProducer(gw.url) as producer:
        producer.send("away", b"kept")
    until(lambda: not gw.gateway.apps["away"].peers, what="the drop")
    # the drop releases the message it claimed for that consumer right after removing it
    queue = gw.client.queue("away")
    until(lambda: queue.stats().ready == 1, what="the message back for the next consumer")
    assert queue.stats().in_flight == 0
