"""The `conveyor` command, run as a real subprocess against a SQLite store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow


class Conveyor:
    def __init__(self, tmp: Path) -> None:
        self.env = {**os.environ, "CONVEYOR_URL": f"sqlite:///{tmp}/cli.db", "COLUMNS": "200"}

    def run(self, *args: str, stdin: str | None = None, code: int = 0) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "conveyor", *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=60,
        )
        assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
        return proc.stdout + proc.stderr

    def json(self, *args: str) -> Any:
        return json.loads(self.run("--output", "json", *args))


@pytest.fixture
def cv(tmp_path: Path) -> Conveyor:
    return Conveyor(tmp_path)


def test_read_only_commands_create_no_store(cv: Conveyor, tmp_path: Path) -> None:
    assert cv.json("queue", "list") == {"queues": []}
    assert cv.json("topic", "list") is not None
    assert "does not exist" in cv.run("-q", "orders", "qstat", code=1)
    assert "does not exist" in cv.run("-q", "orders", "ls", code=1)
    assert not list(tmp_path.iterdir()), "a read-only command created the store's file"
    cv.run("queue", "create", "orders")
    assert (tmp_path / "cli.db").exists()


def test_output_json_on_every_command_and_its_errors(cv: Conveyor) -> None:
    cv.run("queue", "create", "orders")
    listed = json.loads(cv.run("queue", "list", "-o", "json"))
    assert [q["queue"] for q in listed["queues"]] == ["orders"]
    shown = json.loads(cv.run("-q", "orders", "queue", "show", "--output", "json"))
    assert shown["name"] == "orders"
    error = json.loads(cv.run("-q", "nope", "qstat", "-o", "json", code=1))
    assert error["code"] == "AWS.SimpleQueueService.NonExistentQueue"
    assert "does not exist" in error["error"]
    assert cv.run("-q", "nope", "qstat", code=1).startswith("error: ")


def test_queue_lifecycle_and_messages(cv: Conveyor) -> None:
    cv.run("queue", "create", "orders-dlq")
    created = cv.json(
        "queue",
        "create",
        "orders",
        "--visibility-timeout",
        "5",
        "--dead-letter-queue",
        "orders-dlq",
        "--max-receive-count",
        "2",
        "--archive",
    )
    assert created["attributes"]["dead_letter"] == {"queue": "orders-dlq", "max_receive_count": 2}
    assert created["attributes"]["archive"] is True
    assert (
        cv.json("queue", "set", "orders", "--delay", "0", "--rate-limit", "100")["attributes"][
            "rate_limit"
        ]
        == 100
    )
    sent = cv.json("-q", "orders", "send", "hello", "--priority", "5", "--attr", "k=v")
    assert sent["duplicate"] is False
    assert cv.json("-q", "orders", "send", "again", "--id", "fixed")["id"] == "fixed"
    assert cv.json("-q", "orders", "send", "x", "--id", "fixed")["duplicate"] is True
    cv.run("-q", "orders", "send", "--json", stdin='{"a": 1}')
    got = cv.json("-q", "orders", "receive", "--max", "10", "--wait", "1")["messages"]
    assert [m["body"] for m in got] == ["hello", "again", '{"a":1}']
    assert got[0]["attributes"] == {"k": "v"}
    cv.run("-q", "orders", "ack", got[0]["receipt"])
    stats = cv.json("-q", "orders", "qstat")
    assert (stats["in_flight"], stats["totals"]["deleted"]) == (2, 1)
    assert [q["queue"] for q in cv.json("queue", "list")["queues"]] == ["orders", "orders-dlq"]
    table = cv.run("queue", "list")
    assert "orders-dlq" in table and "in flight" in table


def test_admin_repair_flow(cv: Conveyor) -> None:
    cv.run("queue", "create", "jobs-dlq")
    cv.run("queue", "create", "jobs", "--dead-letter-queue", "jobs-dlq", "--max-receive-count", "3")
    assert cv.json("-q", "jobs", "enqueue-test") == {
        "successes": ["A-101", "A-202", "A-303", "A-404"]
    }
    assert cv.json("-q", "jobs", "enqueue-test")["successes"][0] == "A-101"  # replaces, no error
    listing = cv.json("-q", "jobs", "ls", "--limit", "2")
    assert [m["id"] for m in listing["messages"]] == ["A-101", "A-202"]
    page2 = cv.json("-q", "jobs", "ls", "--limit", "2", "--after", str(listing["next_after"]))
    assert [m["id"] for m in page2["messages"]] == ["A-303", "A-404"] and page2[
        "next_after"
    ] is None
    assert json.loads(cv.json("-q", "jobs", "get", "--id", "A-303")["body"])["id"] == "A-303"
    cv.json("-q", "jobs", "receive")
    assert cv.json("-q", "jobs", "get", "--id", "A-101")["state"] == "in_flight"
    assert cv.json("-q", "jobs", "fail", "--id", "A-101")["state"] == "ready"
    assert cv.json("-q", "jobs", "reset", "--id", "A-101")["receive_count"] == 0
    dead = cv.json("-q", "jobs", "invalid", "--id", "A-202", "--error", "bad sku")
    assert dead["queue"] == "jobs-dlq" and dead["error"] == "bad sku"
    dlq = cv.json("-q", "jobs", "dlq")
    assert dlq["total"] == 1 and dlq["by_source"] == {"jobs": 1}
    assert cv.json("-q", "jobs", "redrive", "--id", "A-202")["redriven"] == ["A-202"]
    cv.run("-q", "jobs", "invalid", "--id", "A-303")
    cv.run("-q", "jobs", "invalid", "--id", "A-404")
    out = cv.run("-q", "jobs", "redrive", "--all", "--rate", "100")
    assert "redrove 2" in out
    cv.run("-q", "jobs", "delete", "--id", "A-202")
    assert cv.json("-q", "jobs", "qstat")["ready"] == 3
    cv.run("-q", "jobs", "purge", code=1, stdin="n\n")  # asked, declined: Abort
    assert cv.json("-q", "jobs", "purge", "--yes")["purged"] == 3


def test_topics_and_consumers(cv: Conveyor) -> None:
    cv.run("queue", "create", "a")
    cv.run("queue", "create", "b")
    cv.run("topic", "create", "events")
    cv.run("topic", "subscribe", "events", "a")
    assert cv.json("topic", "subscribe", "events", "b")["queues"] == ["a", "b"]
    ids = cv.json("topic", "publish", "events", "hi")
    assert set(ids) == {"a", "b"}
    assert cv.json("topic", "list")["topics"] == [{"topic": "events", "queues": ["a", "b"]}]
    assert cv.json("consumers")["consumers"] == []


def test_errors_say_what_to_do(cv: Conveyor) -> None:
    out = cv.run("-q", "missing", "send", "x", code=1)
    assert "error: queue 'missing' does not exist: create it first" in out
    out = cv.run("queue", "create", "bad name", code=1)
    assert "error: invalid queue name" in out
    out = cv.run("--store", "sqlite:////nonexistent/dir/x.db", "queue", "list", code=1)
    assert "cannot reach store sqlite:////nonexistent/dir/x.db" in out
    out = cv.run("--store", "redis://user:hunter2@127.0.0.1:1/0", "queue", "list", code=1)
    assert "hunter2" not in out
    cv.run("get", code=2)
    cv.run("frobnicate", code=2)
    out = cv.run("send", "x", code=2)
    assert "--queue" in out


def test_completion_scripts(cv: Conveyor) -> None:
    for shell in ("bash", "zsh", "fish"):
        assert "_CONVEYOR_COMPLETE" in cv.run("completion", shell)


def test_remaining_commands(cv: Conveyor, tmp_path: Path) -> None:
    cv.run("queue", "create", "q", "--fifo", code=1)  # FIFO names end in .fifo
    cv.run("queue", "create", "q.fifo", "--content-based-dedup")
    shown = cv.json("queue", "show", "q.fifo")["attributes"]
    assert shown["fifo"] is True and shown["content_based_dedup"] is True
    body = tmp_path / "body.bin"
    body.write_bytes(b"from a file")
    sent = cv.json("-q", "q.fifo", "send", "--file", str(body), "--group", "g")
    again = cv.json("-q", "q.fifo", "send", "--file", str(body), "--group", "g")
    assert again == {"id": sent["id"], "duplicate": True}  # content-based de-duplication
    got = cv.json("-q", "q.fifo", "receive", "--ack")
    assert got["acked"] and got["messages"][0]["body"] == "from a file"
    assert cv.json("-q", "q.fifo", "qstat")["totals"]["deleted"] == 1
    cv.run("-q", "q.fifo", "send", "not json", "--json", "--group", "g", code=1)
    cv.run("topic", "create", "t")
    cv.run("topic", "subscribe", "t", "q.fifo")
    assert cv.json("topic", "unsubscribe", "t", "q.fifo")["queues"] == []
    cv.run("topic", "delete", "t")
    assert cv.json("topic", "list")["topics"] == []
    assert cv.json("queue", "delete", "q.fifo", "--yes") == {"deleted": "q.fifo"}
    assert cv.json("queue", "list")["queues"] == []
    assert "Usage" in cv.run("--help") and "redrive" in cv.run("--help")


def test_qstat_watch_refreshes_until_interrupted(cv: Conveyor) -> None:
    import signal
    import time

    cv.run("queue", "create", "w")
    cv.run("-q", "w", "send", "x")
    proc = subprocess.Popen(
        [sys.executable, "-m", "conveyor", "-q", "w", "qstat", "--watch", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cv.env,
    )
    time.sleep(1.5)  # real time is what --watch is about
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert "queue w" in out and "ready" in out


def test_queues_of_other_regions_are_addressed_plainly(cv: Conveyor, tmp_path: Path) -> None:
    from conveyor import Client

    with Client(f"sqlite:///{tmp_path}/cli.db") as client:  # as the SQS API stores them
        client.create_queue("eu-west-1:000000000000:eu-queue")
        client.create_queue("eu-west-1:000000000000:twice")
        client.create_queue("ap-south-1:111111111111:twice")
        assert client.find_queue("eu-queue") == "eu-west-1:000000000000:eu-queue"
    assert "sent" in cv.run("send", "-q", "eu-queue", "hello").lower()
    got = cv.json("receive", "-q", "eu-queue")
    assert [m["body"] for m in got["messages"]] == ["hello"]
    out = cv.run("send", "-q", "twice", "x", code=1)
    assert "ap-south-1:111111111111:twice" in out and "REGION:ACCOUNT:NAME" in out
    cv.run("send", "-q", "ap-south-1:111111111111:twice", "x")
    assert "does not exist" in cv.run("send", "-q", "nowhere", "x", code=1)


def test_update_and_deadlines(cv: Conveyor, tmp_path: Path) -> None:
    cv.run("queue", "create", "edits", "--delivery", "at-most-once")
    first = cv.json("-q", "edits", "send", "one")["id"]
    second = cv.json("-q", "edits", "send", "two", "--deadline", "60")["id"]
    got = cv.json("-q", "edits", "update", "--id", first, "--body", '{"a": 1}', "--json",
                  "--attr", "k=v", "--priority", "5")  # fmt: skip
    assert (got["body"], got["attributes"], got["priority"]) == ('{"a":1}', {"k": "v"}, 5)
    later = cv.json("-q", "edits", "update", "--id", first, "--visible-in", "3600")
    assert later["state"] == "delayed"
    assert "give what to change" in cv.run("-q", "edits", "update", "--id", first, code=2)
    from conveyor import Client

    with Client(f"sqlite:///{tmp_path}/cli.db") as client:
        deadline = client.queue("edits").get(second).deadline
        assert deadline is not None and 0 < deadline - client.clock.now() <= 60


def test_consumer_registry_and_archive(cv: Conveyor) -> None:
    got = cv.json("consumer", "register", "--id", "w1", "-q", "jobs", "--info", "host=h1")
    assert (got["id"], got["queue"], got["info"]) == ("w1", "jobs", {"host": "h1"})
    assert cv.json("consumer", "heartbeat", "w1")["id"] == "w1"
    assert [c["id"] for c in cv.json("consumers")["consumers"]] == ["w1"]
    cv.run("consumer", "unregister", "w1")
    assert cv.json("consumers")["consumers"] == []
    cv.run("queue", "create", "jobs", "--archive")
    cv.run("-q", "jobs", "send", "done")
    cv.json("-q", "jobs", "receive", "--ack")
    got = cv.json("-q", "jobs", "archive")
    assert [(a["body"], a["outcome"]) for a in got["archived"]] == [("done", "deleted")]
    assert "--limit takes 1 to 1000" in cv.run("-q", "jobs", "archive", "--limit", "0", code=1)
