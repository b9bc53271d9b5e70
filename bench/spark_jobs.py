"""The pipeline jobs against the same work done in one process with the SDK.

    python -m bench.spark [--size 100000] [--only sqlite|postgres] [--modes local[1],local[2]]

For each store (SQLite at durability=normal, PostgreSQL) and each Spark mode, on a queue of
`--size` messages of ~100 bytes: export (to Parquet), import (that file, into an empty
queue), stats, redrive (a dead-letter queue of `--size` messages to another queue) and a
streaming read (availableNow into a no-op sink) — each timed as a job runs in a session
already started (the session's start is printed on its own), with the peak resident memory
of Spark's driver (the JVM) and of its Python workers (all of them together) while the job
ran, sampled every 0.2 s. The one-process way does the same with the SDK: export pages with
`peek` into the same Parquet columns, import sends the file's rows (the same columns, checked
as sends are) keeping their ids, stats pages through the queue counting states, redrive is
`redrive_all`, the streaming read receives 10 and deletes.
On PostgreSQL the messages table is vacuumed and analyzed before each job, untimed (see
`settle`).
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conveyor import Client
from conveyor.models import MessageState, NewMessage

from . import procs

PG = "postgresql://postgres@127.0.0.1:5432/test"
BODY = b"x" * 100
JOBS = ("export", "import", "stats", "redrive", "stream")
WARM = 1000


def fill(url: str, queue: str, n: int) -> None:
    with Client(url) as c:
        c.create_queue(queue)
        for start in range(0, n, 5000):
            m = min(5000, n - start)
            c.backend.send(queue, [NewMessage(id="", body=BODY, generated_id=True)] * m)


def settle(url: str) -> None:
    """Before each job, what autovacuum does between bulk changes: on PostgreSQL, VACUUM
    ANALYZE the store's messages table. (This machine's server runs with autovacuum off: every
    deleted row stays behind, and a drain after a redrive of a million ran 3x slower.)"""
    if not url.startswith("postgresql"):
        return
    import psycopg

    prefix = url.split("prefix=", 1)[1].split("&", 1)[0]
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"VACUUM ANALYZE {prefix}messages")


# -- memory -------------------------------------------------------------------------------


@dataclass
class Peak:
    """Peak RSS (MiB) of the JVM and of the Python workers (summed) while sampling."""

    jvm: float = 0.0
    workers: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        me = os.getpid()
        while not self._stop.is_set():
            tree = procs.tree(me)
            jvm = sum(rss for name, rss in tree.values() if name == "java")
            workers = sum(
                rss for p, (name, rss) in tree.items() if p != me and name.startswith("python")
            )
            self.jvm = max(self.jvm, jvm / 1024)
            self.workers = max(self.workers, workers / 1024)
            self._stop.wait(0.2)


@contextmanager
def peak() -> Iterator[Peak]:
    p = Peak()
    t = threading.Thread(target=p.sample, daemon=True)
    t.start()
    try:
        yield p
    finally:
        p._stop.set()
        t.join()


# -- the one-process way ------------------------------------------------------------------


def sdk_export(url: str, queue: str, path: str) -> int:
    """What the export job writes (the snapshot's 15 columns), from `peek` pages."""
    import pyarrow.parquet as pq

    from conveyor.spark.rows import message_row, record_batch

    with Client(url) as c:
        q = c.queue(queue)
        now = c.clock.now()
        seen, after = 0, 0
        writer: Any = None
        try:
            while page := q.peek(limit=5000, after=after):
                batch = record_batch([message_row(m, now) for m in page])
                writer = writer or pq.ParquetWriter(path, batch.schema)
                writer.write_batch(batch)
                seen += len(page)
                after = page[-1].sequence or 0
        finally:
            if writer is not None:
                writer.close()
        return seen


IMPORTED = ["id", "body", "attributes", "group_id", "priority"]


def sdk_import(url: str, queue: str, path: str) -> int:
    """What the import job reads of an export (its writable columns but body_text), checked
    as sends are by the sink's own conversion, and sent keeping ids, 5,000 a call."""
    import pyarrow.parquet as pq

    from conveyor.spark.rows import messages_from

    sent = 0
    with Client(url) as c:
        q = c.create_queue(queue)
        for batch in pq.ParquetFile(path).iter_batches(batch_size=5000, columns=IMPORTED):
            messages = messages_from(q, batch)
            sent += sum(not r.duplicate for r in c.backend.send(queue, messages))
    return sent


def sdk_stats(url: str, queue: str) -> int:
    with Client(url) as c:
        q = c.queue(queue)
        now = c.clock.now()
        counts: dict[MessageState, int] = {}
        redelivered = 0
        after = 0
        while page := q.peek(limit=5000, after=after):
            for m in page:
                counts[m.state(now)] = counts.get(m.state(now), 0) + 1
                redelivered += m.receive_count > 1
            after = page[-1].sequence or 0
        return sum(counts.values())


def sdk_redrive(url: str, dlq: str, to: str) -> int:
    with Client(url) as c:
        return c.queue(dlq).redrive_all(to=to)


def sdk_drain(url: str, queue: str) -> int:
    seen = 0
    with Client(url) as c:
        q = c.queue(queue)
        while got := q.receive(max_messages=10):
            q.delete_batch([m.receipt or "" for m in got])
            seen += len(got)
    return seen


# -- the Spark way ------------------------------------------------------------------------


def spark_stream(spark: Any, url: str, queue: str, checkpoint: str) -> int:
    q = (
        spark.readStream.format("conveyor").option("store", url).option("queue", queue)
        .option("maxMessagesPerBatch", "200000").load().select("id", "body")
        .writeStream.format("noop").option("checkpointLocation", checkpoint)
        .trigger(availableNow=True).start()
    )  # fmt: skip
    q.awaitTermination()
    return sum(int(p["numInputRows"]) for p in q.recentProgress)


@dataclass
class Row:
    store: str
    size: int
    job: str
    way: str
    seconds: float
    rows: int
    jvm: float = 0.0
    workers: float = 0.0
    cores: float = 0.0  # CPUs the whole machine kept busy while the job ran, on average


def busy() -> float:
    """The machine's busy CPU time so far (seconds, from /proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle and iowait
    return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")


def timed(fn: Callable[[], int]) -> tuple[float, int, Peak, float]:
    """Wall seconds, the rows `fn` reports, peak memory, and the CPUs kept busy meanwhile."""
    with peak() as p:
        b0 = busy()
        t0 = time.perf_counter()
        n = fn()
        secs = time.perf_counter() - t0
        b1 = busy()
    return secs, n, p, (b1 - b0) / secs


def run_sdk(kind: str, url: str, size: int, tmp: str, which: Sequence[str] = JOBS) -> list[Row]:
    out = []
    path = os.path.join(tmp, f"sdk-{kind}-{size}.parquet")
    fill(url, "src", size)
    fill(url, "sdk-dlq", size)
    steps: list[tuple[str, Callable[[], int]]] = [
        ("export", lambda: sdk_export(url, "src", path)),
        ("import", lambda: sdk_import(url, "sdk-imp", path)),
        ("stats", lambda: sdk_stats(url, "src")),
        ("redrive", lambda: sdk_redrive(url, "sdk-dlq", "sdk-back")),
        ("stream", lambda: sdk_drain(url, "sdk-imp")),
    ]
    with Client(url) as c:
        c.create_queue("sdk-back")
    for job, fn in steps:
        if job not in which:
            continue
        settle(url)
        secs, n, _, cores = timed(fn)
        assert n == size, (job, n, size)
        out.append(Row(kind, size, job, "one process", secs, n, cores=cores))
        print(f"  {kind} {size:,} {job:8} one process {secs:7.1f} s ({cores:.2f} CPUs busy)",
              flush=True)  # fmt: skip
    return out


def run_spark(
    spark: Any, mode: str, kind: str, url: str, size: int, tmp: str, src: str = "src",
    which: Sequence[str] = JOBS,
) -> list[Row]:  # fmt: skip
    from conveyor.spark import jobs

    tag = mode.replace("[", "").replace("]", "") + ("" if src == "src" else f"-{src}")
    path = os.path.join(tmp, f"spark-{kind}-{size}-{tag}")
    dlq, back, imp = f"dlq-{tag}", f"back-{tag}", f"imp-{tag}"
    fill(url, dlq, size)
    with Client(url) as c:
        c.create_queue(back)
        c.create_queue(imp)
    ck = tempfile.mkdtemp(dir=tmp)
    steps: list[tuple[str, Callable[[], int]]] = [
        ("export", lambda: jobs.export(spark, url, src, path)),
        ("import", lambda: jobs.import_(spark, url, imp, path)[1]),
        ("stats", lambda: sum(r["ready"] for r in jobs.stats(spark, url, [src]).queues)),
        ("redrive", lambda: sum(jobs.redrive(spark, url, dlq, to=back).values())),
        ("stream", lambda: spark_stream(spark, url, imp, ck)),
    ]
    out = []
    for job, fn in steps:
        if job not in which:
            continue
        settle(url)
        secs, n, p, cores = timed(fn)
        assert n == size, (job, n, size)
        out.append(Row(kind, size, job, mode, secs, n, p.jvm, p.workers, cores))
        print(
            f"  {kind} {size:,} {job:8} {mode:9} {secs:7.1f} s (JVM {p.jvm:,.0f} MiB,"
            f" Python workers {p.workers:,.0f} MiB, {cores:.2f} CPUs busy)",
            flush=True,
        )
    return out


def spark_mode(
    mode: str, stores: list[tuple[str, str]], size: int, tmp: str, which: Sequence[str] = JOBS
) -> dict[str, Any]:
    """Every job in a Spark session of its own (this process is fresh: its JVM too)."""
    from conveyor.spark import session

    t0 = time.perf_counter()
    spark = session(mode, app="conveyor-bench", quiet=True)
    spark.range(10).count()
    start = time.perf_counter() - t0
    rows: list[Row] = []
    first: dict[str, float] = {}
    try:
        # each job once on 1,000 messages first: its first use in a session loads Spark's
        # Python data source machinery and Arrow paths (seconds), which the rows leave out
        warm = "warm-" + mode.replace("[", "").replace("]", "")
        for kind, url in stores:
            fill(url, warm, WARM)
            for r in run_spark(spark, mode, kind, url, WARM, tmp, src=warm, which=which):
                first[r.job] = first.get(r.job, 0.0) + r.seconds
        for kind, url in stores:
            rows += run_spark(spark, mode, kind, url, size, tmp, which=which)
    finally:
        spark.stop()
    return {"start": start, "first": first, "rows": [r.__dict__ for r in rows]}


def _child(
    mode: str, stores: list[tuple[str, str]], size: int, tmp: str, which: Sequence[str]
) -> dict[str, Any]:
    """`spark_mode` in a new process (a JVM of its own, whose start is then counted)."""
    import json
    import subprocess
    import sys

    code = (
        "import json, sys\n"
        "from bench.spark_jobs import spark_mode\n"
        "out = spark_mode(*json.loads(sys.argv[1]))\n"
        "print('RESULT ' + json.dumps(out))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps([mode, stores, size, tmp, list(which)])],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
        print(line, flush=True)
    raise RuntimeError(f"no result from {mode}")


def main(args: Any) -> None:
    sizes = [int(s) for s in str(args.size).split(",")]
    jobs = [j.strip() for j in str(args.jobs).split(",")]
    unknown = sorted(set(jobs) - set(JOBS))
    if unknown:
        raise SystemExit(f"unknown job(s) {', '.join(unknown)}: pick from {', '.join(JOBS)}")
    if "stream" in jobs and "import" not in jobs:
        raise SystemExit("the stream drains what import wrote: --jobs with stream needs import")
    modes = args.modes.split(",")
    tmp = tempfile.mkdtemp(prefix="spark-jobs-")
    prefix = f"sparkjobs{secrets.token_hex(3)}_"
    rows: list[Row] = []
    starts: dict[str, float] = {}
    try:
        for size in sizes:
            stores: list[tuple[str, str]] = []
            if args.only in (None, "sqlite"):
                stores.append(("sqlite", f"sqlite:///{tmp}/jobs-{size}.db?durability=normal"))
            if args.only in (None, "postgres"):
                stores.append(("postgres", f"{PG}?prefix={prefix}{size}_"))
            for kind, url in stores:
                rows += run_sdk(kind, url, size, tmp, jobs)
            for mode in modes:
                got = _child(mode, stores, size, tmp, jobs)
                starts[mode] = got["start"]
                print(
                    f"  {mode}: session start {got['start']:.1f} s; first use of each job"
                    " (1,000 messages, both stores): "
                    + ", ".join(f"{job} {t:.1f} s" for job, t in got["first"].items()),
                    flush=True,
                )
                rows += [Row(**r) for r in got["rows"]]
    finally:
        for size in sizes:
            if args.only in (None, "postgres"):
                from .sql import _drop

                _drop(PG, f"{prefix}{size}_")
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print("session start (a new JVM): " + ", ".join(f"{m} {s:.1f} s" for m, s in starts.items()))
    print(
        f"{'store':9} {'size':>9} {'job':8} {'way':12} {'seconds':>8} {'rows/s':>9}"
        f" {'JVM MiB':>8} {'workers MiB':>11} {'CPUs busy':>9} {'vs one process':>15}"
    )
    base = {(r.store, r.size, r.job): r.seconds for r in rows if r.way == "one process"}
    for r in rows:
        ratio = base[(r.store, r.size, r.job)] / r.seconds
        mem = f"{r.jvm:8,.0f} {r.workers:11,.0f}" if r.way != "one process" else f"{'':8} {'':11}"
        print(
            f"{r.store:9} {r.size:9,} {r.job:8} {r.way:12} {r.seconds:8.1f}"
            f" {r.rows / r.seconds:9,.0f} {mem} {r.cores:9.2f} {ratio:14.2f}x"
        )
    if len(modes) == 2:
        print()
        one, two = modes
        for kind in sorted({r.store for r in rows}):
            for size in sizes:
                for job in JOBS:
                    t = {
                        r.way: r.seconds
                        for r in rows
                        if (r.store, r.size, r.job) == (kind, size, job)
                    }
                    if one in t and two in t:
                        print(f"{kind:9} {size:9,} {job:8} {two} / {one}: {t[one] / t[two]:.2f}x")
