"""docs/deploy.md's steps that are not a proxy or a backup: the systemd unit verifies, the
alert rules pass promtool's tests against series named as /metrics names them, readiness
follows the store, and SIGTERM under load finishes what is in flight and loses nothing."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from conveyor import Client

from ..conftest import unavailable
from ..support.live import LiveServer
from ..support.waiting import free_port, until
from .test_serve_process import ServeProcess

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def tool(name: str, package: str) -> str:
    found = shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/usr/bin")
    if found is None:
        unavailable(f"{name} (apt-get install {package})")
    return found


def test_the_service_unit_verifies(tmp_path: Path) -> None:
    """deploy/conveyor.service as systemd reads it, with this checkout's conveyor and
    environment file where the unit expects /opt/conveyor and /etc/conveyor."""
    analyze = tool("systemd-analyze", "systemd")
    unit = (DEPLOY / "conveyor.service").read_text()
    for expected in ("/opt/conveyor/bin/conveyor", "/etc/conveyor/conveyor.env"):
        assert expected in unit
    unit = unit.replace("/opt/conveyor/bin/conveyor", str(Path(sys.executable).parent / "conveyor"))
    unit = unit.replace("/etc/conveyor/conveyor.env", str(DEPLOY / "conveyor.env"))
    (tmp_path / "conveyor.service").write_text(unit)
    done = subprocess.run(
        [analyze, "verify", str(tmp_path / "conveyor.service")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), (
        done.stdout + done.stderr
    )
    # every setting the environment file gives is one conveyor serve reads
    serve_help = subprocess.run(
        [sys.executable, "-m", "conveyor", "serve", "--help"], capture_output=True, text=True
    ).stdout
    names = re.findall(r"^#?(CONVEYOR_[A-Z_]+)=", (DEPLOY / "conveyor.env").read_text(), re.M)
    assert names
    source = (ROOT / "conveyor" / "cli" / "serve.py").read_text()
    source += (ROOT / "conveyor" / "cli" / "app.py").read_text()
    for name in names:
        assert name in unit or f'envvar="{name}"' in source, name
    assert "--trusted-proxy" in serve_help


def test_alert_rules_pass_their_tests() -> None:
    promtool = tool("promtool", "prometheus")
    rules, tests = DEPLOY / "alerts.yml", ROOT / "tests" / "deploy" / "alerts_test.yml"
    for args in (["check", "rules", str(rules)], ["test", "rules", str(tests)]):
        done = subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr


def test_alert_rules_name_metrics_as_metrics_serves_them(tmp_path: Path) -> None:
    """Every conveyor_* series the rules and their tests use, with its labels, is one a
    server's /metrics exposes: a renamed metric or label fails here."""
    used: dict[str, set[str]] = {}
    for path in (DEPLOY / "alerts.yml", ROOT / "tests" / "deploy" / "alerts_test.yml"):
        for name, labels in re.findall(r"(conveyor_[a-z_]+)(\{[^}]*\})?", path.read_text()):
            keys = set(re.findall(r"([a-z_]+)\s*[=!]~?", labels)) - {"job", "instance"}
            used.setdefault(name, set()).update(keys)
    assert {"conveyor_queue_oldest_age_seconds", "conveyor_queue_dead",
            "conveyor_request_seconds_count", "conveyor_receives_waiting"} <= set(used)  # fmt: skip
    with Client(f"sqlite:///{tmp_path}/m.db") as client, LiveServer(client) as server:
        sqs = server.sqs()
        url = sqs.create_queue(QueueName="watched")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="x")
        idle = sqs.create_queue(QueueName="idle")["QueueUrl"]
        waiting = threading.Thread(
            target=lambda: server.sqs().receive_message(QueueUrl=idle, WaitTimeSeconds=2)
        )
        waiting.start()  # a long poll, for conveyor_receives_waiting's series
        deadline = time.monotonic() + 10
        while 'conveyor_receives_waiting{queue="idle"}' not in (
            exposed := httpx.get(server.url + "/metrics").text
        ):
            assert time.monotonic() < deadline, exposed
            time.sleep(0.05)
        waiting.join()
    served: dict[str, set[str]] = {}
    for name, labels in re.findall(r"^(conveyor_[a-z_]+)(?:\{([^}]*)\})? ", exposed, re.M):
        served.setdefault(name, set()).update(re.findall(r'([a-z_]+)="', labels))
    for name, keys in used.items():
        assert name in served, f"{name} is not a metric /metrics serves"
        assert keys <= served[name], f"{name} has no label {keys - served[name]}"


def test_readiness_follows_the_store_and_liveness_does_not(tmp_path: Path) -> None:
    redis_server = tool("redis-server", "redis-server")
    port = free_port()

    def start_redis() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [redis_server, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
             "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while subprocess.run(["redis-cli", "-p", str(port), "ping"],
                             capture_output=True).returncode != 0:  # fmt: skip
            assert time.monotonic() < deadline
            time.sleep(0.05)
        return proc

    redis = start_redis()
    server = ServeProcess(tmp_path, f"redis://127.0.0.1:{port}/0?prefix=ready")
    try:
        assert httpx.get(server.url + "/healthz").json() == {"status": "ok", "draining": False}
        redis.terminate()
        redis.wait(10)
        down = httpx.get(server.url + "/healthz", timeout=30)
        assert down.status_code == 503, down.text  # the store is out of reach: not ready
        assert httpx.get(server.url + "/livez").json() == {"status": "ok"}  # but alive
        redis = start_redis()
        deadline = time.monotonic() + 20
        while httpx.get(server.url + "/healthz", timeout=30).status_code != 200:
            assert time.monotonic() < deadline, "ready again once the store is back"
            time.sleep(0.2)
    finally:
        server.stop()
        redis.terminate()
        redis.wait(10)


def test_sigterm_under_load_finishes_in_flight_and_loses_nothing(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/c.db"
    server = ServeProcess(tmp_path, store)
    url = server.sqs().create_queue(QueueName="work", Attributes={"VisibilityTimeout": "600"})[
        "QueueUrl"
    ]
    sent: list[str] = []  # ids whose send was answered
    deleted: list[str] = []  # ids whose delete was answered
    errors: list[str] = []  # answers that were errors (a refused connection is no answer)
    stop = threading.Event()

    def produce() -> None:
        c = server.sqs()
        i = 0
        while not stop.is_set():
            try:
                out = c.send_message_batch(
                    QueueUrl=url,
                    Entries=[{"Id": str(k), "MessageBody": f"m{i + k}"} for k in range(10)],
                )
            except Exception as exc:  # sorted below
                note(exc)
                continue
            sent.extend(s["MessageId"] for s in out["Successful"])
            i += 10

    def consume() -> None:
        c = server.sqs()
        while not stop.is_set():
            try:
                got = c.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
                for m in got.get("Messages", []):
                    c.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
                    deleted.append(m["MessageId"])
            except Exception as exc:  # sorted below
                note(exc)

    def note(exc: Exception) -> None:
        response = getattr(exc, "response", None)
        if response is not None:  # the server answered with an error
            errors.append(str(exc))
        if server.proc.poll() is not None:
            stop.set()
        else:
            time.sleep(0.01)

    threads = [threading.Thread(target=f) for f in (produce, produce, consume)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.5)
        assert sent and deleted
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(30) == 0
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        server.stop()
    assert not errors, errors[:3]
    with Client(store) as client:
        queue = client.queue("work")
        left: list[str] = []
        after = 0
        while batch := queue.peek(1000, after=after):
            left += [m.id for m in batch]
            after = batch[-1].sequence
    # every answered send is in the store, or was received and its delete answered
    assert set(sent) <= set(left) | set(deleted), len(set(sent) - set(left) - set(deleted))
    assert not set(left) & set(deleted)  # and an answered delete is gone
    assert "shutting down" in server.log.read_text()


def test_sigterm_stops_redrives_at_a_rate(tmp_path: Path) -> None:
    """Redrives at a rate are tasks the server stops when it shuts down: with ten of them
    pausing for hours, SIGTERM still ends the process at once, exit 0."""
    server = ServeProcess(tmp_path)
    try:
        with httpx.Client(base_url=server.url) as http:
            http.put("/queues/back", json={}).raise_for_status()
            for i in range(10):
                http.put(f"/queues/dlq{i}", json={}).raise_for_status()
                http.post(f"/queues/dlq{i}/messages", json={"body": "a"}).raise_for_status()
                http.post(f"/queues/dlq{i}/messages", json={"body": "b"}).raise_for_status()
                redrive = {"all": True, "rate": 0.001, "to": "back"}
                r = http.post(f"/queues/dlq{i}/redrive", json=redrive)
                assert r.status_code == 202, r.text

            def task(i: int) -> dict[str, Any]:
                found: dict[str, Any] = http.get(f"/queues/dlq{i}/redrive/tasks").json()
                return found["tasks"][0]  # type: ignore[no-any-return]

            for i in range(10):  # each moved one and pauses for 1,000 s before the next
                until(lambda i=i: task(i)["moved"] == 1)  # type: ignore[misc]
                assert task(i)["status"] == "RUNNING"
        began = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(20) == 0
        assert time.monotonic() - began < 10
    finally:
        server.stop()


def test_the_deploy_page_names_what_exists() -> None:
    """docs/deploy.md names files, commands and flags that exist (docs that cannot drift):
    every path under deploy/, tests/ and docs/, every `conveyor` command, every flag of
    `conveyor serve`, and the extras it tells pip to install."""
    import tomllib

    from conveyor.cli import cli

    page = (ROOT / "docs" / "deploy.md").read_text()
    paths = set(re.findall(r"`((?:deploy|tests|docs)/[\w./-]+)`", page))
    assert "deploy/nginx.conf" in paths and "deploy/conveyor.service" in paths
    for path in paths:
        assert (ROOT / path).exists(), f"docs/deploy.md names {path}, which is not there"
    commands = set(re.findall(r"(?<![\w/.-])conveyor[ \t]+(?:--store\s+\S+\s+)?([a-z]+)\b", page))
    assert {"serve", "backup", "restore", "migrate"} <= commands
    every = cli.all_commands()
    for name in commands:
        assert name in every, f"docs/deploy.md names `conveyor {name}`"
    serve_flags = {opt for p in every["serve"].params for opt in p.opts}
    for flag in set(re.findall(r"`(--[a-z-]+)", page)) - {"--store", "--version", "--no-deps"}:
        assert flag in serve_flags, f"docs/deploy.md names serve's {flag}, which it lacks"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for extra in set(re.findall(r"`\[(\w+)\]`", page)) - {"default"}:  # a credentials section
        assert extra in extras["optional-dependencies"], f"no extra [{extra}]"
