"""Instructions the whole server spends a request: ``python -m bench.endpoint [--source DIR]
[--requests N] [--ops send,receive,delete,publish] [--store URL]`` (needs valgrind).

`conveyor serve` runs under callgrind (``valgrind --tool=callgrind``); after a warm-up of
320 requests its counters are zeroed (``callgrind_control -z``), N requests are made over
16 keep-alive connections, and the counters are dumped: the instructions of everything the
server process ran for them (uvicorn's HTTP parsing, the event loop, the handler, the store,
the collector), over N. The same from run to run within about 1% whatever else the machine
does, where wrk's requests a second move by a tenth between rounds. ``--source DIR`` runs
another checkout's server beside this one's (at once: callgrind runs one thread at a time,
so two fit on two cores).

Operations: `send`, a SendMessageBatch of ten 100-byte bodies; `receive`, a ReceiveMessage
of ten with VisibilityTimeout 0 on a queue of 10,000; `delete`, a DeleteMessageBatch of ten
receipts, received beforehand (each sent once); `publish`, an SNS Publish of a 100-byte
message (Query protocol) to a topic with ten SQS subscriptions (raw delivery): the copies'
sends are part of the request's cost.
"""

from __future__ import annotations

import argparse
import http.client
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import wrk

CONNECTIONS = 16
WARM = 320


def measure(tree: str | None, op: str, n: int, store: str, scratch: Path) -> float:
    """Instructions a request of `op` on `tree`'s server (None: this checkout's)."""
    port = wrk.free_port()
    out = scratch / f"callgrind.{os.getpid()}.{port}"
    cmd = [
        "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}.%p", "--dump-instr=no",
        sys.executable, "-m", "conveyor", "serve", "--store", store, "--port", str(port),
    ]  # fmt: skip
    env = {**os.environ, **({"PYTHONPATH": tree} if tree else {})}
    proc = subprocess.Popen(
        cmd, env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_up(url, proc)
        bodies = _bodies(url, op, n + WARM)
        _load(port, op, bodies[:WARM])
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True, capture_output=True)
        _load(port, op, bodies[WARM:])
        subprocess.run(
            ["callgrind_control", "-d", "measured", str(proc.pid)], check=True, capture_output=True
        )
    finally:
        proc.terminate()
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    dump = Path(f"{out}.{proc.pid}.1")  # callgrind_control -d's dump: the first of the run
    totals = next(line for line in dump.read_text().splitlines() if line.startswith("totals:"))
    return int(totals.split()[1]) / n


def _wait_up(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 300  # a server under callgrind starts in 10-60 s
    while True:
        try:
            with wrk.Connection(url) as conn:
                conn.post("ListQueues", b"{}")
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server under callgrind did not start") from None
            time.sleep(1)


def _bodies(url: str, op: str, n: int) -> list[bytes]:
    """The bodies of `n` requests of `op`, the queue they name made (and filled) first."""
    if op == "publish":
        topic = _topic(url, SUBSCRIPTIONS)
        form = {"Action": "Publish", "TopicArn": topic, "Message": wrk.BODY}
        return [urllib.parse.urlencode(form).encode()] * n
    queue = wrk.create(url, f"e-{op}")
    if op == "send":
        return [wrk.send_body(queue).encode()] * n
    if op == "receive":
        wrk.fill(url, queue, 10_000, threads=2)
        body = wrk.receive_body(queue).replace('"VisibilityTimeout": 600', '"VisibilityTimeout": 0')
        return [body.encode()] * n
    wrk.fill(url, queue, n * 10, threads=2)
    return [b.encode() for b in wrk.receipts(url, queue, n, threads=2)]


SUBSCRIPTIONS = 10  # a published message's SQS subscriptions


def _topic(url: str, subscriptions: int) -> str:
    """A topic's ARN, the topic made with `subscriptions` queues subscribed (raw delivery)."""
    topic = _sns(url, {"Action": "CreateTopic", "Name": "e-publish"}, "TopicArn")
    for i in range(subscriptions):
        queue = wrk.create(url, f"e-publish-{i}")
        with wrk.Connection(url) as conn:
            attributes = conn.post(
                "GetQueueAttributes",
                f'{{"QueueUrl": "{queue}", "AttributeNames": ["QueueArn"]}}'.encode(),
            )
        _sns(
            url,
            {
                "Action": "Subscribe",
                "TopicArn": topic,
                "Protocol": "sqs",
                "Endpoint": attributes["Attributes"]["QueueArn"],
                "Attributes.entry.1.key": "RawMessageDelivery",
                "Attributes.entry.1.value": "true",
            },
            "SubscriptionArn",
        )
    return topic


def _sns(url: str, form: dict[str, str], field: str) -> str:
    """An SNS action in the Query protocol; the text of `field` in its answer."""
    conn = http.client.HTTPConnection(urllib.parse.urlsplit(url).netloc, timeout=60)
    try:
        conn.request("POST", "/", urllib.parse.urlencode(form), {"Content-Type": FORM})
        reply = conn.getresponse()
        data = reply.read().decode()
    finally:
        conn.close()
    found = re.search(f"<{field}>([^<]+)</{field}>", data)
    if reply.status != 200 or found is None:
        raise RuntimeError(f"{form['Action']}: {reply.status} {data[:200]}")
    return found.group(1)


FORM = "application/x-www-form-urlencoded"
ACTIONS = {
    "send": "SendMessageBatch",
    "receive": "ReceiveMessage",
    "delete": "DeleteMessageBatch",
    "publish": "Publish",
}


def _load(port: int, op: str, bodies: list[bytes]) -> None:
    """Post `bodies` over CONNECTIONS connections, each answered 200 before the next."""
    headers = (
        {"Content-Type": FORM}
        if op == "publish"
        else {"Content-Type": wrk.JSON, "X-Amz-Target": wrk.TARGET + ACTIONS[op]}
    )
    feed: Iterator[bytes] = iter(bodies)
    lock = threading.Lock()

    def work() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        try:
            while True:
                with lock:
                    body = next(feed, None)
                if body is None:
                    return
                conn.request("POST", "/", body=body, headers=headers)
                reply = conn.getresponse()
                data = reply.read()
                if reply.status != 200:
                    raise RuntimeError(f"{ACTIONS[op]}: {reply.status} {data[:200]!r}")
        finally:
            conn.close()

    with ThreadPoolExecutor(CONNECTIONS) as pool:
        for done in [pool.submit(work) for _ in range(CONNECTIONS)]:
            done.result()


def main() -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.endpoint", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--source", help="another checkout to measure beside this one")
    ap.add_argument("--requests", type=int, default=3200)
    ap.add_argument("--ops", default="send,receive,delete")
    ap.add_argument(
        "--store",
        default="memory://",
        help="the servers' store, each its own: {tmp} in it names a file of the server's"
        " (sqlite:///{tmp}.db?durability=normal)",
    )
    args = ap.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is not installed: apt-get install valgrind")
    ops = [o.strip() for o in args.ops.split(",")]
    unknown = sorted(set(ops) - set(ACTIONS))
    if unknown:
        ap.error(f"--ops: unknown {', '.join(unknown)}; choose from {', '.join(ACTIONS)}")
    source = os.path.abspath(args.source) if args.source else None
    trees: dict[str, str | None] = {"this": None, **({"source": source} if source else {})}
    print(
        f"# instructions a request, the whole server under callgrind — {platform.platform()},"
        f" Python {platform.python_version()}; {args.requests} requests over {CONNECTIONS}"
        f" connections after {WARM}; store {args.store}"
    )
    print(
        f"{'request':20} "
        + " ".join(f"{name:>12}" for name in trees)
        + ("  ratio" if source else "")
    )
    with tempfile.TemporaryDirectory(prefix="conveyor-endpoint-") as tmp:
        for op in ops:
            stores = {name: args.store.replace("{tmp}", f"{tmp}/{name}-{op}") for name in trees}
            with ThreadPoolExecutor(len(trees)) as pool:
                futures = {
                    name: pool.submit(measure, tree, op, args.requests, stores[name], Path(tmp))
                    for name, tree in trees.items()
                }
                got = {name: f.result() for name, f in futures.items()}
            line = f"{ACTIONS[op]:20} " + " ".join(f"{got[n]:>12,.0f}" for n in trees)
            if source:
                line += f"  {got['this'] / got['source']:5.3f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
