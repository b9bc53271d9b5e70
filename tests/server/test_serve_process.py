"""`conveyor serve` as a real process: startup log, idle long polls, SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from ..conftest import unavailable
from ..support import sqlstores
from ..support.waiting import free_port, logged, logged_line

pytestmark = pytest.mark.slow

SERVING = re.compile(r"conveyor serving http://127\.0\.0\.1:(\d+) ")
HEADERS = {"X-Amz-Target": "AmazonSQS.ReceiveMessage", "Content-Type": "application/x-amz-json-1.0"}


class ServeProcess:
    """`conveyor serve` on a port of its own choosing (`--port 0`), read from its first log
    line: no other process can take the port between its choice and the server's bind."""

    def __init__(self, tmp: Path, store: str | None = None) -> None:
        self.log = tmp / "serve.log"
        conveyor = Path(sys.executable).parent / "conveyor"
        store = store or f"sqlite:///{tmp}/c.db"
        self.proc = logged([str(conveyor), "serve", "--store", store, "--port", "0"], self.log)
        deadline = time.monotonic() + 20
        while True:  # its port logged, then its health answered there
            if found := SERVING.search(self.log.read_text()):
                self.port = int(found[1])
                self.url = f"http://127.0.0.1:{self.port}"
                with contextlib.suppress(httpx.HTTPError):
                    httpx.get(self.url + "/healthz").raise_for_status()
                    break
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise AssertionError("conveyor serve did not start:\n" + self.log.read_text())
            time.sleep(0.05)

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.proc.pid)

    def sqs(self) -> Any:
        """A boto3 SQS client of this server that does not retry: every error is seen."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "sqs", endpoint_url=self.url, region_name="us-east-1", aws_access_key_id="k",
            aws_secret_access_key="s", config=Config(retries={"max_attempts": 1}),
        )  # fmt: skip

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def cpu_seconds(pid: int) -> float:
    """User and system CPU a process has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[ServeProcess]:
    p = ServeProcess(tmp_path)
    yield p
    p.stop()


@pytest.fixture(params=["sqlite", "redis"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[ServeProcess, int]]:
    """A server on each store whose waiting is its own (SQLite, Redis), and the pid of a
    process whose idle CPU also counts (the Redis server; else the server itself)."""
    if request.param == "sqlite":
        p = ServeProcess(tmp_path)
        yield p, p.proc.pid
        p.stop()
        return
    why = sqlstores.reachable("redis")
    if why is not None:
        unavailable(why)
    url = sqlstores.fresh_url("redis")
    p = ServeProcess(tmp_path, url)
    try:
        pid = int(redis.Redis.from_url(url.split("?", 1)[0]).info("server")["process_id"])
        yield p, pid
    finally:
        p.stop()
        sqlstores.drop(url)


def create(url: str, name: str) -> str:
    r = httpx.post(
        url + "/",
        json={"QueueName": name},
        headers={**HEADERS, "X-Amz-Target": "AmazonSQS.CreateQueue"},
    )
    return str(r.json()["QueueUrl"])


async def long_polls(queue_url: str, n: int, wait: int) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=n + 10)
    async with httpx.AsyncClient(limits=limits, timeout=wait + 30) as http:
        body = {"QueueUrl": queue_url, "WaitTimeSeconds": wait}
        return await asyncio.gather(
            *(
                http.post(queue_url.rsplit("/", 2)[0] + "/", json=body, headers=HEADERS)
                for _ in range(n)
            )
        )


def waiting(metrics: httpx.Response) -> int:
    """The server's receives waiting in a long poll, from its /metrics."""
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in metrics.text.splitlines()
        if line.startswith("conveyor_receives_waiting{")
    )


def test_startup_log_and_sigterm_ends_long_polls(serve: ServeProcess) -> None:
    text = serve.log.read_text()
    assert f"http://127.0.0.1:{serve.port}" in text and "sqlite:///" in text
    queue_url = create(serve.url, "drain")

    async def scenario() -> tuple[list[httpx.Response], float]:
        polls = asyncio.create_task(long_polls(queue_url, 5, 20))
        async with httpx.AsyncClient() as http:  # until all five wait in the server
            deadline = time.monotonic() + 15
            while waiting(await http.get(serve.url + "/metrics")) < 5:
                assert time.monotonic() < deadline, "the long polls never began"
                await asyncio.sleep(0.05)
        started = time.monotonic()
        serve.proc.send_signal(signal.SIGTERM)
        return await polls, time.monotonic() - started

    responses, took = asyncio.run(scenario())
    assert serve.proc.wait(15) == 0
    assert all(r.status_code == 200 and r.json() == {} for r in responses)
    assert took < 5  # the long polls ended early instead of holding shutdown for 20 s
    assert "shutting down" in serve.log.read_text()


def test_500_idle_long_polls_cost_no_cpu_and_a_send_wakes_one(
    served: tuple[ServeProcess, int],
) -> None:
    serve, other = served
    queue_url = create(serve.url, "idle")
    body = {"QueueUrl": queue_url, "WaitTimeSeconds": 20}

    async def scenario() -> tuple[float, float, list[httpx.Response], int, list[httpx.Response]]:
        limits = httpx.Limits(max_connections=510)
        async with (
            httpx.AsyncClient(limits=limits, timeout=50) as poller,
            httpx.AsyncClient() as http,
        ):
            # the server's own idle cost first (uvicorn's tick, the dashboard's sampler:
            # each wake of a process costs this VM about a millisecond), with no poll
            await asyncio.sleep(0.5)
            start, before, before_other = time.monotonic(), serve.cpu_seconds(), cpu_seconds(other)
            await asyncio.sleep(3.0)
            took = time.monotonic() - start
            base_cpu = (serve.cpu_seconds() - before) / took
            base_other = (cpu_seconds(other) - before_other) / took
            # when each poll was sent: the server's 20 s begin after it, so a poll that
            # ends empty sooner was ended by something other than its wait running out
            sent = time.monotonic()
            ended: dict[asyncio.Task[httpx.Response], float] = {}
            polls = [
                asyncio.create_task(poller.post(serve.url + "/", json=body, headers=HEADERS))
                for _ in range(500)
            ]
            for poll in polls:
                poll.add_done_callback(lambda t: ended.setdefault(t, time.monotonic()))
            # all connected and waiting, as the server's own gauge says (accepting 500
            # connections takes a while on a busy machine), and the accepting done
            deadline = time.monotonic() + 15
            while waiting(await http.get(serve.url + "/metrics")) < 500:
                assert time.monotonic() < deadline, "500 long polls never all waited"
                await asyncio.sleep(0.2)
            await asyncio.sleep(0.5)
            start, before, before_other = time.monotonic(), serve.cpu_seconds(), cpu_seconds(other)
            await asyncio.sleep(3.0)
            took = time.monotonic() - start
            idle_cpu = (serve.cpu_seconds() - before) / took - base_cpu
            other_cpu = (cpu_seconds(other) - before_other) / took - base_other
            await http.post(
                serve.url + "/",
                json={"QueueUrl": queue_url, "MessageBody": "one"},
                headers={**HEADERS, "X-Amz-Target": "AmazonSQS.SendMessage"},
            )
            deadline = time.monotonic() + 10
            pending = set(polls)
            while time.monotonic() < deadline and not any(has_messages(t) for t in ended):
                _, pending = await asyncio.wait(
                    pending, timeout=deadline - time.monotonic(),
                    return_when=asyncio.FIRST_COMPLETED,
                )  # fmt: skip
            # a poll the send woke in vain would answer now, empty and early
            await asyncio.sleep(0.5)
            woken = [t.result() for t in polls if has_messages(t)]
            # on a loaded machine the first polls may reach their 20 s by now: those end
            # empty, as they should; any other empty answer is a poll the send ended
            early = [t for t, at in ended.items() if not has_messages(t) and at - sent < 20]
            # SIGTERM ends the other long polls now, each answered (empty) before the end
            serve.proc.send_signal(signal.SIGTERM)
            return idle_cpu, other_cpu, woken, len(early), list(await asyncio.gather(*polls))

    def has_messages(poll: asyncio.Task[httpx.Response]) -> bool:
        return poll.done() and bool(poll.result().json().get("Messages"))

    idle_cpu, other_cpu, woken, early, responses = asyncio.run(scenario())
    # what the waiting polls add to the idle server
    assert idle_cpu < 0.05, f"500 idle long polls used {idle_cpu:.1%} more of a core"
    assert other_cpu < 0.05, f"500 idle long polls used {other_cpu:.1%} more of the store's core"
    assert [r.json()["Messages"][0]["Body"] for r in woken] == ["one"]
    assert early == 0, f"{early} polls the send did not answer ended empty before their 20 s"
    got = [r.json()["Messages"][0]["Body"] for r in responses if r.json().get("Messages")]
    assert got == ["one"]
    assert all(r.status_code == 200 for r in responses)
    assert serve.proc.wait(15) == 0


def test_a_port_in_use_is_said_first_and_the_store_path_is_absolute(tmp_path: Path) -> None:
    import socket

    taken = socket.create_server(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "conveyor", "--store", "sqlite:///./here.db", "serve",
             "--port", str(port)],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
        )  # fmt: skip
    finally:
        taken.close()
    assert proc.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr and "in use" in proc.stderr
    assert "serving" not in proc.stderr
    assert not (tmp_path / "here.db").exists(), "nothing is opened before the port is ours"
    free = free_port()
    server = logged(
        [sys.executable, "-m", "conveyor", "--store", "sqlite:///./here.db", "serve",
         "--port", str(free)],
        tmp_path / "serve.log", cwd=tmp_path,
    )  # fmt: skip
    try:
        line = logged_line(server, tmp_path / "serve.log", "serving")
        assert f"on store sqlite:///{tmp_path.resolve() / 'here.db'}" in line
    finally:
        server.terminate()
        server.wait(30)


def test_connections_to_the_listening_socket_have_nagle_off() -> None:
    """Answers are written in parts (headers, body): with Nagle's algorithm on, each waits
    for the client's delayed ACK, 40 ms a request."""
    import socket

    from conveyor.server import listen

    sock = listen("127.0.0.1", 0)
    seen: asyncio.Queue[int] = asyncio.Queue()

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            conn = transport.get_extra_info("socket")
            seen.put_nowait(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    async def scenario() -> int:
        server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
            nodelay = await asyncio.wait_for(seen.get(), 10)
            writer.close()
            return nodelay

    assert asyncio.run(scenario()) == 1


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def test_workers_share_the_port_and_the_store_and_stop_together(tmp_path: Path) -> None:
    import boto3

    port = free_port()
    log = tmp_path / "serve.log"
    server = logged(
        [sys.executable, "-m", "conveyor", "serve", "--store", f"sqlite:///{tmp_path}/w.db",
         "--port", str(port), "--workers", "2"],
        log,
    )  # fmt: skip
    try:
        line = logged_line(server, log, "serving")
        assert "2 workers" in line
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while not (len(children(server.pid)) == 2 and healthy(url)):
            assert time.monotonic() < deadline, "the workers did not start"
            time.sleep(0.05)
        workers = children(server.pid)
        assert len(workers) == 2
        sqs = boto3.client(
            "sqs", endpoint_url=url, region_name="us-east-1",
            aws_access_key_id="k", aws_secret_access_key="s",
        )  # fmt: skip
        queue_url = sqs.create_queue(QueueName="jobs")["QueueUrl"]
        for i in range(20):  # each on a new connection, which the kernel gives either worker
            fresh = boto3.client(
                "sqs", endpoint_url=url, region_name="us-east-1",
                aws_access_key_id="k", aws_secret_access_key="s",
            )  # fmt: skip
            fresh.send_message(QueueUrl=queue_url, MessageBody=str(i))
        got: set[int] = set()
        while len(got) < 20:
            batch = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)
            assert batch.get("Messages"), f"only {sorted(got)} arrived"
            for m in batch["Messages"]:
                got.add(int(m["Body"]))
                sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"])
        assert got == set(range(20))
        server.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0
        assert not any(Path(f"/proc/{pid}").exists() for pid in workers)
    finally:
        server.kill()
        server.wait()


def healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz").status_code == 200
    except httpx.HTTPError:
        return False


def test_workers_need_a_shared_store() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "conveyor", "serve", "--store", "memory://", "--port", "0",
         "--workers", "2"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "--workers needs a store the processes share" in proc.stderr
