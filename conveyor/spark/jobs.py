"""Pipeline jobs over queues, on Spark: stats, export, import and redrive.

Each is a Python function taking a SparkSession with the `conveyor` source registered
(`conveyor.spark.session()` makes one) and is also a `conveyor pipeline` command.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..client import Client
from ..exceptions import InvalidInput
from .rows import TYPES

LATENCY_QUANTILES = (0.5, 0.9, 0.99)


def snapshot(
    spark: Any, store: str, queue: str, *, source: str = "queue",
    columns: Sequence[str] | None = None,
) -> Any:  # fmt: skip
    """A DataFrame of a queue's messages (every state) or of its archive; of `columns` alone
    if given (the source then converts no others: bodies are most of a row)."""
    reader = spark.read.format("conveyor")
    if columns is not None:
        reader = reader.schema(", ".join(f"{c} {TYPES[c]}" for c in columns))
    return reader.option("store", store).option("queue", queue).option("source", source).load()


def _queues(store: str, queues: Sequence[str] | None) -> list[str]:
    with Client(store) as client:
        known = client.list_queues()
    if not queues:
        return known
    missing = sorted(set(queues) - set(known))
    if missing:
        raise InvalidInput(f"no such queue(s): {', '.join(missing)} (the store has {len(known)})")
    return list(queues)


# -- export and import ----------------------------------------------------------------------


def export(
    spark: Any, store: str, queue: str, path: str, *, source: str = "queue",
    overwrite: bool = False,
) -> int:  # fmt: skip
    """Write a queue (or its archive) to Parquet at `path`; the number of rows written (read
    back from the files' footers: the queue is read once, and nothing is cached)."""
    snapshot(spark, store, queue, source=source).write.mode(
        "overwrite" if overwrite else "error"
    ).parquet(path)
    return int(spark.read.parquet(path).count())


def import_(spark: Any, store: str, queue: str, path: str) -> tuple[int, int]:
    """Send the messages of a Parquet export to `queue`, keeping their ids, so importing
    the same file again adds nothing. (rows read, messages the queue gained)."""
    from pyspark.sql import functions as F

    df = spark.read.parquet(path)
    if "id" not in df.columns:
        raise InvalidInput(
            f"{path} has no 'id' column: import keeps message ids to stay idempotent;"
            " export with `conveyor pipeline export` or add the column"
        )
    writable = ("id", "body", "body_text", "attributes", "group_id", "priority")
    keep: list[Any] = [c for c in writable if c in df.columns]
    if "body" in keep and "body_text" in keep:
        # one column to the sink, not the same bytes twice (body_text only where body is null)
        keep.remove("body_text")
        body = F.coalesce(F.col("body"), F.encode(F.col("body_text"), "UTF-8"))
        keep[keep.index("body")] = body.alias("body")
    rows = int(df.count())
    with Client(store) as client:
        before = _depth(client, queue)
        df.select(*keep).write.format("conveyor").option("store", store).option(
            "queue", queue
        ).mode("append").save()
        after = _depth(client, queue)
    return rows, after - before


def _depth(client: Client, queue: str) -> int:
    s = client.queue(queue).stats()
    return s.ready + s.delayed + s.in_flight


# -- redrive --------------------------------------------------------------------------------


# what `redrive` reads of a dead-letter queue: what it writes, the state and the source
REDRIVE_COLUMNS = ("id", "body", "attributes", "group_id", "priority", "state", "source_queue")


def redrive(spark: Any, store: str, dlq: str, *, to: str | None = None) -> dict[str, int]:
    """Move the ready messages of dead-letter queue `dlq` back to the queues they came from
    (or all to `to`), keeping ids: a redrive cut short and run again sends nothing twice.
    Messages with no source queue stay put unless `to` is given. Counts per target queue."""
    from pyspark.sql import functions as F

    df = snapshot(spark, store, dlq, columns=REDRIVE_COLUMNS).where(F.col("state") == "ready")
    target = F.lit(to) if to else F.col("source_queue")
    df = df.withColumn("target", target).where(F.col("target").isNotNull()).cache()
    try:
        counts = {r["target"]: int(r["count"]) for r in df.groupBy("target").count().collect()}
        with Client(store) as client:
            missing = sorted(set(counts) - set(client.list_queues()))
        if missing:
            raise InvalidInput(
                f"cannot redrive to missing queue(s) {', '.join(missing)}: create them or pass --to"
            )
        for queue in sorted(counts):
            (
                df.where(F.col("target") == queue)
                .select("id", "body", "attributes", "group_id", "priority")
                .write.format("conveyor")
                .option("store", store)
                .option("queue", queue)
                .mode("append")
                .save()
            )
        df.select("id").foreachPartition(_Remover(store, dlq))
    finally:
        df.unpersist()
    return counts


class _Remover:
    """Removes messages by id from a queue, in a task (opens its own connection), a few
    statements per thousand rows."""

    CHUNK = 5000

    def __init__(self, store: str, queue: str) -> None:
        self.store, self.queue = store, queue

    def __call__(self, rows: Any) -> None:
        with Client(self.store) as client:
            bulk = client.pipeline(self.queue)
            ids: list[str] = []
            for row in rows:
                ids.append(row["id"])
                if len(ids) >= self.CHUNK:
                    bulk.remove(ids)  # ids gone already (a re-run, a consumer) are skipped
                    ids = []
            if ids:
                bulk.remove(ids)


# -- stats ----------------------------------------------------------------------------------


@dataclass
class Stats:
    """What `stats` found; each table is a list of rows (dicts)."""

    queues: list[dict[str, Any]] = field(default_factory=list)
    throughput: list[dict[str, Any]] = field(default_factory=list)
    latency: list[dict[str, Any]] = field(default_factory=list)
    dead_letters: list[dict[str, Any]] = field(default_factory=list)

    def tables(self) -> dict[str, list[dict[str, Any]]]:
        return {
            "queues": self.queues,
            "throughput": self.throughput,
            "latency": self.latency,
            "dead_letters": self.dead_letters,
        }


# what `stats` reads of the queues and of their archives
LIVE_COLUMNS = ("queue", "state", "receive_count", "source_queue", "error")
GONE_COLUMNS = ("queue", "state", "receive_count", "sent_at", "first_received_at", "removed_at")


def stats(
    spark: Any, store: str, queues: Sequence[str] | None = None, *, window: str = "1 minute"
) -> Stats:
    """Per queue: messages by state and redelivery rate (from the queue), throughput per time
    window and time-in-queue / processing latency percentiles (from the archive), and the
    dead-letter breakdown by source queue and error."""
    from functools import reduce

    from pyspark.sql import functions as F

    names = _queues(store, queues)
    out = Stats()
    if not names:
        return out
    live = reduce(
        lambda a, b: a.unionByName(b),
        [snapshot(spark, store, q, columns=LIVE_COLUMNS) for q in names],
    )
    gone = reduce(
        lambda a, b: a.unionByName(b),
        [snapshot(spark, store, q, source="archive", columns=GONE_COLUMNS) for q in names],
    )
    live, gone = live.cache(), gone.cache()
    try:
        by_state = live.groupBy("queue").agg(
            F.count("*").alias("messages"),
            F.sum((F.col("state") == "ready").cast("int")).alias("ready"),
            F.sum((F.col("state") == "in_flight").cast("int")).alias("in_flight"),
            F.sum((F.col("state") == "delayed").cast("int")).alias("delayed"),
            F.sum((F.col("receive_count") > 1).cast("int")).alias("redelivered_live"),
        )
        done = gone.groupBy("queue").agg(
            F.count("*").alias("archived"),
            F.sum((F.col("receive_count") > 1).cast("int")).alias("redelivered_archived"),
        )
        rows = by_state.join(done, "queue", "full_outer").fillna(0).orderBy("queue").collect()
        for r in rows:
            total = r["messages"] + r["archived"]
            redelivered = r["redelivered_live"] + r["redelivered_archived"]
            out.queues.append(
                {
                    "queue": r["queue"],
                    "ready": int(r["ready"]),
                    "in_flight": int(r["in_flight"]),
                    "delayed": int(r["delayed"]),
                    "archived": int(r["archived"]),
                    "redelivery_rate": round(redelivered / total, 4) if total else 0.0,
                }
            )
        win = F.window("removed_at", window)
        for r in (
            gone.where(F.col("state") == "deleted")
            .groupBy("queue", win.alias("w"))
            .count()
            .orderBy("queue", "w")
            .collect()
        ):
            out.throughput.append(
                {"queue": r["queue"], "window_start": r["w"]["start"], "processed": r["count"]}
            )
        wait = F.col("first_received_at").cast("double") - F.col("sent_at").cast("double")
        work = F.col("removed_at").cast("double") - F.col("first_received_at").cast("double")
        qs = list(LATENCY_QUANTILES)
        for r in (
            gone.where(F.col("first_received_at").isNotNull())
            .groupBy("queue")
            .agg(
                F.percentile_approx(wait, qs).alias("wait"),
                F.percentile_approx(work, qs).alias("work"),
            )
            .orderBy("queue")
            .collect()
        ):
            row: dict[str, Any] = {"queue": r["queue"]}
            for name, values in (("in_queue", r["wait"]), ("processing", r["work"])):
                for q, v in zip(qs, values, strict=True):
                    row[f"{name}_p{int(q * 100)}_s"] = round(float(v), 3)
            out.latency.append(row)
        for r in (
            live.where(F.col("source_queue").isNotNull())
            .groupBy("queue", "source_queue", "error")
            .count()
            .orderBy(F.desc("count"))
            .collect()
        ):
            out.dead_letters.append(
                {
                    "dead_letter_queue": r["queue"],
                    "source_queue": r["source_queue"],
                    "error": r["error"] or "",
                    "messages": int(r["count"]),
                }
            )
    finally:
        live.unpersist()
        gone.unpersist()
    return out


def write_stats(result: Stats, directory: str, fmt: str = "parquet") -> list[Path]:
    """Each non-empty table as `<directory>/<table>.<fmt>` (parquet or csv)."""
    import pandas as pd

    if fmt not in ("parquet", "csv"):
        raise InvalidInput(f"format {fmt!r} is not supported: use parquet or csv")
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    written = []
    for name, rows in result.tables().items():
        path = root / f"{name}.{fmt}"
        frame = pd.DataFrame(rows)
        if fmt == "csv":
            frame.to_csv(path, index=False)
        else:
            frame.to_parquet(path, index=False)
        written.append(path)
    return written


NOTHING_TO_CHART = (
    "no throughput to chart: throughput and latency come from a queue's archive; turn it on"
    " (conveyor queue set NAME --archive) and chart again once messages were processed"
)


def chart(result: Stats, path: str) -> Path | None:
    """Draw messages processed per window as bars (one group of bars per window, one colour
    per queue) to a PNG; None, writing nothing, when there is nothing to draw."""
    if not result.throughput:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=100)
    queues = sorted({r["queue"] for r in result.throughput})
    windows = sorted({r["window_start"] for r in result.throughput})
    width = 0.8 / len(queues)
    counts = {(r["queue"], r["window_start"]): r["processed"] for r in result.throughput}
    for i, q in enumerate(queues):
        xs = [w + (i - (len(queues) - 1) / 2) * width for w in range(len(windows))]
        ax.bar(xs, [counts.get((q, w), 0) for w in windows], width=width, label=q)
    step = max(1, len(windows) // 12)  # at most a dozen labels
    ticks = list(range(0, len(windows), step))
    ax.set_xticks(ticks, [str(windows[t])[:16] for t in ticks])
    ax.legend()
    ax.set_title("Messages processed per window")
    ax.set_xlabel("window start (UTC)")
    ax.set_ylabel("messages")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)
