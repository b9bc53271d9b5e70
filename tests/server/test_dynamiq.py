"""Dynamiq's REST API, route by route as its document's table states it (../shared/seeds,
"REST API"): a client written from that document, over plain HTTP, gets each documented code
and body."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from ..support.live import LiveServer


@pytest.fixture
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, follow_redirects=False) as client:
        yield client


def answer(r: httpx.Response) -> tuple[int, object]:
    """The status and the body, read as JSON as the document says every body is."""
    return r.status_code, (json.loads(r.content) if r.content else None)


def test_topics(http: httpx.Client, name: str) -> None:
    topic = f"{name}-t"
    # PUT /topics/:topic_name: 201 "created"; 422 {"error": "Topic already exists."}
    assert answer(http.put(f"/topics/{topic}")) == (201, "created")
    code, body = answer(http.put(f"/topics/{topic}"))
    assert code == 422 and isinstance(body, dict) and body["error"] == "Topic already exists."
    # GET /topics: 200 {"topics": [...]}
    code, body = answer(http.get("/topics"))
    assert code == 200 and isinstance(body, dict) and topic in body["topics"]
    # GET /topics/:topic_name: 200, a JSON array of the subscribed queues
    assert answer(http.get(f"/topics/{topic}")) == (200, [])
    # PUT /topics/:topic_name/queues/:queue_name: 200 {"Queues": [...]}; 422 missing
    http.put(f"/queues/{name}-a")
    http.put(f"/queues/{name}-b")
    assert answer(http.put(f"/topics/{topic}/queues/{name}-a")) == (200, {"Queues": [f"{name}-a"]})
    code, body = answer(http.put(f"/topics/{topic}/queues/{name}-b"))
    assert (
        code == 200
        and isinstance(body, dict)
        and sorted(body["Queues"])
        == [
            f"{name}-a",
            f"{name}-b",
        ]
    )
    code, body = answer(http.put(f"/topics/{topic}/queues/{name}-none"))
    assert code == 422 and isinstance(body, dict) and "Queue does not exist" in body["error"]
    code, body = answer(http.put(f"/topics/{name}-none/queues/{name}-a"))
    assert code == 422 and isinstance(body, dict) and "Topic does not exist" in body["error"]
    assert answer(http.get(f"/topics/{topic}"))[1] == sorted([f"{name}-a", f"{name}-b"])
    # PUT /topics/:topic_name/message: {queue: id} for every subscribed queue
    code, sent = answer(http.put(f"/topics/{topic}/message", content=b"broadcast"))
    assert code == 200 and isinstance(sent, dict) and set(sent) == {f"{name}-a", f"{name}-b"}
    for queue, message_id in sent.items():
        code, got = answer(http.get(f"/queues/{queue}/messages/10"))
        assert code == 200 and isinstance(got, list)
        assert [(m["id"], m["body"]) for m in got] == [(message_id, "broadcast")]
    # DELETE /topics/:topic_name/queues/:queue_name: 200 {"Queues": [what is left]}
    assert answer(http.delete(f"/topics/{topic}/queues/{name}-b")) == (
        200,
        {"Queues": [f"{name}-a"]},
    )
    # DELETE /topics/:topic_name: 200 {"Deleted": true}; 404 {"error": "Topic did not exist."}
    assert answer(http.delete(f"/topics/{topic}")) == (200, {"Deleted": True})
    code, body = answer(http.delete(f"/topics/{topic}"))
    assert code == 404 and isinstance(body, dict) and body["error"] == "Topic did not exist."


def test_queues(http: httpx.Client, name: str) -> None:
    # PUT /queues/:queue_name: 201 "created"; 422 {"error": "Queue already exists."}
    assert answer(http.put(f"/queues/{name}")) == (201, "created")
    code, body = answer(http.put(f"/queues/{name}"))
    assert code == 422 and isinstance(body, dict) and body["error"] == "Queue already exists."
    # GET /queues: 200 {"queues": [...]}
    code, body = answer(http.get("/queues"))
    assert code == 200 and isinstance(body, dict) and name in body["queues"]
    # GET /queues/:queue: 200, its configuration; 404, a string saying there is no such queue
    code, body = answer(http.get(f"/queues/{name}"))
    assert code == 200 and isinstance(body, dict) and body["VisibilityTimeout"] == 30
    code, body = answer(http.get(f"/queues/{name}-none"))
    assert code == 404 and isinstance(body, str) and f"{name}-none" in body
    # PATCH /queues/:queue_name/ (the document's trailing slash) and without it: 200 "ok"
    settings = {
        "visibility_timeout": 2,
        "max_partitions": 10,
        "min_partitions": 1,
        "max_partition_age": 426000,
        "compressed_messages": False,
    }
    assert answer(http.patch(f"/queues/{name}/", json=settings)) == (200, "ok")
    code, body = answer(http.get(f"/queues/{name}"))
    assert isinstance(body, dict) and body["VisibilityTimeout"] == 2
    assert answer(http.patch(f"/queues/{name}", json={"visibility_timeout": 3})) == (200, "ok")
    # DELETE /queue/:queue_name (the document's singular path): {"Deleted": true}; 404
    assert answer(http.delete(f"/queue/{name}")) == (200, {"Deleted": True})
    code, body = answer(http.delete(f"/queue/{name}"))
    assert code == 404 and isinstance(body, dict) and body["error"] == "Queue did not exist."


def test_publishing_and_consuming(http: httpx.Client, name: str) -> None:
    http.put(f"/queues/{name}")
    # PUT /queues/:queue_name/message: 200, a JSON string holding the new message's id
    ids = []
    for i in range(3):
        code, message_id = answer(http.put(f"/queues/{name}/message", content=f"m{i}".encode()))
        assert code == 200 and isinstance(message_id, str) and message_id
        ids.append(message_id)
    # no queue: no id returned, nothing enqueued
    assert answer(http.put(f"/queues/{name}-none/message", content=b"x")) == (200, "")
    # GET /queues/:queue_name/messages/:batch_size: 200, up to batch_size messages
    code, got = answer(http.get(f"/queues/{name}/messages/2"))
    assert code == 200 and isinstance(got, list)
    assert [(m["id"], m["body"]) for m in got] == [(ids[0], "m0"), (ids[1], "m1")]
    code, rest = answer(http.get(f"/queues/{name}/messages/5"))
    assert code == 200 and isinstance(rest, list) and [m["body"] for m in rest] == ["m2"]
    # nothing to serve: 204
    r = http.get(f"/queues/{name}/messages/5")
    assert r.status_code == 204 and r.content == b""
    # 404: a string saying there is no such queue; 422: a string about the batch size
    code, body = answer(http.get(f"/queues/{name}-none/messages/5"))
    assert code == 404 and isinstance(body, str)
    for bad in ("0", "-1", "abc", "2.5", "100000"):
        code, body = answer(http.get(f"/queues/{name}/messages/{bad}"))
        assert code == 422 and isinstance(body, str) and "batch size" in body, bad
    # DELETE /queues/:queue_name/message/:ID: true, or false (no error for a wrong id)
    assert answer(http.delete(f"/queues/{name}/message/{ids[0]}")) == (200, True)
    assert answer(http.delete(f"/queues/{name}/message/{ids[0]}")) == (200, False)
    assert answer(http.delete(f"/queues/{name}-none/message/{ids[1]}")) == (200, False)
