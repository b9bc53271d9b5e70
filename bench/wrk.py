"""wrk against the SQS endpoint: requests/s, p50/p99 and server CPU per request.

Used by `bench.server`. wrk (Debian's package, installed here when missing and possible)
keeps 16 connections busy from one thread; each run posts one AWS JSON 1.0 action:
SendMessageBatch (10 x 100 B), ReceiveMessage (10, on a queue deep enough for the run) or
DeleteMessageBatch (10 receipts each, gathered beforehand, each sent once).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from . import procs

TARGET = "AmazonSQS."
JSON = "application/x-amz-json-1.0"
BODY = "x" * 100


CPU_CGROUP_V1 = Path("/sys/fs/cgroup/cpu")
CPU_CGROUP_V2 = Path("/sys/fs/cgroup")


def _cgroup_v1() -> bool:
    """Whether CPU limits go through cgroup v1's cpu hierarchy (else v2's unified one)."""
    return (CPU_CGROUP_V1 / "cpu.cfs_quota_us").exists()


class CpuLimit:
    """A CPU cgroup holding a server's processes to `cores` CPUs (a CFS quota), so that on
    a machine whose cores the load generator shares, the server and not the load generator
    is what a run measures. Needs root and a cgroup with the cpu controller (v1 or v2)."""

    def __init__(self, name: str, cores: float) -> None:
        self.cores = cores
        self.root = CPU_CGROUP_V1 if _cgroup_v1() else CPU_CGROUP_V2
        self.path = self.root / name

    @staticmethod
    def available() -> str | None:
        """None where limits can be set here, else why not."""
        if os.geteuid() != 0:
            return "not root"
        if _cgroup_v1():
            return None
        controllers = CPU_CGROUP_V2 / "cgroup.subtree_control"
        if controllers.exists() and "cpu" in controllers.read_text().split():
            return None
        return "no cgroup with the cpu controller"

    def __enter__(self) -> CpuLimit:
        self.path.mkdir(exist_ok=True)
        period = 100_000
        quota = int(self.cores * period)
        if self.root == CPU_CGROUP_V1:
            (self.path / "cpu.cfs_quota_us").write_text(str(quota))
        else:
            (self.path / "cpu.max").write_text(f"{quota} {period}")
        return self

    def hold(self, pid: int) -> None:
        for p in procs.tree(pid):
            (self.path / "cgroup.procs").write_text(str(p))

    def __exit__(self, *exc: object) -> None:
        for p in (self.path / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):  # gone meanwhile
                (self.root / "cgroup.procs").write_text(p)
        self.path.rmdir()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_wrk() -> str:
    found = shutil.which("wrk")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("# installing wrk (Debian's package)", flush=True)
        subprocess.run(["apt-get", "update", "-qq"], check=False, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], check=True, capture_output=True)
        found = shutil.which("wrk")
    if not found:
        raise SystemExit("wrk is not installed: apt-get install wrk")
    return found


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    url: str
    scratch: Path | None = None  # a directory of the server's, removed when it stops

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


def start_server(
    name: str,
    cmd: list[str],
    health: str,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> Server:
    port = free_port()
    cmd = [c.replace("PORT", str(port)) for c in cmd]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            httpx.get(url + health, timeout=1)
            return Server(name, proc, url)
        except httpx.HTTPError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError(f"{name} did not start: {' '.join(cmd)}") from None
            time.sleep(0.1)


def conveyor(name: str, store: str, workers: int = 1, python: str | None = None) -> Server:
    cmd = [
        python or sys.executable,
        "-m",
        "conveyor",
        "serve",
        "--store",
        store,
        "--port",
        "PORT",
        "--log-level",
        "warning",
    ]
    if workers > 1:
        cmd += ["--workers", str(workers)]
    return start_server(name, cmd, "/healthz")


def trivial() -> Server:
    return start_server("trivial uvicorn", [sys.executable, "-m", "bench.trivial", "PORT"], "/")


def create(url: str, name: str) -> str:
    with Connection(url) as conn:
        return str(conn.post("CreateQueue", json.dumps({"QueueName": name}).encode())["QueueUrl"])


def delete(url: str, queue_url: str) -> None:
    with Connection(url) as conn:
        conn.post("DeleteQueue", json.dumps({"QueueUrl": queue_url}).encode())


def send_body(queue_url: str) -> str:
    entries = [{"Id": str(i), "MessageBody": BODY} for i in range(10)]
    return json.dumps({"QueueUrl": queue_url, "Entries": entries})


def receive_body(queue_url: str) -> str:
    return json.dumps({"QueueUrl": queue_url, "MaxNumberOfMessages": 10, "VisibilityTimeout": 600})


class Connection:
    """One keep-alive connection posting AWS JSON 1.0 actions: `http.client` and bytes, as
    the bench's fills and receipt gathering send hundreds of thousands of requests, and
    httpx's own work per request made them last longer than the runs they prepare."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self.conn = http.client.HTTPConnection(
            parts.hostname or "127.0.0.1", parts.port, timeout=60
        )

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.close()

    def post(self, action: str, body: bytes) -> dict[str, Any]:
        self.conn.request(
            "POST", "/", body, {"X-Amz-Target": TARGET + action, "Content-Type": JSON}
        )
        r = self.conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"{action}: HTTP {r.status}: {data[:200]!r}")
        out: dict[str, Any] = json.loads(data)
        return out


def fill(url: str, queue_url: str, messages: int, threads: int = 8) -> None:
    """Put `messages` on a queue through the API (batches of 10, several connections)."""
    body = send_body(queue_url).encode()
    calls = messages // 10

    def work(n: int) -> None:
        with Connection(url) as conn:
            for _ in range(n):
                conn.post("SendMessageBatch", body)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, [calls // threads + (i < calls % threads) for i in range(threads)]))


def receipts(url: str, queue_url: str, batches: int, threads: int = 8) -> list[str]:
    """DeleteMessageBatch bodies, one per batch of 10 messages received from the queue."""

    body = receive_body(queue_url).encode()

    def work(n: int) -> list[str]:
        out: list[str] = []
        with Connection(url) as conn:
            while len(out) < n:
                got = conn.post("ReceiveMessage", body)
                msgs = got.get("Messages", [])
                if not msgs:
                    break
                entries = [
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)
                ]
                out.append(json.dumps({"QueueUrl": queue_url, "Entries": entries}))
        return out

    with ThreadPoolExecutor(threads) as pool:
        parts = pool.map(
            work, [batches // threads + (i < batches % threads) for i in range(threads)]
        )
        return [b for part in parts for b in part]


FIXED = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "{ctype}"
wrk.headers["X-Amz-Target"] = "{target}"
wrk.body = {body}
"""

CYCLE = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "{ctype}"
wrk.headers["X-Amz-Target"] = "{target}"
local bodies = {{}}
for line in io.lines("{path}") do bodies[#bodies + 1] = line end
local i = 0
wrapped = 0
request = function()
  i = i + 1
  if i > #bodies then i = 1; wrapped = wrapped + 1 end
  return wrk.format(nil, nil, nil, bodies[i])
end
"""


@dataclass
class Result:
    requests: int
    seconds: float
    p50: float  # ms
    p99: float
    cpu: float  # server CPU seconds over the run
    errors: int

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    @property
    def cpu_per_request_us(self) -> float:
        return self.cpu / max(self.requests, 1) * 1e6


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if m is None:
        return float("nan")
    value, unit = float(m.group(1)), m.group(2)
    return value * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def run(
    server: Server,
    action: str,
    *,
    body: str | None = None,
    bodies: list[str] | None = None,
    seconds: float = 5.0,
    connections: int = 16,
) -> Result:
    wrk = ensure_wrk()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "s.lua"
        if bodies is not None:
            path = Path(tmp) / "bodies.txt"
            path.write_text("\n".join(bodies) + "\n")
            script.write_text(CYCLE.format(ctype=JSON, target=TARGET + action, path=path))
        else:
            script.write_text(
                FIXED.format(ctype=JSON, target=TARGET + action, body=json.dumps(body or "{}"))
            )
        before = procs.cpu_seconds(server.proc.pid)
        out = subprocess.run(
            [
                wrk,
                "-t1",
                f"-c{connections}",
                f"-d{seconds:g}s",
                "--latency",
                "-s",
                str(script),
                server.url + "/",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        cpu = procs.cpu_seconds(server.proc.pid) - before
    m = re.search(r"(\d+) requests in ([\d.]+)(\w+)", out)
    if m is None:
        raise RuntimeError(f"wrk said: {out}")
    secs = float(m.group(2)) * {"s": 1.0, "ms": 0.001, "m": 60.0}.get(m.group(3), 1.0)
    lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)", out, re.M))
    errors = 0
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if bad:
        errors += int(bad.group(1))
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if sock:
        errors += sum(int(x) for x in sock.groups())
    return Result(
        requests=int(m.group(1)),
        seconds=secs,
        p50=_ms(lat.get("50", "")),
        p99=_ms(lat.get("99", "")),
        cpu=cpu,
        errors=errors,
    )
