"""SNS fan-out: ``python -m bench.sns [--quick] [--rounds N] [--source DIR] [--no-localstack]``.

A topic with 1, 10 and 100 SQS subscriptions (raw delivery), and one with 10 HTTP
subscriptions to a receiver on loopback, on `conveyor serve` over SQLite and over
PostgreSQL, beside LocalStack's SNS (``localstack-core``, as bench.server runs it), each in
turn in the same run. Four threads publish (boto3, one Publish a call); a consumer drains the
first subscribed queue (and every HTTP POST is counted). For each: publishes/s, and
publish-to-delivery: deliveries/s over every subscription (copies made, from the first
publish to the last copy seen) and the p50/p99 latency from a publish's call to its copy's
arrival (on the first queue, or at the receiver). ``--source`` adds another checkout's
server on each store ("before"), in turn with this one's.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import httpx

from . import wrk
from .server import PG, Target, drop, localstack, pct

PUBLISHERS = 4


def client(service: str, url: str) -> Any:
    return boto3.client(
        service,
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
    )


def conveyor(name: str, store: str, source: str | None = None) -> Target:
    def start() -> wrk.Server:
        cmd = [sys.executable, "-m", "conveyor", "serve", "--store", store, "--port", "PORT"]
        cmd += ["--log-level", "warning", "--sns-http-allow", "127.0.0.1"]
        # the other checkout first on the path: run from it (python -m puts the cwd first)
        env = {"PYTHONPATH": source} if source else None
        return wrk.start_server(name, cmd, "/healthz", env=env, cwd=source)

    return Target(name, start)


class Receiver:
    """An HTTP endpoint that confirms subscriptions and records each notification's
    latency (from the publish time in its message)."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.last = 0.0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                if body.get("Type") == "SubscriptionConfirmation":
                    url = body["SubscribeURL"]
                    threading.Thread(target=httpx.get, args=(url,), daemon=True).start()
                elif body.get("Type") == "Notification":
                    now = time.time()
                    with receiver.lock:
                        receiver.latencies.append(now - json.loads(body["Message"])["t"])
                        receiver.last = now

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def run_case(url: str, subscriptions: int, http: bool, total: int) -> dict[str, float]:
    sns, sqs = client("sns", url), client("sqs", url)
    tag = uuid.uuid4().hex[:8]
    topic = sns.create_topic(Name=f"bench-{tag}")["TopicArn"]
    receiver = Receiver() if http else None
    queues: list[str] = []
    if receiver is not None:
        for i in range(subscriptions):
            sns.subscribe(TopicArn=topic, Protocol="http", Endpoint=f"{receiver.url}{i}")
        deadline = time.monotonic() + 60
        while True:  # every subscription confirmed
            subs = sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
            if all(s["SubscriptionArn"] != "PendingConfirmation" for s in subs):
                break
            assert time.monotonic() < deadline, "the subscriptions were never confirmed"
            time.sleep(0.1)
    else:
        for i in range(subscriptions):
            q = sqs.create_queue(QueueName=f"bench-{tag}-{i}")["QueueUrl"]
            arn = sqs.get_queue_attributes(QueueUrl=q, AttributeNames=["QueueArn"])["Attributes"][
                "QueueArn"
            ]
            sns.subscribe(
                TopicArn=topic,
                Protocol="sqs",
                Endpoint=arn,
                Attributes={"RawMessageDelivery": "true"},
            )
            queues.append(q)
    latencies: list[float] = []
    seen = {"n": 0, "last": 0.0}
    done = threading.Event()

    def consume() -> None:
        c = client("sqs", url)
        while seen["n"] < total and not done.is_set():
            got = c.receive_message(QueueUrl=queues[0], MaxNumberOfMessages=10, WaitTimeSeconds=1)
            msgs = got.get("Messages", [])
            now = time.time()
            for m in msgs:
                latencies.append(now - json.loads(m["Body"])["t"])
            if msgs:
                seen["n"] += len(msgs)
                seen["last"] = now
                c.delete_message_batch(
                    QueueUrl=queues[0],
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                        for i, m in enumerate(msgs)
                    ],
                )

    consumer = None if http else threading.Thread(target=consume, daemon=True)
    if consumer is not None:
        consumer.start()

    def publish(n: int) -> None:
        c = client("sns", url)
        for _ in range(n):
            c.publish(TopicArn=topic, Message=json.dumps({"t": time.time()}))

    started = time.time()
    with ThreadPoolExecutor(PUBLISHERS) as pool:
        list(pool.map(publish, [total // PUBLISHERS] * PUBLISHERS))
    published = time.time() - started
    deadline = time.monotonic() + 120
    if receiver is not None:
        while len(receiver.latencies) < total * subscriptions and time.monotonic() < deadline:
            time.sleep(0.05)
        latencies, last, copies = receiver.latencies, receiver.last, len(receiver.latencies)
        receiver.close()
    else:
        assert consumer is not None
        consumer.join(120)
        done.set()
        last_queue = queues[-1]
        while time.monotonic() < deadline:  # the last subscription has its copies too
            attrs = sqs.get_queue_attributes(
                QueueUrl=last_queue, AttributeNames=["ApproximateNumberOfMessages"]
            )["Attributes"]
            if int(attrs["ApproximateNumberOfMessages"]) >= total or len(queues) == 1:
                break
            time.sleep(0.05)
        last = max(seen["last"], time.time() if len(queues) > 1 else seen["last"])
        copies = seen["n"] * subscriptions
    for q in queues:
        sqs.delete_queue(QueueUrl=q)
    sns.delete_topic(TopicArn=topic)
    return {
        "publish": total / published,
        "delivered": copies / max(last - started, 1e-9),
        "p50": pct(latencies, 50) * 1000,
        "p99": pct(latencies, 99) * 1000,
        "copies": copies,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer publishes")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "conveyor-bench"))
    ap.add_argument("--source", help="a checkout of Conveyor to compare with ('before')")
    ap.add_argument("--no-localstack", action="store_true", help="Conveyor's servers alone")
    args = ap.parse_args()
    total = 200 if args.quick else 1000
    cases = [(1, False), (10, False), (100, False), (10, True)]
    scratch = tempfile.mkdtemp(prefix="bench-sns-")
    tag = secrets.token_hex(3)
    source = os.path.abspath(args.source) if args.source else None
    sides = [("conveyor", None), ("before", source)] if source else [("conveyor", None)]
    targets: list[Target] = [
        conveyor(f"{side} {name}", store.format(side=side), checkout)
        for name, store in (
            ("sqlite", f"sqlite:///{scratch}/{{side}}-sns.db"),
            ("postgresql", PG + f"?prefix=bench_sns_{tag}_{{side}}_"),
        )
        for side, checkout in sides
    ]
    if not args.no_localstack:
        targets.append(localstack(Path(args.cache), services="sqs,sns"))
    results: dict[tuple[str, int, bool], list[dict[str, float]]] = {}
    try:
        for _ in range(args.rounds):
            for target in targets:
                server = target.start()
                try:
                    for subscriptions, http in cases:
                        n = total if subscriptions < 100 else total // 5
                        r = run_case(server.url, subscriptions, http, n)
                        results.setdefault((target.name, subscriptions, http), []).append(r)
                        print(f"# {target.name} {subscriptions} {'http' if http else 'sqs'}: {r}",
                              file=sys.stderr, flush=True)  # fmt: skip
                finally:
                    server.stop()
    finally:
        for side, _ in sides:
            drop(PG + f"?prefix=bench_sns_{tag}_{side}_")
        shutil.rmtree(scratch, ignore_errors=True)
    print(
        f"\n## SNS fan-out: {PUBLISHERS} publishing threads, {total} publishes"
        f" ({total // 5} with 100 subscriptions)\n"
    )
    print("| server | subscriptions | publishes/s | deliveries/s | p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|")
    for (name, subscriptions, http), runs in results.items():
        p, d, p50, p99 = (
            statistics.median(r[k] for r in runs) for k in ("publish", "delivered", "p50", "p99")
        )
        kind = "HTTP" if http else "SQS"
        print(f"| {name} | {subscriptions} {kind} | {p:,.0f} | {d:,.0f} | {p50:.1f} | {p99:.1f} |")


if __name__ == "__main__":
    main()
