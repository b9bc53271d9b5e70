"""Many servers and workers on one database: `conveyor serve` processes and Worker processes
share a PostgreSQL (or MariaDB) store, messages go in through different servers, and every
one is processed, none lost and none delivered twice within its visibility timeout."""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from conveyor import Client

from .conftest import unavailable
from .support import sqlstores
from .support.waiting import free_port, logged

pytestmark = pytest.mark.slow

VISIBILITY = 60


class Cluster:
    """Server and worker processes on one store URL; logs in `tmp`."""

    def __init__(self, url: str, tmp: Path) -> None:
        self.url = url
        self.tmp = tmp
        self.servers: list[tuple[subprocess.Popen[bytes], str, Path]] = []
        self.workers: list[tuple[subprocess.Popen[bytes], Path, Path]] = []

    def serve(self, n: int) -> None:
        conveyor = Path(sys.executable).parent / "conveyor"
        for i in range(n):
            port = free_port()
            log = self.tmp / f"serve{i}.log"
            proc = logged([str(conveyor), "serve", "--store", self.url, "--port", str(port)], log)
            self.servers.append((proc, f"http://127.0.0.1:{port}", log))
        for proc, base, log in self.servers:
            deadline = time.monotonic() + 30
            while True:
                try:
                    httpx.get(base + "/healthz").raise_for_status()
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise AssertionError(f"server did not start:\n{log.read_text()}") from None
                    time.sleep(0.05)

    def work(self, n: int, queue: str) -> None:
        for i in range(n):
            out, log = self.tmp / f"worker{i}.out", self.tmp / f"worker{i}.log"
            proc = logged(
                [sys.executable, "-m", "tests.support.procs", "record", self.url, queue, str(out)],
                log,
            )
            self.workers.append((proc, out, log))

    def sqs(self, i: int) -> Any:
        return boto3.client(
            "sqs",
            endpoint_url=self.servers[i][1],
            region_name="us-east-1",
            aws_access_key_id="cluster",
            aws_secret_access_key="cluster",
        )

    def deliveries(self) -> dict[str, list[tuple[int, float]]]:
        seen: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for _, out, _ in self.workers:
            if out.exists():
                for line in out.read_text().splitlines():
                    body, count, at = line.split()
                    seen[body].append((int(count), float(at)))
        return seen

    def stop_workers(self) -> list[int | None]:
        for proc, _, _ in self.workers:
            proc.send_signal(signal.SIGTERM)
        codes: list[int | None] = []
        for proc, _, _ in self.workers:
            try:
                codes.append(proc.wait(30))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes.append(None)
        return codes

    def close(self) -> None:
        for proc, *_ in [*self.servers, *self.workers]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def cluster_for(tmp_path: Path) -> Iterator[Any]:
    made: list[tuple[Cluster, str]] = []

    def make(kind: str, **options: str) -> Cluster:
        why = sqlstores.reachable(kind)
        if why is not None:
            unavailable(why)
        url = sqlstores.fresh_url(kind, **options)
        cluster = Cluster(url, tmp_path)
        made.append((cluster, url))
        return cluster

    yield make
    for cluster, url in made:
        cluster.close()
        sqlstores.drop(url)


def send_through(cluster: Cluster, server: int, queue: str, bodies: list[str]) -> list[str]:
    """SendMessageBatch through one server; the bodies the server acknowledged."""
    sqs = cluster.sqs(server)
    queue_url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
    acked: list[str] = []
    for i in range(0, len(bodies), 10):
        chunk = bodies[i : i + 10]
        r = sqs.send_message_batch(
            QueueUrl=queue_url,
            Entries=[{"Id": str(j), "MessageBody": b} for j, b in enumerate(chunk)],
        )
        assert not r.get("Failed"), r.get("Failed")
        acked += chunk
    return acked


def run_cluster(cluster: Cluster, servers: int, workers: int, total: int) -> None:
    with Client(cluster.url) as client:
        client.create_queue("jobs", visibility_timeout=VISIBILITY)
        client.create_queue("wake")
    cluster.serve(servers)
    cluster.work(workers, "jobs")

    # a long poll held by server 0 is woken by a send through server 1
    a, b = cluster.sqs(0), cluster.sqs(1)
    wake_url = a.get_queue_url(QueueName="wake")["QueueUrl"]
    got: list[float] = []
    poll = threading.Thread(
        target=lambda: got.append(
            len(a.receive_message(QueueUrl=wake_url, WaitTimeSeconds=20).get("Messages", []))
            and time.monotonic()
        )
    )
    poll.start()
    time.sleep(2.5)  # the poll is waiting, its store polls only every 30 s
    sent_at = time.monotonic()
    b.send_message(QueueUrl=b.get_queue_url(QueueName="wake")["QueueUrl"], MessageBody="w")
    poll.join(25)
    assert got and got[0], "the long poll on server 0 was not woken"
    assert got[0] - sent_at < 1.5

    bodies = [f"m{i}" for i in range(total)]
    shares = [bodies[i::servers] for i in range(servers)]
    acked: list[list[str]] = [[] for _ in range(servers)]
    senders = [
        threading.Thread(
            target=lambda i=i: acked[i].extend(send_through(cluster, i, "jobs", shares[i]))
        )
        for i in range(servers)
    ]
    for t in senders:
        t.start()
    for t in senders:
        t.join(600)
    assert sum(len(x) for x in acked) == total

    deadline = time.monotonic() + 600
    while len(cluster.deliveries()) < total and time.monotonic() < deadline:
        time.sleep(0.5)
    codes = cluster.stop_workers()
    seen = cluster.deliveries()
    assert set(seen) == set(bodies), (
        f"{total - len(set(seen) & set(bodies))} messages not processed"
    )
    for body, deliveries in seen.items():
        times = sorted(at for _, at in deliveries)
        for earlier, later in itertools.pairwise(times):
            assert later - earlier >= VISIBILITY * 0.99, f"{body} delivered twice at once"
    assert codes == [0] * workers, [log.read_text()[-2000:] for _, _, log in cluster.workers]
    with Client(cluster.url) as client:
        stats = client.queue("jobs").stats()
        assert stats.ready == stats.in_flight == 0


def test_postgres_three_servers_eight_workers(cluster_for: Any) -> None:
    # the servers' and workers' own polling is slowed down: wake-ups must come by NOTIFY
    cluster = cluster_for("postgres", poll_interval="30")
    run_cluster(cluster, servers=3, workers=8, total=20_000)


def test_mariadb_two_servers_three_workers(cluster_for: Any) -> None:
    cluster = cluster_for("mysql")
    run_cluster(cluster, servers=2, workers=3, total=5_000)
