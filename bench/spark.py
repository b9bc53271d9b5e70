"""Spark against one process with the SDK.

    python -m bench.spark [--size 100000] [--only sqlite|postgres] [--modes local[1],local[2]]
                          [--jobs export,import,stats,redrive,stream]

runs the pipeline jobs (export, import, stats, redrive, streaming read) each beside the same
work done in one process with the SDK (see `bench/spark_jobs.py`).

    python -m bench.spark --ops [--messages 100000] [--only sqlite|postgres] [--master local[2]]

measures the data source's own operations (write, batch read, streaming read) against an
SDK loop:

For each store, the median of `--repeat` rounds (3) on fresh queues, each round: rows/s of
- write: a DataFrame of N messages appended with the `conveyor` sink, vs the SDK sending
  the same bodies in batches of 10 (`send_batch`);
- batch read: a snapshot of the N-message queue read and counted, vs the SDK paging through
  it with `peek` (1,000 per page);
- streaming read: `readStream` (availableNow, maxMessagesPerBatch=50000) draining the queue
  into a no-op sink, vs the SDK receiving batches of 10 and deleting them. The stream's time
  is the sum of its micro-batches' durations as Spark reports them (`triggerExecution`):
  the steady rate of a running stream, without the query's start (about 1 s here, paid once
  per query); the wall time from `start()` to the end is printed too.
Spark timings exclude starting the JVM and each operation's first use in the session (the
JVM loads the Python data source machinery and its Arrow paths once, 5 to 8 s here): each
Spark operation runs once on a small warm-up queue before it is measured, and that first run's
time is printed too.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import tempfile
import time
from typing import Any

from conveyor import Client, SendEntry

from .sql import _drop

PG = "postgresql://postgres@127.0.0.1:5432/test"
STREAM_BATCH = 50_000  # messages per micro-batch: Spark spends ~0.3 s of its own on each


def sdk_write(url: str, queue: str, n: int) -> float:
    with Client(url) as c:
        q = c.queue(queue)
        start = time.perf_counter()
        for i in range(0, n, 10):
            q.send_batch(
                [
                    SendEntry(entry_id=str(j), body=f"message {j:08d}")
                    for j in range(i, min(n, i + 10))
                ]
            )
        return time.perf_counter() - start


def sdk_peek(url: str, queue: str) -> tuple[float, int]:
    with Client(url) as c:
        q = c.queue(queue)
        start = time.perf_counter()
        seen, after = 0, 0
        while page := q.peek(limit=1000, after=after):
            seen += len(page)
            after = page[-1].sequence
        return time.perf_counter() - start, seen


def sdk_drain(url: str, queue: str) -> tuple[float, int]:
    with Client(url) as c:
        q = c.queue(queue)
        start = time.perf_counter()
        seen = 0
        while got := q.receive(max_messages=10):
            q.delete_batch([m.receipt for m in got if m.receipt])
            seen += len(got)
        return time.perf_counter() - start, seen


def spark_write(spark: Any, url: str, queue: str, n: int, parts: int) -> float:
    from pyspark.sql import functions as F

    df = spark.range(0, n, numPartitions=parts).select(
        F.format_string("message %08d", F.col("id")).alias("body")
    )
    start = time.perf_counter()
    df.write.format("conveyor").option("store", url).option("queue", queue).mode("append").save()
    return time.perf_counter() - start


def spark_read(spark: Any, url: str, queue: str, parts: int) -> tuple[float, int]:
    start = time.perf_counter()
    n = (
        spark.read.format("conveyor").option("store", url).option("queue", queue)
        .option("numPartitions", str(parts)).load().select("id", "body").count()
    )  # fmt: skip
    return time.perf_counter() - start, int(n)


def spark_stream(
    spark: Any, url: str, queue: str, parts: int, checkpoint: str
) -> tuple[float, float]:
    """(the micro-batches' total duration as Spark reports it, wall time from start())."""
    start = time.perf_counter()
    q = (
        spark.readStream.format("conveyor").option("store", url).option("queue", queue)
        .option("maxMessagesPerBatch", str(STREAM_BATCH)).option("numPartitions", str(parts))
        .load().select("id", "body").writeStream.format("noop")
        .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    )  # fmt: skip
    q.awaitTermination()
    wall = time.perf_counter() - start
    batches = sum(p["durationMs"]["triggerExecution"] for p in q.recentProgress) / 1000
    return batches, wall


def warm_up(spark: Any, url: str, parts: int) -> None:
    """Run each Spark operation once on a small queue; print how long the first runs took."""
    took = [spark_write(spark, url, "warm", 1000, parts)]
    took.append(spark_read(spark, url, "warm", parts)[0])
    with tempfile.TemporaryDirectory() as ck:
        took.append(spark_stream(spark, url, "warm", parts, ck)[1])
    w, r, s = took
    print(f"first use (1,000 messages): write {w:.1f} s, read {r:.1f} s, stream {s:.1f} s")


OPS = ("write", "batch read", "streaming read")


def bench_store(
    spark: Any, url: str, n: int, parts: int, tag: str
) -> dict[str, tuple[float, float]]:
    """One round on fresh queues: {operation: (SDK loop seconds, Spark seconds)}."""
    sdk, sp = f"sdk{tag}", f"spark{tag}"
    with Client(url) as c:
        for name in (sdk, sp):
            c.create_queue(name)
    out: dict[str, tuple[float, float]] = {}
    out["write"] = (sdk_write(url, sdk, n), spark_write(spark, url, sp, n, parts))
    t_sdk, seen_sdk = sdk_peek(url, sdk)
    t_spark, seen_spark = spark_read(spark, url, sp, parts)
    assert seen_sdk == seen_spark == n, (seen_sdk, seen_spark)
    out["batch read"] = (t_sdk, t_spark)
    t_sdk, drained = sdk_drain(url, sdk)
    assert drained == n
    with tempfile.TemporaryDirectory() as ck:
        t_spark, wall = spark_stream(spark, url, sp, parts, ck)
    print(f"  stream of {n:,}: micro-batches {t_spark:.2f} s, wall from start() {wall:.2f} s")
    with Client(url) as c:
        left = c.queue(sp).stats()
        assert left.ready == left.in_flight == 0, left
        for name in (sdk, sp):
            c.delete_queue(name)
    out["streaming read"] = (t_sdk, t_spark)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", action="store_true", help="the data source's operations")
    parser.add_argument("--size", default="100000", help="jobs: messages (N or N,M)")
    parser.add_argument("--modes", default="local[1],local[2]", help="jobs: Spark masters")
    parser.add_argument(
        "--jobs", default="export,import,stats,redrive,stream", help="jobs: which to run"
    )
    parser.add_argument("--messages", type=int, default=100_000, help="--ops: messages")
    parser.add_argument("--only", choices=["sqlite", "postgres"])
    parser.add_argument("--master", default="local[2]", help="--ops: the Spark master")
    parser.add_argument(
        "--repeat", type=int, default=3, help="rounds on fresh queues; the median time is shown"
    )
    args = parser.parse_args()
    if not args.ops:
        from . import spark_jobs

        spark_jobs.main(args)
        return
    from conveyor.spark import session

    spark = session(
        args.master, app="conveyor-bench", conf={"spark.ui.showConsoleProgress": "false"}
    )
    parts = spark.sparkContext.defaultParallelism
    spark.range(10).count()  # warm the JVM and a Python worker
    rows: list[list[str]] = []
    tmp = tempfile.mkdtemp()
    prefix = f"sparkbench{secrets.token_hex(3)}_"
    stores = []
    if args.only in (None, "sqlite"):
        stores.append(
            ("sqlite (normal)", f"sqlite:///{os.path.join(tmp, 'bench.db')}?durability=normal")
        )
    if args.only in (None, "postgres"):
        stores.append(("postgres", f"{PG}?prefix={prefix}"))
    for kind, url in stores:
        try:
            with Client(url) as c:
                c.create_queue("warm")
            warm_up(spark, url, parts)
            rounds = []
            for r in range(args.repeat):
                rounds.append(bench_store(spark, url, args.messages, parts, str(r)))
                took = ", ".join(
                    f"{op} {args.messages / a:,.0f} / {args.messages / b:,.0f}"
                    for op, (a, b) in rounds[-1].items()
                )
                print(f"{kind} round {r + 1} (SDK / Spark rows/s): {took}", flush=True)
            for op in OPS:
                t_sdk = statistics.median([x[op][0] for x in rounds])
                t_spark = statistics.median([x[op][1] for x in rounds])
                n = args.messages
                rows.append(
                    [
                        kind,
                        op,
                        f"{n / t_sdk:,.0f}",
                        f"{n / t_spark:,.0f}",
                        f"{t_sdk / t_spark:.2f}x",
                    ]
                )
        finally:
            if kind == "postgres":
                _drop(PG, prefix)
    print(
        f"\n{args.messages:,} messages of ~16 bytes, Spark {spark.version} {args.master},"
        f" {parts} partitions; median of {args.repeat} rounds"
    )
    print("| store | operation | SDK loop rows/s | Spark rows/s | Spark / SDK |")
    print("|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    spark.stop()


if __name__ == "__main__":
    main()
