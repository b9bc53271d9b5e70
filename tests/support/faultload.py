"""The workload of the fault tests: producers and consumers through several servers, each
operation recorded in a `History` with its outcome (tests/support/history.py), and the end of a run:
drained through the servers, what the queues still hold read directly, checked."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from conveyor import Client

from ..test_sql_cluster import Cluster
from .history import History, Refused, Report, check

VISIBILITY = 4
QUEUES = ("jobs", "jobs.fifo")


def make_queues(url: str) -> None:
    with Client(url) as client:
        for name in QUEUES:
            client.create_queue(name, visibility_timeout=VISIBILITY)


def sqs_client(base: str) -> Any:
    """One attempt per call (no retries that would hide an outcome), short timeouts."""
    return boto3.client(
        "sqs",
        endpoint_url=base,
        region_name="us-east-1",
        aws_access_key_id="faults",
        aws_secret_access_key="faults",
        config=Config(
            retries={"total_max_attempts": 1},
            connect_timeout=3,
            read_timeout=15,
            max_pool_connections=4,
        ),
    )


def call(fn: Callable[..., Any], **kwargs: Any) -> Any:
    """A 4xx says nothing was done (Refused); anything else unanswered stays unknown."""
    try:
        return fn(**kwargs)
    except ClientError as exc:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 500)
        if 400 <= status < 500:
            raise Refused(str(exc)) from None
        raise


class Workload:
    def __init__(self, servers: list[str], history: History) -> None:
        self.servers = servers
        self.history = history
        self.producing = threading.Event()
        self.producing.set()
        self.consuming = threading.Event()
        self.consuming.set()
        self.threads: list[threading.Thread] = []
        self.urls: dict[str, str] = {}

    def start(self) -> None:
        first = sqs_client(self.servers[0])
        for q in ("jobs", "jobs.fifo"):
            self.urls[q] = first.get_queue_url(QueueName=q)["QueueUrl"]
        for i in range(len(self.servers)):
            self._spawn(self.produce, i)
            self._spawn(self.produce_fifo, i)
            self._spawn(self.consume, i)

    def _spawn(self, fn: Callable[[int], None], i: int) -> None:
        t = threading.Thread(target=fn, args=(i,), daemon=True)
        t.start()
        self.threads.append(t)

    def produce(self, i: int) -> None:
        sqs = sqs_client(self.servers[i])
        for n in itertools.count():
            if not self.producing.is_set():
                return
            body = f"p{i}-{n}"
            with self.history.op(f"producer{i}", "send", body=body):
                call(sqs.send_message, QueueUrl=self.urls["jobs"], MessageBody=body)
            time.sleep(0.01)

    def produce_fifo(self, i: int) -> None:
        sqs = sqs_client(self.servers[i])
        group = f"g{i}"
        for n in itertools.count():
            if not self.producing.is_set():
                return
            body = f"{group}-{n}"
            with self.history.op(f"fifo{i}", "send", body=body, group=group, seq=n) as op:
                call(
                    sqs.send_message,
                    QueueUrl=self.urls["jobs.fifo"],
                    MessageBody=body,
                    MessageGroupId=group,
                    MessageDeduplicationId=body,
                )
            if op.outcome != "ok":  # an order is kept only among acknowledged sends
                return
            time.sleep(0.02)

    def consume(self, i: int) -> None:
        sqs = sqs_client(self.servers[(i + 1) % len(self.servers)])
        for n in itertools.count():
            if not self.consuming.is_set():
                return
            url = self.urls["jobs" if n % 2 else "jobs.fifo"]
            with self.history.op(f"consumer{i}", "receive") as op:
                got = call(
                    sqs.receive_message,
                    QueueUrl=url,
                    MaxNumberOfMessages=10,
                    WaitTimeSeconds=1,
                    VisibilityTimeout=VISIBILITY,
                )
                op.got = [
                    (m["Body"], m["MessageId"], m["ReceiptHandle"]) for m in got.get("Messages", [])
                ]
            for body, _, receipt in op.got:
                with self.history.op(f"consumer{i}", "delete", body=body, receipt=receipt):
                    call(sqs.delete_message, QueueUrl=url, ReceiptHandle=receipt)

    def stop(self) -> None:
        self.producing.clear()
        self.consuming.clear()
        for t in self.threads:
            t.join(30)


def finish(work: Workload, url: str, history: History) -> tuple[Report, list[tuple[str, str]]]:
    """Stop producing, let the consumers drain the queues (a message whose answer was lost
    comes back after its visibility timeout), then read what is left directly from the
    store at `url` and check the history against it."""
    work.producing.clear()
    with Client(url) as client:
        queues = [client.queue(name) for name in QUEUES]
        # as long as the consumers make headway (a backlog a long run built takes a while),
        # and a visibility timeout more for messages whose answers were lost
        left, moved = sum(q.stats().total for q in queues), time.monotonic()
        while left and time.monotonic() < moved + 10 + VISIBILITY:
            time.sleep(0.5)
            now_left = sum(q.stats().total for q in queues)
            if now_left < left:
                moved = time.monotonic()
            left = now_left
        work.stop()
        remaining = [(m.text, m.id) for q in queues for m in q.peek(10_000)]
    return check(history, remaining, VISIBILITY), remaining


@dataclass
class Run:
    history: History
    report: Report
    remaining: list[tuple[str, str]]
    logs: str  # the end of each server's log

    def show(self, name: str) -> None:
        print(f"\n{name}: ops {self.history.counts()}; {self.report.row()}")


def run(url: str, tmp_path: Path, faults: Callable[[], None], through: str | None = None) -> Run:
    """Three servers on the store at `url` (reached at `through`, a fault proxy, where
    given) and their clients; `faults()` runs while they work, then the queues are drained
    and the history checked."""
    make_queues(url)
    cluster = Cluster(through or url, tmp_path)
    history = History()
    try:
        cluster.serve(3)
        work = Workload([base for _, base, _ in cluster.servers], history)
        work.start()
        faults()
        report, remaining = finish(work, url, history)
    finally:
        logs = "\n".join(log.read_text()[-3000:] for _, _, log in cluster.servers)
        cluster.close()
    return Run(history, report, remaining, logs)
