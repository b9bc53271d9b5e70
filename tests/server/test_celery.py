"""Celery with Conveyor as its SQS broker: a real worker process (kombu's SQS transport)
runs tasks sent through the server, retries one with a countdown (a delayed message), and
leaves the queue empty."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conveyor import Client

from ..support.live import LiveServer

APP = """
import os
from celery import Celery

app = Celery("tasks", broker=os.environ["BROKER"])
app.conf.broker_transport_options = {
    "region": "us-east-1", "is_secure": False, "visibility_timeout": 60,
    "polling_interval": 0.2, "wait_time_seconds": 1,
}
app.conf.task_default_queue = os.environ["QUEUE"]
OUT = os.environ["OUT"]


def note(line):
    with open(OUT, "a") as f:
        f.write(line + "\\n")


@app.task
def add(x, y):
    note(f"add {x + y}")


@app.task(bind=True, max_retries=3)
def flaky(self):
    note(f"flaky try {self.request.retries}")
    if self.request.retries == 0:
        raise self.retry(countdown=1)
    note("flaky done")
"""


def test_a_celery_worker_runs_tasks_sent_through_conveyor(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    (tmp_path / "tasks.py").write_text(APP)
    with (
        Client(f"sqlite:///{tmp_path / 'broker.db'}?durability=normal") as client,
        LiveServer(client) as live,
    ):
        env = {
            **os.environ,
            "BROKER": f"sqs://local:local@127.0.0.1:{live.port}",
            "QUEUE": "celery-jobs",
            "OUT": str(out),
            "PYTHONPATH": str(tmp_path),
        }
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tasks", "worker", "--pool=solo",
             "--without-heartbeat", "--without-mingle", "--without-gossip",
             "--loglevel=INFO"],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            sender = subprocess.run(
                [sys.executable, "-c",
                 "from tasks import add, flaky\n"
                 "for i in range(20): add.delay(i, 100)\n"
                 "flaky.delay()\n"],
                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert sender.returncode == 0, sender.stderr
            deadline = time.monotonic() + 60
            want = sorted([f"add {100 + i}" for i in range(20)] + ["flaky done"])
            done: list[str] = []
            while time.monotonic() < deadline:
                lines = out.read_text().splitlines() if out.exists() else []
                done = sorted(x for x in lines if not x.startswith("flaky try"))
                if len(done) >= len(want):
                    break
                time.sleep(0.2)
            assert done == want  # each task once
            assert out.read_text().splitlines().count("flaky try 0") == 1
            assert "flaky try 1" in out.read_text().splitlines()
            deadline = time.monotonic() + 10
            while (stats := client.queue("celery-jobs").stats()).in_flight:
                assert time.monotonic() < deadline, stats  # every task deleted once run
                time.sleep(0.1)
            assert stats.ready == 0 and stats.delayed == 0
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                log, _ = worker.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
                log, _ = worker.communicate()
        assert b"Traceback" not in log, log.decode(errors="replace")[-3000:]
