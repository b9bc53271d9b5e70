"""The `conveyor` Spark data source in local mode: batch and streaming, read and write."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conveyor import Client

ROOT = Path(__file__).resolve().parents[2]


def read(spark: Any, store: str, queue: str, **options: str) -> Any:
    r = spark.read.format("conveyor").option("store", store).option("queue", queue)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def write(df: Any, store: str, queue: str) -> None:
    df.write.format("conveyor").option("store", store).option("queue", queue).mode("append").save()


def bodies(client: Client, queue: str) -> list[str]:
    out: list[str] = []
    q = client.queue(queue)
    after = 0
    while True:
        page = q.peek(limit=1000, after=after)
        if not page:
            return out
        out += [m.text for m in page]
        after = page[-1].sequence


def test_batch_write_then_snapshot_round_trips(spark: Any, store: str, client: Client) -> None:
    client.create_queue("in")
    rows = [(f"id-{i}" if i % 2 else None, f"body {i}", {"n": str(i)}, i % 3) for i in range(3000)]
    df = spark.createDataFrame(
        rows, "id STRING, body STRING, attributes MAP<STRING, STRING>, priority INT"
    ).repartition(3)
    write(df, store, "in")
    got = read(spark, store, "in", numPartitions="3").collect()
    assert len(got) == 3000
    assert {r["body_text"] for r in got} == {f"body {i}" for i in range(3000)}
    for r in got:
        i = int(r["body_text"].split()[1])
        assert r["attributes"] == {"n": str(i)} and r["priority"] == i % 3
        assert r["body"] == r["body_text"].encode() and r["state"] == "ready"
        if i % 2:
            assert r["id"] == f"id-{i}"
    # a snapshot receives nothing; in-flight messages show as such
    held = client.queue("in").receive(max_messages=5)
    snap = read(spark, store, "in")
    states = {r["state"]: r["count"] for r in snap.groupBy("state").count().collect()}
    assert states == {"ready": 2995, "in_flight": 5}
    assert client.queue("in").stats().received == 5
    assert len(held) == 5


def test_a_read_given_a_schema_fills_those_columns_alone(
    spark: Any, store: str, client: Client
) -> None:
    """`.schema(...)` with some of the source's columns: the rows carry them (what a job
    that needs no bodies reads, cheaper); one unknown or mistyped column says what to fix."""
    q = client.create_queue("q", archive=True)
    q.send_batch([f"m{i}" for i in range(10)])
    for m in q.receive(max_messages=4):
        assert m.receipt is not None
        q.delete(m.receipt)
    q.receive(max_messages=2)
    some = spark.read.format("conveyor").schema("state STRING, receive_count INT")
    got = some.option("store", store).option("queue", "q").load()
    assert got.columns == ["state", "receive_count"]
    assert sorted(tuple(r) for r in got.collect()) == [("in_flight", 1)] * 2 + [("ready", 0)] * 4
    text = spark.read.format("conveyor").schema("body_text STRING").option("store", store)
    done = text.option("queue", "q").option("source", "archive").load().collect()
    assert sorted(r["body_text"] for r in done) == sorted(f"m{i}" for i in range(4))
    stream = spark.readStream.format("conveyor").schema("id STRING, body BINARY")
    assert stream.option("store", store).option("queue", "q").load().columns == ["id", "body"]
    for schema, hint in [
        ("state STRING, colour STRING", "unknown column 'colour'"),
        ("receive_count STRING", "column 'receive_count' is int, not string"),
    ]:
        with pytest.raises(Exception, match=None) as info:
            spark.read.format("conveyor").schema(schema).option("store", store).option(
                "queue", "q"
            ).load().collect()
        assert hint in str(info.value), (hint, str(info.value)[:400])


def test_archive_snapshot(spark: Any, store: str, client: Client) -> None:
    q = client.create_queue("done", archive=True)
    q.send_batch([f"m{i}" for i in range(10)])
    for m in q.receive(max_messages=10):
        assert m.receipt is not None
        q.delete(m.receipt)
    got = read(spark, store, "done", source="archive").collect()
    assert sorted(r["body_text"] for r in got) == sorted(f"m{i}" for i in range(10))
    assert all(r["state"] == "deleted" and r["removed_at"] is not None for r in got)


def test_bad_options_and_frames_say_what_to_fix(spark: Any, store: str, client: Client) -> None:
    client.create_queue("in")
    client.create_queue("ordered.fifo", content_based_dedup=True)
    df = spark.createDataFrame([("x",)], "body STRING")
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: read(spark, store, "in", numPartitions="many").count(), "not a whole number"),
        (lambda: read(spark, store, "in", bogus="1").count(), "unknown option"),
        (lambda: read(spark, "memory://", "in").count(), "memory:// store lives in one"),
        (lambda: read(spark, store, "no such!").count(), "queue name"),
        (lambda: write(spark.createDataFrame([(1,)], "n INT"), store, "in"), "'body' column"),
        (lambda: write(df, store, "ordered.fifo"), "write to a standard queue"),
        (
            lambda: df.write.format("conveyor").option("store", store).option("queue", "in")
            .mode("overwrite").save(),
            "mode('append')",
        ),
    ]  # fmt: skip
    for run, hint in cases:
        with pytest.raises(Exception, match=None) as info:
            run()
        assert hint in str(info.value), (hint, str(info.value)[:400])
    assert client.queue("in").stats().ready == 0
    assert client.queue("ordered.fifo").stats().ready == 0


def stream(spark: Any, store: str, source: str, sink: str, checkpoint: Path, **opts: str) -> Any:
    r = spark.readStream.format("conveyor").option("store", store).option("queue", source)
    for k, v in opts.items():
        r = r.option(k, v)
    return (
        r.load()
        .select("id", "body", "attributes", "priority")
        .writeStream.format("conveyor")
        .option("store", store)
        .option("queue", sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def test_stream_drains_and_restarts_from_its_checkpoint(
    spark: Any, store: str, client: Client, tmp_path: Path
) -> None:
    src = client.create_queue("src", archive=True)
    client.create_queue("dst")
    for i in range(0, 2500, 10):
        src.send_batch([f"a{j}" for j in range(i, i + 10)])
    query = stream(spark, store, "src", "dst", tmp_path / "ck", maxMessagesPerBatch="1000")
    query.awaitTermination(180)
    assert query.lastProgress is not None
    src.send_batch([f"b{j}" for j in range(7)])
    again = stream(spark, store, "src", "dst", tmp_path / "ck", maxMessagesPerBatch="1000")
    again.awaitTermination(180)
    got = bodies(client, "dst")
    assert sorted(got) == sorted([f"a{j}" for j in range(2500)] + [f"b{j}" for j in range(7)])
    stats = src.stats()
    assert stats.ready == stats.in_flight == 0
    # acknowledged messages went to the archive
    assert len(src.archive(limit=5000)) == 2507


def test_a_failed_task_is_retried_without_duplicates(
    spark: Any, store: str, client: Client
) -> None:
    from pyspark import TaskContext
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    client.create_queue("out")

    def flaky(n: int) -> str:
        ctx = TaskContext.get()
        if ctx is not None and ctx.partitionId() == 1 and ctx.attemptNumber() == 0 and n > 3500:
            raise RuntimeError("injected failure on a first attempt")
        return f"m{n}"

    udf = F.udf(flaky, StringType(), useArrow=False)  # a plain Python UDF: no type hints read
    df = spark.range(0, 4000, numPartitions=2).select(udf("id").alias("body"))
    write(df, store, "out")
    got = bodies(client, "out")
    assert len(got) == 4000 and set(got) == {f"m{i}" for i in range(4000)}


def test_a_write_with_empty_partitions_publishes_what_the_others_staged(
    spark: Any, store: str, client: Client
) -> None:
    """Tasks of empty partitions record their stage too (publishing asks for every
    stage the job names, and refuses where one is missing)."""
    client.create_queue("few")
    df = spark.createDataFrame([("a",), ("b",)], "body STRING").repartition(4)
    write(df, store, "few")
    assert sorted(bodies(client, "few")) == ["a", "b"]


DRIVER = """
import sys, time
from pyspark.sql import functions as F
from pyspark.sql.types import StringType
from conveyor.spark import session

store, checkpoint = sys.argv[1], sys.argv[2]
spark = session("local[2]", {"spark.ui.showConsoleProgress": "false"})

def slow(body):
    time.sleep(0.002)
    return body

q = (spark.readStream.format("conveyor").option("store", store).option("queue", "src")
     .option("maxMessagesPerBatch", "500").load()
     .select("id", F.udf(slow, StringType())("body_text").alias("body"))
     .writeStream.format("conveyor").option("store", store).option("queue", "dst")
     .option("checkpointLocation", checkpoint).trigger(processingTime="100 milliseconds")
     .start())
print("started", flush=True)
q.awaitTermination()
"""


@pytest.mark.slow
@pytest.mark.parametrize("store", ["sqlite"], indirect=True)  # a second driver JVM costs ~50 s
def test_a_driver_killed_mid_batch_loses_nothing(
    spark: Any, store: str, client: Client, tmp_path: Path
) -> None:
    src = client.create_queue("src", visibility_timeout=5)
    client.create_queue("dst")
    for i in range(0, 3000, 10):
        src.send_batch([f"k{j}" for j in range(i, i + 10)])
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    scratch = tmp_path / "scratch"  # the killed driver's JVM leaves its files here
    scratch.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "SPARK_LOCAL_DIRS": str(scratch),
        "JDK_JAVA_OPTIONS": f"-Djava.io.tmpdir={scratch}",
    }
    child = subprocess.Popen(
        [sys.executable, str(script), store, str(tmp_path / "ck")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while client.queue("dst").stats().ready < 500 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert client.queue("dst").stats().ready >= 500, "the stream never got going"
        time.sleep(0.5)  # into a later batch
        os.killpg(child.pid, signal.SIGKILL)
    finally:
        child.wait(30)
    remaining = src.stats()
    assert remaining.ready + remaining.in_flight > 0, "killed too late to test a replay"
    query = stream(spark, store, "src", "dst", tmp_path / "ck", maxMessagesPerBatch="500")
    query.awaitTermination(180)
    got = bodies(client, "dst")
    assert set(got) == {f"k{j}" for j in range(3000)}
    # the sink is idempotent per (sink, batch): even the replayed batch added nothing twice
    assert len(got) == 3000
    assert src.stats().ready == 0
