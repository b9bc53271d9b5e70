"""`conveyor pipeline <job>`: the Spark jobs over queues (stats, export, import, redrive).

Each job starts a SparkSession (local mode unless --master names a cluster), runs, and
prints a table (or JSON with --output json). Needs the `[spark]` extra and Java 17+.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..extras import missing
from ..urls import redact
from . import render
from .app import State, _done, cli, fail, pass_state

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def job_options(f: F) -> F:
    f = click.option(
        "--verbose", is_flag=True, help="Show Spark's warnings and stage progress bars."
    )(f)
    f = click.option(
        "--master",
        default="local[*]",
        show_default=True,
        help="Spark master URL: local[N], spark://host:7077, yarn, k8s://...",
    )(f)
    f = click.option(
        "--remote",
        metavar="sc://HOST:PORT",
        help="Run on a Spark Connect server instead of starting Spark (--master is then unused).",
    )(f)
    return click.option("--store", "job_store", help="Store URL (overrides the global --store).")(f)


def _run(master: str, verbose: bool, job: Callable[[Any], T]) -> T:
    """Start Spark and run `job(spark)`, saying on stderr how long each phase took (start,
    planning, execution with a line per stage, commit)."""
    from ..spark import session
    from ..spark.progress import Phases

    _check_spark()
    phases = Phases(render.note)
    render.note(f"starting Spark ({master})")
    phases.phase("start")
    connect = master.startswith("sc://")
    try:
        if connect:
            spark = session(remote=master)
        else:
            spark = session(master, app="conveyor-pipeline", quiet=not verbose)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if connect:
            fail(f"cannot reach the Spark Connect server {master}: {first} (is it running?)")
        fail(f"cannot start Spark on {master}: {first}")
    with phases.follow(spark):
        return job(spark)


def _which(program: str) -> str | None:
    import shutil

    return shutil.which(program)


def _check_spark() -> None:
    """What Spark needs in this process, said before it starts: PySpark and the other
    modules of the spark extra, and a Java runtime."""
    for module in ("pyspark", "pyarrow", "pandas"):
        if importlib.util.find_spec(module) is None:
            fail(missing("spark", "the pipeline", module), "MissingExtra")
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        if not os.access(os.path.join(java_home, "bin", "java"), os.X_OK):
            fail(
                f"JAVA_HOME is {java_home}, which has no bin/java: point it at a Java 17+"
                " runtime, or unset it to use the java on PATH",
                "MissingJava",
            )
    elif _which("java") is None:
        fail(
            "Spark needs a Java 17+ runtime and there is no java on PATH: install one (on"
            " Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME",
            "MissingJava",
        )


def _store(state: State, job_store: str | None) -> str:
    return job_store or state.store


def _local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _check(store: str, *queues: str, archive: str | None = None) -> None:
    """What a job needs, checked before Spark starts (which takes a while)."""
    from ..client import Client

    with Client(store) as client:
        present = set(client.list_queues())
        missing = [name for name in queues if name not in present]
        if missing:
            fail(f"no such queue(s): {', '.join(missing)} on {redact(store)} (create them, or"
                 " check --store)")  # fmt: skip
        if archive is not None and not client.queue_info(archive).attributes.archive:
            fail(f"queue {archive} keeps no archive: turn it on (conveyor queue set {archive}"
                 " --archive) before there is one to export")  # fmt: skip


def _check_archived(store: str, queues: tuple[str, ...]) -> None:
    """A chart needs throughput, which comes from archives: some queue must keep one."""
    from ..client import Client

    with Client(store) as client:
        names = list(queues) or client.list_queues()
        if not any(client.queue_info(name).attributes.archive for name in names):
            one = names[0] if len(names) == 1 else "NAME"
            fail(
                f"nothing to chart: throughput comes from a queue's archive, and"
                f" {'queue ' + names[0] + ' keeps' if len(names) == 1 else 'no queue keeps'}"
                f" none; turn it on (conveyor queue set {one} --archive) and chart once"
                " messages were processed"
            )


@cli.group()
def pipeline() -> None:
    """Spark jobs over queues: stats, export, import, redrive."""


@pipeline.command()
@click.argument("queues", nargs=-1)
@job_options
@click.option("--window", default="1 minute", show_default=True, help="Throughput window.")
@click.option("--out", "out_dir", help="Write each table to this directory.")
@click.option(
    "--format", "fmt", type=click.Choice(["parquet", "csv"]), default="parquet", show_default=True
)
@click.option("--chart", "chart_path", help="Draw throughput per window to this PNG file.")
@pass_state
def stats(
    state: State, queues: tuple[str, ...], job_store: str | None, master: str,
    remote: str | None, verbose: bool, window: str, out_dir: str | None, fmt: str,
    chart_path: str | None,
) -> None:  # fmt: skip
    """Throughput, latency percentiles, redelivery and dead letters per queue (all queues
    unless named)."""
    from ..spark import jobs

    store = _store(state, job_store)
    _check(store, *queues)
    if chart_path is not None:
        _check_archived(store, queues)
    result = _run(
        remote or master,
        verbose,
        lambda spark: jobs.stats(spark, store, list(queues) or None, window=window),
    )
    written = jobs.write_stats(result, out_dir, fmt) if out_dir else []
    drawn = jobs.chart(result, chart_path) if chart_path else None
    if state.json:
        out: dict[str, Any] = dict(result.tables())
        out["files"] = [str(p) for p in written] + ([str(drawn)] if drawn else [])
        render.emit_json(out)
    else:
        for name, rows in result.tables().items():
            if rows:
                columns = list(rows[0])
                render.table(name.replace("_", " "), columns, [list(r.values()) for r in rows])
            else:
                render.say(f"{name.replace('_', ' ')}: none")
        for path in [*written, *([drawn] if drawn else [])]:
            render.say(f"wrote {path}")
    if chart_path is not None and drawn is None:
        render.error(f"no chart written to {chart_path}: {jobs.NOTHING_TO_CHART}")
        sys.exit(1)


@pipeline.command()
@click.argument("queue")
@click.argument("path")
@job_options
@click.option("--archive", is_flag=True, help="Export the queue's archive instead.")
@click.option("--overwrite", is_flag=True, help="Replace what is at PATH.")
@pass_state
def export(
    state: State, queue: str, path: str, job_store: str | None, master: str,
    remote: str | None, verbose: bool, archive: bool, overwrite: bool,
) -> None:  # fmt: skip
    """Write QUEUE (or its archive) to Parquet at PATH, receiving nothing."""
    from ..spark import jobs

    store = _store(state, job_store)
    _check(store, queue, archive=queue if archive else None)
    if not overwrite and _local(path) and os.path.exists(path):
        fail(f"{path} exists already: pass --overwrite to replace it, or choose another path")
    source = "archive" if archive else "queue"
    n = _run(
        remote or master, verbose,
        lambda spark: jobs.export(spark, store, queue, path, source=source, overwrite=overwrite),
    )  # fmt: skip
    _done(state, {"queue": queue, "path": path, "rows": n}, f"exported {n} rows to {path}")


@pipeline.command("import")
@click.argument("path")
@click.argument("queue")
@job_options
@pass_state
def import_cmd(
    state: State,
    path: str,
    queue: str,
    job_store: str | None,
    master: str,
    remote: str | None,
    verbose: bool,
) -> None:
    """Send the messages of a Parquet export at PATH to QUEUE, keeping their ids (running it
    again adds nothing)."""
    from ..spark import jobs

    store = _store(state, job_store)
    if _local(path) and not os.path.exists(path):
        fail(f"{path} does not exist: give the directory an export wrote")
    _check(store, queue)
    rows, added = _run(
        remote or master, verbose, lambda spark: jobs.import_(spark, store, queue, path)
    )
    _done(
        state,
        {"queue": queue, "path": path, "rows": rows, "added": added},
        f"read {rows} rows, {added} new messages in {queue} ({rows - added} were there already"
        f" or were taken meanwhile) on {redact(store)}",
    )


@pipeline.command()
@click.argument("dlq")
@job_options
@click.option("--to", "to", help="Send every message here instead of its source queue.")
@pass_state
def redrive(
    state: State,
    dlq: str,
    job_store: str | None,
    master: str,
    remote: str | None,
    verbose: bool,
    to: str | None,
) -> None:
    """Move the ready messages of dead-letter queue DLQ back to their source queues."""
    from ..spark import jobs

    store = _store(state, job_store)
    _check(store, dlq, *([to] if to else []))
    counts = _run(remote or master, verbose, lambda spark: jobs.redrive(spark, store, dlq, to=to))
    if state.json:
        render.emit_json({"dlq": dlq, "moved": counts})
        return
    render.table(f"redriven from {dlq}", ["queue", "messages"], sorted(counts.items()))
