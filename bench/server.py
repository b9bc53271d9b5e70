"""SQS API benchmark: ``python -m bench.server [--quick] [--messages N] [--store URL ...]``.

Starts `conveyor serve` on a fresh SQLite file (default durability) and moto's server
(``moto_server``, the usual local SQS stand-in) on loopback, then drives each with boto3
from client processes: SendMessageBatch (10 per call), then ReceiveMessage (10) +
DeleteMessageBatch until the queue is empty. Prints msgs/s and per-call p50/p99 (ms) per
phase, Conveyor's ratio to moto, and Conveyor's long-poll wake-up latency.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import boto3
import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))] * 1000


def start(kind: str, tmp: Path, store: str = "") -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    bindir = Path(sys.executable).parent
    if kind == "conveyor":
        url = store.replace("TMP", str(tmp)) or f"sqlite:///{tmp}/bench.db"
        cmd = [str(bindir / "conveyor"), "serve", "--store", url, "--port", str(port)]
    else:
        moto = shutil.which("moto_server", path=str(bindir)) or "moto_server"
        cmd = [moto, "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url + ("/healthz" if kind == "conveyor" else "/moto-api/"), timeout=1)
            return proc, url
        except httpx.HTTPError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"{kind} server did not start") from None
            time.sleep(0.1)


def sender(url: str, queue_url: str, calls: int, body: str, out: Any) -> None:
    client = sqs(url)
    lat = []
    entries = [{"Id": str(i), "MessageBody": body} for i in range(10)]
    for _ in range(calls):
        t0 = time.perf_counter()
        client.send_message_batch(QueueUrl=queue_url, Entries=entries)
        lat.append(time.perf_counter() - t0)
    out.put(lat)


def drainer(url: str, queue_url: str, total: int, done: Any, out: Any) -> None:
    client = sqs(url)
    recv_lat, del_lat = [], []
    empty = 0
    while done.value < total and empty < 50:
        t0 = time.perf_counter()
        got = client.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", [])
        recv_lat.append(time.perf_counter() - t0)
        if not got:
            empty += 1
            continue
        empty = 0
        t0 = time.perf_counter()
        client.delete_message_batch(
            QueueUrl=queue_url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)
            ],
        )
        del_lat.append(time.perf_counter() - t0)
        with done.get_lock():
            done.value += len(got)
    out.put((recv_lat, del_lat))


def cycler(url: str, queue_url: str, rounds: int, body: str, out: Any) -> None:
    """Send 10, receive up to 10, delete them: the queue stays shallow."""
    client = sqs(url)
    lat = []
    entries = [{"Id": str(i), "MessageBody": body} for i in range(10)]
    moved = 0
    for _ in range(rounds):
        t0 = time.perf_counter()
        client.send_message_batch(QueueUrl=queue_url, Entries=entries)
        got = client.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", [])
        if got:
            client.delete_message_batch(
                QueueUrl=queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)
                ],
            )
        moved += len(got)
        lat.append(time.perf_counter() - t0)
    out.put((moved, lat))


def run_phase(target: Any, args_list: list[tuple[Any, ...]]) -> tuple[float, list[Any]]:
    out: Any = mp.Queue()
    procs = [mp.Process(target=target, args=(*a, out)) for a in args_list]
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return time.perf_counter() - t0, results


def measure(kind: str, url: str, messages: int, clients: int) -> dict[str, Any]:
    client = sqs(url)
    queue_url = client.create_queue(QueueName=f"bench-{kind}")["QueueUrl"]
    calls = messages // 10 // clients
    sent = calls * 10 * clients
    body = "x" * 100
    secs, lats = run_phase(sender, [(url, queue_url, calls, body)] * clients)
    send_lat = [x for lat in lats for x in lat]
    done: Any = mp.Value("i", 0)
    dsecs, results = run_phase(drainer, [(url, queue_url, sent, done)] * clients)
    recv_lat = [x for r, _ in results for x in r]
    del_lat = [x for _, d in results for x in d]
    shallow = client.create_queue(QueueName=f"bench-{kind}-shallow")["QueueUrl"]
    rounds = max(10, calls // 2)
    csecs, cycles = run_phase(cycler, [(url, shallow, rounds, body)] * clients)
    cycle_lat = [x for _, lat in cycles for x in lat]
    moved = sum(n for n, _ in cycles)
    return {
        "cycle": (moved / csecs, pct(cycle_lat, 50), pct(cycle_lat, 99)),
        "sent": sent,
        "send": (sent / secs, pct(send_lat, 50), pct(send_lat, 99)),
        "drain": (
            done.value / dsecs,
            pct(recv_lat, 50),
            pct(recv_lat, 99),
            pct(del_lat, 50),
            pct(del_lat, 99),
        ),
        "drained": done.value,
        "total": (sent + done.value) / (secs + dsecs),
    }


def wake_latency(url: str, samples: int) -> list[float]:
    client, other = sqs(url), sqs(url)
    queue_url = client.create_queue(QueueName="bench-wake")["QueueUrl"]
    out: list[float] = []
    for _ in range(samples):
        got: dict[str, Any] = {}

        def poll(got: dict[str, Any] = got) -> None:
            r = other.receive_message(QueueUrl=queue_url, WaitTimeSeconds=5)
            got["at"] = time.perf_counter()
            got["r"] = r

        t = threading.Thread(target=poll)
        t.start()
        time.sleep(0.05)  # the poll is waiting on the server
        client.send_message(QueueUrl=queue_url, MessageBody="wake")
        sent_at = time.perf_counter()
        t.join()
        m = got["r"]["Messages"][0]
        client.delete_message(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"])
        # from the send's reply to the waiter's reply (the send's own round trip excluded)
        out.append(max(0.0, got["at"] - sent_at))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="600 messages")
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument(
        "--store",
        action="append",
        default=[],
        help="conveyor store URL (TMP = a temporary directory); repeat to compare stores."
        " Default: sqlite:///TMP/bench.db (durability full)",
    )
    args = parser.parse_args()
    messages = 600 if args.quick else args.messages
    print(f"# SQS API: boto3 from {args.clients} client processes, {messages:,} messages of 100 B")
    print(f"# {platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} CPUs")
    stores = args.store or ["sqlite:///TMP/bench.db"]
    targets = [
        (f"conveyor {i + 1}" if len(stores) > 1 else "conveyor", s) for i, s in enumerate(stores)
    ]
    targets.append(("moto", ""))
    results = {}
    wake: list[float] = []
    for kind, store in targets:
        with tempfile.TemporaryDirectory() as tmp:
            proc, url = start(kind.split()[0], Path(tmp), store)
            try:
                results[kind] = measure(kind.replace(" ", ""), url, messages, args.clients)
                if kind.startswith("conveyor") and not wake:
                    wake = wake_latency(url, 20 if args.quick else 100)
            finally:
                proc.terminate()
                proc.wait(30)
    for i, s in enumerate(stores):
        print(f"# conveyor {i + 1 if len(stores) > 1 else ''}: {s}")
    print()
    print(
        f"{'server':10} {'SendMessageBatch':>28}"
        f" {'ReceiveMessage + DeleteMessageBatch':>46} {'all':>9}"
    )
    print(
        f"{'':10} {'msgs/s':>10} {'p50':>8} {'p99':>8} {'msgs/s':>10} {'recv p50':>8} {'p99':>8}"
        f" {'del p50':>8} {'p99':>8} {'msgs/s':>9}"
    )
    for kind, r in results.items():
        s, d = r["send"], r["drain"]
        print(
            f"{kind:10} {s[0]:10,.0f} {s[1]:8.2f} {s[2]:8.2f} {d[0]:10,.0f} {d[1]:8.2f} {d[2]:8.2f}"
            f" {d[3]:8.2f} {d[4]:8.2f} {r['total']:9,.0f}"
        )
        if r["drained"] != r["sent"]:
            print(f"  ! {kind}: drained {r['drained']} of {r['sent']}")
    print()
    print("shallow queue (each client: SendMessageBatch 10, ReceiveMessage 10, DeleteMessageBatch)")
    print(f"{'server':10} {'msgs/s':>10} {'round p50':>10} {'p99':>8}")
    for kind, r in results.items():
        cy = r["cycle"]
        print(f"{kind:10} {cy[0]:10,.0f} {cy[1]:10.2f} {cy[2]:8.2f}")
    m = results["moto"]
    for kind in [k for k in results if k != "moto"]:
        c = results[kind]
        print(
            f"{kind} / moto: send {c['send'][0] / m['send'][0]:.1f}x, receive+delete "
            f"{c['drain'][0] / m['drain'][0]:.1f}x, all {c['total'] / m['total']:.1f}x,"
            f" shallow round trips {c['cycle'][0] / m['cycle'][0]:.1f}x (target >= 10x)"
        )
    print()
    print(
        f"long-poll wake-up (send reply to waiter reply): p50 {pct(wake, 50):.2f} ms,"
        f" p99 {pct(wake, 99):.2f} ms over {len(wake)} (target <= 10 ms)"
    )


if __name__ == "__main__":
    main()
