"""The SQS endpoint under load: ``python -m bench.server [--quick] [--sections ...]``.

Sections, each interleaving what it compares (rounds of every target in turn, medians):

- ``wrk``: wrk (16 connections, one thread) against `conveyor serve` on memory, SQLite at
  durability normal and full, and a trivial uvicorn endpoint (the floor): requests/s,
  messages/s, p50/p99 and the server's CPU per request, for SendMessageBatch (10 x 100 B),
  ReceiveMessage (10, VisibilityTimeout 0 on a queue of 10,000: every call claims ten) and
  DeleteMessageBatch (10 receipts each, gathered beforehand, each sent once).
- ``workers``: SendMessageBatch with ``--workers 1`` and ``2`` on SQLite, PostgreSQL and
  Redis, beside the trivial endpoint with 1 and 2 uvicorn workers (what the load generator,
  on the same two cores, leaves room for); then the same with each server process held to
  ``--cpu-per-worker`` CPUs by a cgroup (root only), so that the server, not wrk, is the
  limit.
- ``e2e``: boto3 in 1 producer + 4 consumer processes (SendMessageBatch 10; ReceiveMessage
  10 + DeleteMessageBatch) against Conveyor, LocalStack and moto: msgs/s, duplicates and
  losses, server CPU per message.
- ``wake``: how long a long poll waits for a send made in another process: two servers on
  one SQLite file, an SDK process sending to a server's SQLite file, two servers on one
  PostgreSQL database.

``--source DIR`` adds `conveyor serve` from another checkout (``DIR``; e.g. a worktree of
an earlier commit) to each section as "before" (in ``workers``, on SQLite). LocalStack runs
from a Python 3.13 venv of its own (``localstack-core[runtime]==2026.3.0``, made under
``--cache`` on first use).
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing as mp
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import httpx

from . import wrk
from .procs import cpu_seconds

PG = "postgresql://postgres@127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379/0"
PER_QUEUE = 1000  # messages per queue the DeleteMessageBatch receipts are gathered from
LOCALSTACK = "localstack-core[runtime]==2026.3.0"
LOCALSTACK_PINS = ["cbor2<6", "cryptography<45", "pyopenssl<25", "service_identity"]


def sqs(url: str) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
    )


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


# -- servers ------------------------------------------------------------------------------


@dataclass
class Target:
    """A server the bench starts: conveyor (this checkout or `source`), trivial, peers."""

    name: str
    start: Callable[[], wrk.Server]


def conveyor(name: str, store: str, source: str | None = None, workers: int = 1) -> Target:
    def start() -> wrk.Server:
        cmd = [sys.executable, "-m", "conveyor", "serve", "--store", store, "--port", "PORT"]
        if _has_option(source, "--log-level"):
            cmd += ["--log-level", "warning"]
        if workers > 1:
            cmd += ["--workers", str(workers)]
        # the other checkout first on the path: run from it (python -m puts the cwd first)
        env = {"PYTHONPATH": source} if source else None
        return wrk.start_server(name, cmd, "/healthz", env=env, cwd=source)

    return Target(name, start)


@functools.cache
def _has_option(source: str | None, option: str) -> bool:
    """Whether the checkout's command line has `option` (an older one, compared with, may
    not): looked for in its source."""
    if source is None:
        return True
    return any(f'"{option}"' in f.read_text() for f in Path(source, "conveyor").rglob("*.py"))


def trivial(workers: int = 1) -> Target:
    def start() -> wrk.Server:
        cmd = [sys.executable, "-m", "uvicorn", "bench.trivial:app", "--port", "PORT"]
        cmd += ["--http", "httptools", "--lifespan", "off", "--no-access-log"]
        cmd += ["--log-level", "warning"]
        if workers > 1:
            cmd += ["--workers", str(workers)]
        return wrk.start_server(f"trivial uvicorn x{workers}", cmd, "/")

    return Target(f"trivial uvicorn{'' if workers == 1 else f' x{workers}'}", start)


def moto() -> Target:
    def start() -> wrk.Server:
        exe = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or "moto_server"
        return wrk.start_server("moto", [exe, "-H", "127.0.0.1", "-p", "PORT"], "/moto-api/")

    return Target("moto", start)


def python313() -> str:
    """A Python 3.13 for LocalStack: pyenv's own (its `python3.13` shim runs only where pyenv
    has selected that version), else one on the PATH."""
    for found in sorted(Path.home().glob(".pyenv/versions/3.13*/bin/python3.13"), reverse=True):
        return str(found)
    found = shutil.which("python3.13")
    if found is None:
        raise RuntimeError("LocalStack needs Python 3.13 (pyenv install 3.13)")
    return found


def localstack(cache: Path, services: str = "sqs") -> Target:
    venv = cache / "localstack-venv"

    def start() -> wrk.Server:
        python = venv / "bin" / "python"
        if not python.exists():
            py313 = python313()
            print(f"# installing {LOCALSTACK} into {venv} (once)", file=sys.stderr, flush=True)
            subprocess.run([py313, "-m", "venv", str(venv)], check=True)
            subprocess.run(
                [str(python), "-m", "pip", "install", "-q", LOCALSTACK, *LOCALSTACK_PINS],
                check=True,
            )
        data = Path(tempfile.mkdtemp(prefix="localstack-"))
        env = {
            "GATEWAY_LISTEN": "127.0.0.1:PORT",
            "SERVICES": services,
            "LOCALSTACK_VOLUME_DIR": str(data / "volume"),
            "TMPDIR": str(data),
            "SKIP_SSL_CERT_DOWNLOAD": "1",
            "DISABLE_EVENTS": "1",
            "SQS_ENDPOINT_STRATEGY": "path",
        }
        port = wrk.free_port()
        env["GATEWAY_LISTEN"] = f"127.0.0.1:{port}"
        env["LOCALSTACK_HOST"] = f"127.0.0.1:{port}"  # the URLs it writes (SNS's SubscribeURL)
        proc = subprocess.Popen(
            [str(python), "-m", "localstack.runtime.main"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **env},
        )
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(url + "/_localstack/health", timeout=1).status_code == 200:
                    sqs(url).list_queues()
                    return wrk.Server("localstack", proc, url, scratch=data)
            except Exception:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                proc.wait()
                shutil.rmtree(data, ignore_errors=True)
                raise RuntimeError("LocalStack did not start")
            time.sleep(0.5)

    return Target("localstack", start)


def start_all(targets: list[Target]) -> list[wrk.Server]:
    """Start every target; if one cannot start, stop those already started."""
    servers: list[wrk.Server] = []
    try:
        for target in targets:
            servers.append(target.start())
    except BaseException:
        for server in servers:
            server.stop()
        raise
    return servers


# -- wrk ----------------------------------------------------------------------------------


def wrk_section(targets: list[Target], seconds: float, repeat: int) -> None:
    print(
        "\n## wrk: 16 connections, 1 thread; SendMessageBatch, ReceiveMessage, DeleteMessageBatch"
    )
    servers = start_all(targets)
    ops = ["SendMessageBatch", "ReceiveMessage", "DeleteMessageBatch"]
    results: dict[tuple[str, str], list[wrk.Result]] = {}
    try:
        for op in ops:
            for r in range(repeat):
                for server in servers:
                    results.setdefault((op, server.name), []).append(
                        run_op(server, op, r, seconds, results)
                    )
    finally:
        for server in servers:
            server.stop()
    floor = {op: statistics.median(x.rps for x in results[(op, servers[0].name)]) for op in ops}
    print(
        f"{'operation':19} {'server':26} {'req/s':>8} {'msgs/s':>8} {'p50 ms':>7} "
        f"{'p99 ms':>7} {'CPU us/req':>10} {'of floor':>8}"
    )
    for op in ops:
        for server in servers:
            runs = results[(op, server.name)]
            rps = statistics.median(x.rps for x in runs)
            msgs = 0 if server.name.startswith("trivial") else rps * 10
            errors = sum(x.errors for x in runs)
            print(
                f"{op:19} {server.name:26} {rps:8,.0f} {msgs:8,.0f}"
                f" {statistics.median(x.p50 for x in runs):7.2f}"
                f" {statistics.median(x.p99 for x in runs):7.2f}"
                f" {statistics.median(x.cpu_per_request_us for x in runs):10,.0f}"
                f" {rps / floor[op]:8.1%}" + (f"  ({errors} errors)" if errors else "")
            )


def run_op(
    server: wrk.Server,
    op: str,
    round_: int,
    seconds: float,
    results: dict[tuple[str, str], list[wrk.Result]],
) -> wrk.Result:
    """One round of `op` against `server`. The queues a round makes are deleted after it: a
    server's later rounds do not carry the messages its earlier ones left (on the memory
    store the faster server would carry more, and its garbage collector walk them)."""
    if server.name.startswith("trivial"):
        return wrk.run(server, op, body="{}", seconds=seconds)
    queue = wrk.create(server.url, f"b-{op[:4].lower()}-{round_}")
    queues = [queue]
    try:
        if op == "SendMessageBatch":
            return wrk.run(server, op, body=wrk.send_body(queue), seconds=seconds)
        if op == "ReceiveMessage":
            wrk.fill(server.url, queue, 10_000)
            body = wrk.receive_body(queue).replace(
                '"VisibilityTimeout": 600', '"VisibilityTimeout": 0'
            )
            return wrk.run(server, op, body=body, seconds=seconds)
        return _run_deletes(server, queues, round_, seconds, results)
    finally:
        for q in queues:
            wrk.delete(server.url, q)


def _run_deletes(
    server: wrk.Server,
    queues: list[str],
    round_: int,
    seconds: float,
    results: dict[tuple[str, str], list[wrk.Result]],
) -> wrk.Result:
    """DeleteMessageBatch of receipts gathered first from `queues` (the round's first queue,
    and the queues added to it)."""
    op = "DeleteMessageBatch"
    sent = results.get(("SendMessageBatch", server.name))
    rate = statistics.median(x.rps for x in sent) if sent else 3000.0
    batches = int(rate * 1.5 * seconds) + 200
    # receipts from many queues of at most PER_QUEUE messages: a receive walks past the
    # messages in flight at the head of its queue, so one queue holding them all would make
    # gathering them quadratic
    spread = max(1, batches * 10 // PER_QUEUE)
    queues.extend(wrk.create(server.url, f"b-dele-{round_}-{i}") for i in range(1, spread))
    per = batches // spread + 1

    def gather(q: str) -> list[str]:
        wrk.fill(server.url, q, per * 10, threads=2)
        return wrk.receipts(server.url, q, per, threads=2)

    with ThreadPoolExecutor(4) as pool:
        gathered = list(pool.map(gather, queues))
    bodies = [b for group in zip(*gathered, strict=False) for b in group]
    return wrk.run(server, op, bodies=bodies, seconds=seconds)


def workers_section(source: str | None, seconds: float, repeat: int, cpu_per_worker: float) -> None:
    print("\n## --workers: SendMessageBatch under wrk, 1 and 2 server processes")
    limited = wrk.CpuLimit.available()
    libraries = sqlstores().redis_libraries()  # the Redis servers load one; dropped after
    with tempfile.TemporaryDirectory() as tmp:
        prefix = f"benchw{secrets.token_hex(3)}_"
        stores = [
            ("sqlite normal", lambda n: f"sqlite:///{tmp}/w{n}.db?durability=normal"),
            ("postgres", lambda n: f"{PG}?prefix={prefix}{n}_"),
            ("redis", lambda n: f"{REDIS}?prefix={prefix}r{n}"),
        ]
        groups = [("trivial", [trivial(1), trivial(2)], None)]
        runs: list[tuple[str, float | None]] = [("", None)]
        if limited is None:
            runs.append((" limited", cpu_per_worker))
        for suffix, cores in runs:
            for label, url in stores:
                targets = [conveyor(f"{label} x{n}", url(n), workers=n) for n in (1, 2)]
                groups.append((label + suffix, targets, cores))
            if source:  # the store whose workers share one lock, from the other checkout
                targets = [
                    conveyor(
                        f"before sqlite x{n}",
                        f"sqlite:///{tmp}/before{n}{suffix.strip()}.db?durability=normal",
                        source,
                        workers=n,
                    )
                    for n in (1, 2)
                ]
                groups.append(("before sqlite normal" + suffix, targets, cores))
        rows = []
        try:
            for label, targets, cores in groups:
                results: dict[str, list[wrk.Result]] = {}
                for r in range(repeat):
                    for n, target in enumerate(targets, start=1):
                        server = target.start()
                        try:
                            if cores is None:
                                result = run_op(server, "SendMessageBatch", r, seconds, {})
                            else:
                                name = f"conveyor-bench-{os.getpid()}-{n}"
                                with wrk.CpuLimit(name, cores * n) as limit:
                                    limit.hold(server.proc.pid)
                                    result = run_op(server, "SendMessageBatch", r, seconds, {})
                        finally:
                            server.stop()
                        results.setdefault(target.name, []).append(result)
                # the median run by requests/s, and the worst p99 of every run
                medians = [sorted(v, key=lambda x: x.rps)[len(v) // 2] for v in results.values()]
                p99s = [max(x.p99 for x in v) for v in results.values()]
                rows.append((label, medians[0].rps, medians[1].rps, p99s[0], p99s[1]))
        finally:
            for n in (1, 2):
                drop(f"{PG}?prefix={prefix}{n}_")
                drop(f"{REDIS}?prefix={prefix}r{n}")
            sqlstores().drop_redis_libraries(libraries)
    print(
        f"{'server':30} {'x1 req/s':>9} {'x2 req/s':>9} {'x2 / x1':>8}"
        f" {'x1 p99 ms':>10} {'x2 p99 ms':>10}"
    )
    for label, one, two, p99_one, p99_two in rows:
        print(
            f"{label:30} {one:9,.0f} {two:9,.0f} {two / one:8.2f} {p99_one:10.1f} {p99_two:10.1f}"
        )
    print("# req/s: the median run; p99: the worst of the runs")
    if limited is None:
        print(
            f"# limited: each server process held to {cpu_per_worker:g} CPU (a cgroup's CFS"
            " quota; x2 gets twice the CPU of x1), so wrk, on the same two cores, is not the"
            " limit"
        )
    else:
        print(f"# no runs with CPU limits ({limited})")


def sqlstores() -> Any:
    """tests.support.sqlstores, which makes and drops the stores of the shared database servers."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import tests.support.sqlstores

    return tests.support.sqlstores


def drop(url: str) -> None:
    try:
        sqlstores().drop(url)
    except Exception as exc:  # the bench goes on; say so
        print(f"# could not drop {url}: {exc}", file=sys.stderr)


# -- end to end with boto3 ----------------------------------------------------------------


def producer(url: str, queue_url: str, n: int, out: Any) -> None:
    client = sqs(url)
    for start in range(0, n, 10):
        entries = [
            {"Id": str(i), "MessageBody": f"{start + i:08d}" + "x" * 92}
            for i in range(min(10, n - start))
        ]
        client.send_message_batch(QueueUrl=queue_url, Entries=entries)
    out.put(("producer", []))


def consumer(url: str, queue_url: str, n: int, done: Any, out: Any) -> None:
    client = sqs(url)
    seen: list[int] = []
    idle = 0
    while done.value < n and idle < 40:
        got = client.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1
        ).get("Messages", [])
        if not got:
            idle += 1
            continue
        idle = 0
        client.delete_message_batch(
            QueueUrl=queue_url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)
            ],
        )
        seen += [int(m["Body"][:8]) for m in got]
        with done.get_lock():
            done.value += len(got)
    out.put(("consumer", seen))


def e2e_once(server: wrk.Server, n: int) -> tuple[float, int, int, float]:
    """msgs/s, duplicates, losses, server CPU us per message."""
    client = sqs(server.url)
    queue_url = client.create_queue(
        QueueName=f"e2e-{secrets.token_hex(3)}", Attributes={"VisibilityTimeout": "60"}
    )["QueueUrl"]
    out: Any = mp.Queue()
    done: Any = mp.Value("i", 0)
    procs = [mp.Process(target=producer, args=(server.url, queue_url, n, out))]
    procs += [
        mp.Process(target=consumer, args=(server.url, queue_url, n, done, out)) for _ in range(4)
    ]
    cpu0 = cpu_seconds(server.proc.pid)
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    secs = time.perf_counter() - t0
    cpu = cpu_seconds(server.proc.pid) - cpu0
    for p in procs:
        p.join()
    seen = [x for kind, got in results if kind == "consumer" for x in got]
    dups = len(seen) - len(set(seen))
    lost = n - len(set(seen))
    return len(set(seen)) / secs, dups, lost, cpu / n * 1e6


def e2e_section(targets: list[Target], messages: int, repeat: int) -> None:
    print(f"\n## end to end: boto3, 1 producer + 4 consumers, {messages:,} messages of 100 B")
    rows: dict[str, list[tuple[float, int, int, float]]] = {}
    servers = start_all(targets)
    try:
        for _ in range(repeat):
            for server in servers:
                rows.setdefault(server.name, []).append(e2e_once(server, messages))
    finally:
        for server in servers:
            server.stop()
    base = {name: statistics.median(r[3] for r in runs) for name, runs in rows.items()}.get(
        "localstack"
    )
    print(
        f"{'server':26} {'msgs/s':>8} {'dups':>5} {'lost':>5} {'CPU us/msg':>11}"
        f" {'of LocalStack':>14}"
    )
    for name, runs in rows.items():
        cpu = statistics.median(r[3] for r in runs)
        share = f"{cpu / base:14.1%}" if base else f"{'-':>14}"
        print(
            f"{name:26} {statistics.median(r[0] for r in runs):8,.0f}"
            f" {sum(r[1] for r in runs):5} {sum(r[2] for r in runs):5} {cpu:11,.0f} {share}"
        )


# -- wake-ups across processes ------------------------------------------------------------


def wake_samples(
    send: Callable[[str], None], waiter_url: str, queue: str, samples: int
) -> list[float]:
    """Seconds from a send's return to the reply of a long poll waiting on another server."""
    waiter = sqs(waiter_url)
    queue_url = waiter.get_queue_url(QueueName=queue)["QueueUrl"]
    out: list[float] = []
    for _ in range(samples):
        got: dict[str, Any] = {}

        def poll(into: dict[str, Any] = got) -> None:
            r = waiter.receive_message(QueueUrl=queue_url, WaitTimeSeconds=10)
            into["at"] = time.perf_counter()
            into["r"] = r

        t = threading.Thread(target=poll)
        t.start()
        time.sleep(0.1)  # the poll waits on its server
        send(queue)
        sent = time.perf_counter()
        t.join()
        for m in got["r"].get("Messages", []):
            waiter.delete_message(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"])
        out.append(max(0.0, got["at"] - sent))
    return out


def wake_section(source: str | None, samples: int) -> None:
    print(f"\n## wake-up across processes: send -> a long poll on another server ({samples} each)")
    from conveyor import Client

    sources: list[tuple[str, str | None]] = [("this", None)]
    if source:
        sources.append(("before", source))
    rows = []
    for label, src in sources:
        with tempfile.TemporaryDirectory() as tmp:
            db = f"sqlite:///{tmp}/wake.db"
            # the queue made by the server's own code: an earlier checkout refuses a store
            # whose schema is newer than its own
            a = conveyor("a", db, src).start()
            b = conveyor("b", db, src).start()
            try:
                sender = sqs(a.url)
                url = sender.create_queue(QueueName="wake")["QueueUrl"]

                def via_server(q: str, client: Any = sender, url: str = url) -> None:
                    client.send_message(QueueUrl=url, MessageBody="wake")

                rows.append(
                    (label, "sqlite: two servers", wake_samples(via_server, b.url, "wake", samples))
                )
                if src is None:  # (the SDK here is this checkout's: it would upgrade the file)
                    with Client(db) as sdk:

                        def via_sdk(q: str, client: Client = sdk) -> None:
                            client.queue(q).send("wake")

                        rows.append(
                            (
                                label,
                                "sqlite: SDK -> server",
                                wake_samples(via_sdk, b.url, "wake", samples),
                            )
                        )
            finally:
                a.stop()
                b.stop()
        prefix = f"benchwake{secrets.token_hex(3)}_"
        pg = f"{PG}?prefix={prefix}"
        try:
            a = conveyor("a", pg, src).start()
            b = conveyor("b", pg, src).start()
            try:
                sender = sqs(a.url)
                url = sender.create_queue(QueueName="wake")["QueueUrl"]

                def via_pg(q: str, client: Any = sender, url: str = url) -> None:
                    client.send_message(QueueUrl=url, MessageBody="wake")

                wake_samples(via_pg, b.url, "wake", 3)  # the first sends learn who listens
                time.sleep(1.2)
                rows.append(
                    (label, "postgres: two servers", wake_samples(via_pg, b.url, "wake", samples))
                )
            finally:
                a.stop()
                b.stop()
        finally:
            drop(pg)
    print(f"{'code':7} {'path':24} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7}")
    for label, path, values in rows:
        print(
            f"{label:7} {path:24} {pct(values, 50) * 1000:7.1f} {pct(values, 99) * 1000:7.1f}"
            f" {max(values) * 1000:7.1f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.server", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="short runs (a smoke test)")
    ap.add_argument("--sections", default="wrk,workers,e2e,wake")
    ap.add_argument("--source", help="a checkout of Conveyor to compare with ('before')")
    ap.add_argument("--seconds", type=float, default=5.0, help="per wrk run")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--stores",
        default="",
        help="the wrk section's stores, comma-separated (memory, sqlite normal, sqlite full;"
        " default all)",
    )
    ap.add_argument("--messages", type=int, default=5000, help="per end-to-end run")
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "conveyor-bench"))
    ap.add_argument(
        "--cpu-per-worker",
        type=float,
        default=0.4,
        help="CPUs each server process may use in the workers section's limited runs",
    )
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.repeat, args.messages = 2.0, 1, 1000
    sections = args.sections.split(",")
    source = os.path.abspath(args.source) if args.source else None
    print(
        f"# SQS endpoint under load — {platform.platform()}, Python {platform.python_version()},"
        f" {os.cpu_count()} CPUs"
    )
    with tempfile.TemporaryDirectory() as tmp:
        if "wrk" in sections:
            wrk.ensure_wrk()
            stores = {  # a store's URL by the file its server may use
                "memory": lambda db: "memory://",
                "sqlite normal": lambda db: f"sqlite:///{tmp}/{db}.db?durability=normal",
                "sqlite full": lambda db: f"sqlite:///{tmp}/{db}.db",
            }
            chosen = [s.strip() for s in args.stores.split(",")] if args.stores else list(stores)
            unknown = sorted(set(chosen) - set(stores))
            if unknown:
                ap.error(f"--stores: unknown {', '.join(unknown)}; choose from {', '.join(stores)}")
            sides = [("conveyor", None), ("before", source)] if source else [("conveyor", None)]
            targets = [trivial()] + [
                conveyor(f"{side} {s}", stores[s](f"{side}-{s.replace(' ', '-')}"), checkout)
                for side, checkout in sides
                for s in chosen
            ]
            wrk_section(targets, args.seconds, args.repeat)
        if "workers" in sections:
            workers_section(source, args.seconds, args.repeat, args.cpu_per_worker)
        if "e2e" in sections:
            targets = [
                conveyor("conveyor sqlite normal", f"sqlite:///{tmp}/e.db?durability=normal"),
                conveyor("conveyor sqlite full", f"sqlite:///{tmp}/ef.db"),
                localstack(Path(args.cache)),
                moto(),
            ]
            if source:
                targets.insert(
                    2,
                    conveyor(
                        "before sqlite normal", f"sqlite:///{tmp}/be.db?durability=normal", source
                    ),
                )
            e2e_section(targets, args.messages, args.repeat)
        if "wake" in sections:
            wake_section(source, 10 if args.quick else 100)


if __name__ == "__main__":
    main()
