"""The REST API: the predecessor's routes, receipts, admin, topics, OpenAPI, errors."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ..support import waiting
from ..support.live import LiveServer


def test_legacy_queue_routes(server: LiveServer, name: str) -> None:
    with httpx.Client(base_url=server.url) as http:
        r = http.put(f"/queues/{name}")
        assert (r.status_code, r.json()) == (201, "created")
        r = http.put(f"/queues/{name}")
        assert r.status_code == 422 and r.json()["error"] == "Queue already exists."
        assert name in http.get("/queues").json()["queues"]
        r = http.patch(
            f"/queues/{name}", json={"visibility_timeout": 12, "compressed_messages": True}
        )
        assert r.status_code == 200
        doc = http.get(f"/queues/{name}").json()
        assert doc["VisibilityTimeout"] == 12 and doc["CompressedMessages"] is True
        ids = [
            http.put(f"/queues/{name}/message", content=f"m{i}".encode()).json() for i in range(3)
        ]
        assert all(ids)
        got = http.get(f"/queues/{name}/messages/2").json()
        assert [m["body"] for m in got] == ["m0", "m1"] and all(m["receipt"] for m in got)
        assert http.delete(f"/queues/{name}/message/{ids[0]}").json() is True
        assert http.delete(f"/queues/{name}/message/{ids[0]}").json() is False
        assert http.delete(f"/queues/{name}/messages/{ids[1]},{ids[2]}").json() == {"deleted": 2}
        assert http.get(f"/queues/{name}/stats").json()["ready"] == 0
        assert http.delete(f"/queues/{name}").json() == {"Deleted": True}
        r = http.delete(f"/queues/{name}")
        assert r.status_code == 404 and r.json()["error"] == "Queue did not exist."


def test_receipt_routes_and_admin(server: LiveServer, name: str) -> None:
    with httpx.Client(base_url=server.url) as http:
        http.put(f"/queues/{name}", json={"visibility_timeout": 30})
        sent = http.post(f"/queues/{name}/messages", json={"body": "hello", "priority": 5}).json()
        peeked = http.get(f"/queues/{name}/peek", params={"state": "ready"}).json()
        assert [m["id"] for m in peeked] == [sent["id"]]
        got = http.post(f"/queues/{name}/receive", json={"max_messages": 5, "wait": 1}).json()
        (m,) = got["messages"]
        assert m["body"] == "hello" and m["priority"] == 5 and m["receive_count"] == 1
        r = http.post(f"/queues/{name}/visibility", json={"receipt": m["receipt"], "timeout": 0})
        assert r.json() == {"ok": True}
        again = http.post(f"/queues/{name}/receive", json={}).json()["messages"][0]
        assert http.get(f"/queues/{name}/message/{sent['id']}").json()["receive_count"] == 2
        reset = http.post(f"/queues/{name}/message/{sent['id']}/reset").json()
        assert reset["receive_count"] == 0  # and visible now: the old receipt is void
        again = http.post(f"/queues/{name}/receive", json={}).json()["messages"][0]
        r = http.post(f"/queues/{name}/delete", json={"receipts": [again["receipt"], "forged"]})
        body = r.json()
        assert (
            body["failed"][0]["index"] == 1
            and body["failed"][0]["code"] == "ReceiptHandleIsInvalid"
        )
        r = http.post(f"/queues/{name}/receive", json={"max_messages": 50})
        assert r.status_code == 400 and "max_messages" in r.json()["error"]
        r = http.post(
            f"/queues/{name}/receive",
            content=b"{oops",
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 400 and r.json()["code"] == "InvalidParameterValue"
        r = http.get("/queues/bad name!/stats")
        assert r.status_code == 400 and "invalid queue name" in r.json()["error"]


def test_topics_fan_out(server: LiveServer, name: str) -> None:
    with httpx.Client(base_url=server.url) as http:
        for q in ("a", "b"):
            http.put(f"/queues/{name}-{q}")
        assert http.put(f"/topics/{name}").status_code == 201
        assert http.put(f"/topics/{name}").status_code == 422
        assert http.put(f"/topics/{name}/queues/{name}-a").json() == {"Queues": [f"{name}-a"]}
        http.put(f"/topics/{name}/queues/{name}-b")
        r = http.put(f"/topics/{name}/queues/{name}-missing")
        assert r.status_code == 422 and "Queue does not exist" in r.json()["error"]
        sent = http.put(f"/topics/{name}/message", content=b"event").json()
        assert set(sent) == {f"{name}-a", f"{name}-b"}
        for q in ("a", "b"):
            (m,) = http.get(f"/queues/{name}-{q}/messages/10").json()
            assert m["body"] == "event" and m["id"] == sent[f"{name}-{q}"]
        assert http.delete(f"/topics/{name}/queues/{name}-b").json() == {"Queues": [f"{name}-a"]}
        assert name in http.get("/topics").json()["topics"]
        assert http.delete(f"/topics/{name}").json() == {"Deleted": True}
        assert http.delete(f"/topics/{name}").status_code == 404


def test_openapi_health_and_metrics(server: LiveServer, name: str) -> None:
    with httpx.Client(base_url=server.url) as http:
        doc = http.get("/openapi.json").json()
        assert doc["info"]["title"] == "Conveyor"
        for path in (
            "/queues/{queue}",
            "/queues/{queue}/messages/{selector}",
            "/topics/{topic}/message",
        ):
            assert path in doc["paths"]
        assert http.get("/healthz").json()["status"] == "ok"
        http.put(f"/queues/{name}")
        http.put(f"/queues/{name}/message", content=b"x")
        http.put(f"/queues/{name}/message", content=b"y")
        http.get(f"/queues/{name}/messages/1")
        text = http.get("/metrics").text
        assert f'conveyor_messages_sent_total{{queue="{name}"}} 2.0' in text
        assert f'conveyor_queue_visible{{queue="{name}"}} 1.0' in text
        assert f'conveyor_queue_in_flight{{queue="{name}"}} 1.0' in text
        assert "conveyor_request_seconds_bucket" in text


ATTRIBUTES = [
    ("visibility_timeout", 12, 12.0),
    ("delay", 5, 5.0),
    ("retention", 3600, 3600.0),
    ("max_message_bytes", 2048.0, 2048),
    ("receive_wait", 3, 3.0),
    ("delivery", "at-most-once", "at-most-once"),
    ("archive", True, True),
    ("rate_limit", 50, 50.0),
    ("compress_over", 100, 100),
    ("tags", {"team": "billing"}, {"team": "billing"}),
]


def test_every_queue_attribute_on_put_and_patch(server: LiveServer, name: str) -> None:
    with httpx.Client(base_url=server.url) as http:
        assert http.put(f"/queues/{name}-dlq").status_code == 201
        policy = {"queue": f"{name}-dlq", "max_receive_count": 3}
        for i, (attribute, given, stored) in enumerate(
            [*ATTRIBUTES, ("dead_letter", policy, policy)]
        ):
            created = f"{name}-{i}"
            r = http.put(f"/queues/{created}", json={attribute: given})
            assert r.status_code == 201, (attribute, r.text)
            got = http.get(f"/queues/{created}").json()["attributes"][attribute]
            assert got == stored, attribute
            patched = f"{name}-dlq"
            r = http.patch(f"/queues/{patched}", json={attribute: given})
            if attribute == "dead_letter":  # a queue cannot be its own dead-letter queue
                r = http.patch(f"/queues/{created}", json={attribute: None})
                assert (r.status_code, r.json()) == (200, "ok")
                assert http.get(f"/queues/{created}").json()["attributes"]["dead_letter"] is None
                patched = created
                r = http.patch(f"/queues/{created}", json={attribute: given})
            assert (r.status_code, r.json()) == (200, "ok"), (attribute, r.text)
            assert http.get(f"/queues/{patched}").json()["attributes"][attribute] == stored
        doc = http.get(f"/queues/{name}-dlq").json()["attributes"]
        assert doc["visibility_timeout"] == 12 and doc["tags"] == {"team": "billing"}


def test_queue_settings_refuse_wrong_types_and_unknown_names(server: LiveServer, name: str) -> None:
    with httpx.Client(base_url=server.url) as http:
        for body, word in [
            ({"visibility_timeout": False}, "visibility_timeout"),
            ({"visibility_timeout": "5"}, "visibility_timeout"),
            ({"max_message_bytes": 2048.5}, "max_message_bytes"),
            ({"dead_letter": {"queue": "x"}}, "max_receive_count"),
            ({"dead_letter": {"queue": "x", "max_receive_count": True}}, "max_receive_count"),
            ({"delivery": "sometimes"}, "delivery"),
            ({"colour": "blue"}, "colour"),
        ]:
            r = http.put(f"/queues/{name}", json=body)
            assert r.status_code == 400, body
            assert r.json()["code"] == "InvalidParameterValue" and word in r.json()["error"]
        assert name not in http.get("/queues").json()["queues"]  # nothing partly made
        r = http.put(
            f"/queues/{name}", json={"dead_letter": {"queue": "nope", "max_receive_count": 2}}
        )
        assert r.status_code == 404 and "nope" in r.json()["error"]


def test_binary_bodies_travel_as_base64_and_empty_publishes_are_refused(
    server: LiveServer, name: str
) -> None:
    body = b"\xff\xd8\xff\xe0 not text"
    with httpx.Client(base_url=server.url) as http:
        http.put(f"/queues/{name}")
        http.put(
            f"/queues/{name}/message",
            content=body,
            headers={"content-type": "application/octet-stream"},
        )
        (m,) = http.get(f"/queues/{name}/messages/5").json()
        assert m["encoding"] == "base64" and base64.b64decode(m["body"]) == body
        http.put(f"/topics/{name}")  # no subscriber yet: the body is still checked
        r = http.put(f"/topics/{name}/message", content=b"")
        assert r.status_code == 400 and "empty" in r.json()["error"]


def test_every_admin_operation_is_a_route(server: LiveServer, name: str) -> None:
    with httpx.Client(base_url=server.url) as http:
        http.put(f"/queues/{name}-dlq")
        policy = {"queue": f"{name}-dlq", "max_receive_count": 5}
        http.put(f"/queues/{name}", json={"dead_letter": policy})
        ids = [
            http.post(f"/queues/{name}/messages", json={"body": f"m{i}"}).json()["id"]
            for i in range(4)
        ]
        r = http.patch(
            f"/queues/{name}/message/{ids[3]}",
            json={"body": "edited", "attributes": {"k": "v"}, "priority": 9},
        )
        assert r.status_code == 200, r.text
        assert (r.json()["body"], r.json()["attributes"], r.json()["priority"]) == (
            "edited",
            {"k": "v"},
            9,
        )
        got = http.post(f"/queues/{name}/receive", json={"max_messages": 1}).json()["messages"]
        assert got[0]["id"] == ids[3]  # the highest priority first
        r = http.patch(f"/queues/{name}/message/{ids[0]}", json={"visible_in": 3600})
        assert r.json()["visible_at"] > got[0]["sent_at"] + 3000  # put back an hour
        r = http.post(f"/queues/{name}/message/{ids[3]}/fail", json={"delay": 0})
        assert r.status_code == 200 and r.json()["receive_count"] == 1
        r = http.post(f"/queues/{name}/message/{ids[1]}/invalid", json={"error": "bad sku"})
        assert r.status_code == 200 and r.json()["error"] == "bad sku"
        r = http.post(f"/queues/{name}/message/{ids[2]}/invalid")
        assert r.json()["error"] == "marked invalid"
        dead = http.get(f"/queues/{name}-dlq/stats").json()
        assert dead["ready"] == 2
        r = http.post(f"/queues/{name}-dlq/redrive", json={"all": True, "rate": 1000})
        assert r.status_code == 202 and r.json()["to_move"] == 2  # a task, in the background
        tasks = f"/queues/{name}-dlq/redrive/tasks"
        waiting.until(lambda: http.get(tasks).json()["tasks"][0]["status"] == "COMPLETED")
        assert http.get(tasks).json()["tasks"][0]["moved"] == 2
        assert http.get(f"/queues/{name}-dlq/stats").json()["ready"] == 0
        r = http.post(f"/queues/{name}-dlq/redrive", json={"ids": ["x"], "all": True})
        assert r.status_code == 404  # the ids named are what moves
        r = http.patch(f"/queues/{name}/message/nope", json={"priority": 1})
        assert r.status_code == 404
        assert (
            http.patch(f"/queues/{name}/message/{ids[3]}", json={"priority": True}).status_code
            == 400
        )
        consumers = http.get("/consumers").json()["consumers"]
        assert isinstance(consumers, list)


def test_consumers_and_deadlines_through_rest(server: LiveServer, store: Any, name: str) -> None:
    worker = store.register_consumer(f"{name}-w", queue=name, info={"host": "h1"})
    with httpx.Client(base_url=server.url) as http:
        listed = http.get("/consumers", params={"queue": name}).json()["consumers"]
        assert [(c["id"], c["info"]) for c in listed] == [(worker.id, {"host": "h1"})]
        assert listed[0]["heartbeat_at"] >= listed[0]["registered_at"] > 0
        http.put(f"/queues/{name}", json={"delivery": "at-most-once"})
        before = store.clock.now()
        r = http.post(f"/queues/{name}/messages", json={"body": "soon", "deadline": 60})
        assert r.status_code == 200, r.text
        kept = store.queue(name).get(r.json()["id"]).deadline  # the store drops it past this
        assert before + 60 <= kept <= store.clock.now() + 60
    store.unregister_consumer(worker.id)


def test_consumer_registry_and_archive_routes(server: LiveServer, store: Any, name: str) -> None:
    with httpx.Client(base_url=server.url) as http:
        r = http.post("/consumers", json={"id": f"{name}-w", "queue": name, "info": {"pid": 7}})
        assert r.status_code == 200, r.text
        first = r.json()
        beat = http.post(f"/consumers/{name}-w/heartbeat").json()
        assert beat["heartbeat_at"] >= first["heartbeat_at"] and beat["info"] == {"pid": 7}
        listed = http.get("/consumers", params={"queue": name}).json()["consumers"]
        assert [c["id"] for c in listed] == [f"{name}-w"]
        assert http.delete(f"/consumers/{name}-w").json() == {"unregistered": f"{name}-w"}
        assert http.get("/consumers", params={"queue": name}).json()["consumers"] == []
        assert http.post(f"/consumers/{name}-w/heartbeat").status_code == 404
        assert http.post("/consumers", json={"timeout": 0}).status_code == 400
        http.put(f"/queues/{name}", json={"archive": True})
        sent = http.post(f"/queues/{name}/messages", json={"body": "kept"}).json()
        (m,) = http.post(f"/queues/{name}/receive", json={}).json()["messages"]
        http.post(f"/queues/{name}/delete", json={"receipts": [m["receipt"]]})
        got = http.get(f"/queues/{name}/archive").json()
        assert [(a["id"], a["body"], a["outcome"]) for a in got["archived"]] == [
            (sent["id"], "kept", "deleted")
        ]
        assert got["next_after"] == 1


def test_bodies_over_the_limit_are_refused_declared_or_streamed(
    server: LiveServer, name: str
) -> None:
    """A body over --max-body gets 413 RequestEntityTooLarge whether its Content-Length
    announces it or it arrives in chunks, and nothing of it is sent."""
    big = b"x" * (5 * 1024 * 1024)

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(big), 256 * 1024):
            yield big[i : i + 256 * 1024]

    with httpx.Client(base_url=server.url) as http:
        assert http.put(f"/queues/{name}").status_code == 201
        for path in (f"/queues/{name}/message", f"/queues/{name}/delete"):  # raw and JSON
            for content in (big, chunks()):
                r = http.request(
                    "PUT" if path.endswith("message") else "POST",
                    path,
                    content=content,
                    headers={"content-type": "application/json"},
                )
                assert r.status_code == 413, r.text
                assert r.json()["code"] == "RequestEntityTooLarge"
                assert "--max-body" in r.json()["error"]
        assert http.get(f"/queues/{name}/stats").json()["ready"] == 0


def test_redrive_of_a_source_queue_redrives_its_dead_letter_queue(
    server: LiveServer, name: str
) -> None:
    """As the CLI does: naming the source queue redrives what its dead-letter queue holds."""
    with httpx.Client(base_url=server.url) as http:
        http.put(f"/queues/{name}-dlq")
        http.put(
            f"/queues/{name}",
            json={"dead_letter": {"queue": f"{name}-dlq", "max_receive_count": 1}},
        )
        for body in ("a", "b"):
            http.post(f"/queues/{name}/messages", json={"body": body})
        for _ in range(2):  # received once, then moved on the second receive
            http.post(f"/queues/{name}/receive", json={"max_messages": 10, "visibility_timeout": 0})
        assert http.get(f"/queues/{name}-dlq/stats").json()["ready"] == 2
        r = http.post(f"/queues/{name}/redrive", json={"all": True})
        assert (r.status_code, r.json()) == (200, {"moved": 2})
        assert http.get(f"/queues/{name}/stats").json()["ready"] == 2
        assert http.get(f"/queues/{name}-dlq/stats").json()["ready"] == 0
        # naming the dead-letter queue itself works as before
        for _ in range(2):
            http.post(f"/queues/{name}/receive", json={"max_messages": 10, "visibility_timeout": 0})
        r = http.post(f"/queues/{name}-dlq/redrive", json={"limit": 10})
        assert r.status_code == 200 and len(r.json()["moved"]) == 2


def test_priorities_beyond_the_stores_range_are_refused_on_every_route(
    server: LiveServer, name: str
) -> None:
    """A priority outside -32768..32767 (the range every store orders by) is a 400 that
    names the range, on each route that takes one, and nothing is written."""
    with httpx.Client(base_url=server.url) as http:
        http.put(f"/queues/{name}", json={})
        for priority in (32768, -32769, -(2**31), 10**20):
            r = http.post(f"/queues/{name}/messages", json={"body": "x", "priority": priority})
            assert r.status_code == 400 and "priority" in r.text and "3276" in r.text, r.text
            r = http.put(f"/queues/{name}/message", params={"priority": priority}, content=b"x")
            assert r.status_code == 400 and "priority" in r.text and "3276" in r.text, r.text
        assert http.get(f"/queues/{name}/stats").json()["ready"] == 0
        sent = http.post(f"/queues/{name}/messages", json={"body": "x", "priority": 32767}).json()
        r = http.patch(f"/queues/{name}/message/{sent['id']}", json={"priority": 32768})
        assert r.status_code == 400 and "priority" in r.text and "3276" in r.text, r.text
        assert http.get(f"/queues/{name}/message/{sent['id']}").json()["priority"] == 32767


def test_a_slow_redrive_is_a_task_that_holds_nothing_and_can_be_cancelled(
    server: LiveServer, name: str
) -> None:
    """A redrive at 0.001 a second answers at once with its task; requests go on meanwhile;
    the task is listed, and a cancel ends its pause, leaving the rest where they were."""
    with httpx.Client(base_url=server.url) as http:
        http.put(f"/queues/{name}-dlq", json={})
        policy = {"queue": f"{name}-dlq", "max_receive_count": 1}
        http.put(f"/queues/{name}", json={"dead_letter": policy})
        for i in range(3):
            http.post(f"/queues/{name}-dlq/messages", json={"body": f"m{i}"})
        r = http.post(f"/queues/{name}/redrive", json={"all": True, "rate": 0.001, "to": name})
        assert r.status_code == 202, r.text
        started = r.json()
        assert started["status"] == "RUNNING" and started["to_move"] == 3
        tasks = f"/queues/{name}/redrive/tasks"
        waiting.until(lambda: http.get(tasks).json()["tasks"][0]["moved"] == 1)
        assert http.get("/healthz").status_code == 200
        again = http.post(f"/queues/{name}/redrive", json={"all": True, "rate": 1})
        assert again.status_code == 400 and "already a task running" in again.text
        r = http.delete(f"{tasks}/{started['task']}")
        assert r.status_code == 200 and r.json()["status"] == "CANCELLING"
        waiting.until(lambda: http.get(tasks).json()["tasks"][0]["status"] == "CANCELLED")
        assert http.get(f"/queues/{name}-dlq/stats").json()["ready"] == 2
        assert http.delete(f"{tasks}/{started['task']}").status_code == 400  # ended
        assert http.delete(f"{tasks}/no-such-task").status_code == 404


def test_redrives_at_a_rate_are_bounded_in_number(
    server: LiveServer, name: str, monkeypatch: Any
) -> None:
    from conveyor.server.sqs import move as sqs_move

    monkeypatch.setattr(sqs_move, "MAX_RUNNING", 2)
    with httpx.Client(base_url=server.url) as http:
        started = []
        http.put(f"/queues/{name}", json={})
        for i in range(3):
            http.put(f"/queues/{name}{i}", json={})
            for body in ("a", "b"):
                http.post(f"/queues/{name}{i}/messages", json={"body": body})
            redrive = {"all": True, "rate": 0.001, "to": name}
            started.append(http.post(f"/queues/{name}{i}/redrive", json=redrive))
        assert [r.status_code for r in started] == [202, 202, 400]
        assert "2 message move tasks are running" in started[2].text
        for i, r in enumerate(started[:2]):
            http.delete(f"/queues/{name}{i}/redrive/tasks/{r.json()['task']}")


def test_every_number_on_every_route_is_range_checked(server: LiveServer, name: str) -> None:
    """Out of range, not finite or not a number, each number a route takes (delays,
    timeouts, deadlines, counts, offsets, rates) is a 400 naming the field, never a 5xx, and
    nothing is written."""
    bad = (-1, -(2**31), 2**63, 10**30, 1e20, "NaN", "Infinity", "x")
    with httpx.Client(base_url=server.url) as http:
        http.put(f"/queues/{name}", json={})
        http.put(f"/queues/{name}-dlq", json={})
        kept = http.post(f"/queues/{name}/messages", json={"body": "kept"}).json()["id"]
        message = f"/queues/{name}/message/{kept}"
        bodies: dict[tuple[str, str], list[dict[str, Any]]] = {
            ("POST", f"/queues/{name}/messages"): [
                {"body": "x", "delay": "?"},
                {"body": "x", "deadline": "?"},
            ],
            ("POST", f"/queues/{name}/receive"): [
                {"max_messages": "?"},
                {"visibility_timeout": "?"},
                {"wait": "?"},
            ],
            ("POST", f"/queues/{name}/visibility"): [{"receipt": "r", "timeout": "?"}],
            ("POST", f"{message}/fail"): [{"delay": "?"}],
            ("PATCH", message): [{"visible_in": "?"}],
            ("POST", f"/queues/{name}/redrive"): [{"limit": "?"}, {"all": True, "rate": "?"}],
            ("PATCH", f"/queues/{name}"): [{"visibility_timeout": "?"}, {"rate_limit": "?"}],
            ("POST", "/consumers"): [{"timeout": "?"}],
        }
        params = {
            ("GET", f"/queues/{name}/peek"): ["limit", "after", "scan"],
            ("GET", f"/queues/{name}/archive"): ["limit", "after"],
            ("PUT", f"/queues/{name}/message"): ["delay"],
        }
        tried = 0
        for value in bad:
            for (method, path), shapes in bodies.items():
                for shape in shapes:
                    field = next(k for k, v in shape.items() if v == "?")
                    r = http.request(method, path, json={**shape, field: value})
                    assert r.status_code == 400 and field in r.text, (path, shape, value, r.text)
                    tried += 1
            for (method, path), names in params.items():
                for field in names:
                    r = http.request(method, path, params={field: str(value)}, content=b"x")
                    assert r.status_code == 400 and field in r.text, (path, field, value, r.text)
                    tried += 1
        assert tried == len(bad) * 19
        stats = http.get(f"/queues/{name}/stats").json()
        assert (stats["ready"], stats["in_flight"], stats["delayed"]) == (1, 0, 0)


def test_peek_tells_a_message_sent_while_it_reads_as_ready(
    server: LiveServer, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message sent after a peek began and before it read the queue is ready, not delayed
    (the dashboard lists messages through this route)."""
    from conveyor import Message, Queue

    real = Queue.peek

    def peek_after_a_send(self: Queue, *args: Any, **kwargs: Any) -> list[Message]:
        self.send("meanwhile")  # lands between the request's start and its read
        return real(self, *args, **kwargs)

    with httpx.Client(base_url=server.url) as http:
        http.put(f"/queues/{name}")
        monkeypatch.setattr(Queue, "peek", peek_after_a_send)
        for params in ({}, {"search": "meanwhile"}):
            listed = http.get(f"/queues/{name}/peek", params=params).json()
            assert listed and {m["state"] for m in listed} == {"ready"}, listed
