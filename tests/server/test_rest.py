"""The REST API: the predecessor's routes, receipts, admin, topics, OpenAPI, errors."""

from __future__ import annotations

import httpx

from ..live import LiveServer


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
        ids = [http.put(f"/queues/{name}/message", content=f"m{i}".encode()).text for i in range(3)]
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
