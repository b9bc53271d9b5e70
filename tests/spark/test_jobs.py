"""The pipeline jobs end to end, on SQLite and PostgreSQL, as functions and as commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from conveyor import Client, DeadLetterPolicy, Message, SendEntry
from conveyor.cli import cli
from conveyor.spark import jobs


def workload(client: Client) -> None:
    """150 processed (archived), 50 dead-lettered with two errors, 100 waiting."""
    client.create_queue("work-dlq")
    w = client.create_queue(
        "work", archive=True, dead_letter=DeadLetterPolicy(queue="work-dlq", max_receive_count=3)
    )
    for i in range(0, 300, 10):
        w.send_batch([f"m{j}" for j in range(i, i + 10)])
    got: list[Message] = []
    while len(got) < 200:
        got += w.receive(max_messages=10)
    for m in got[:150]:
        assert m.receipt is not None
        w.delete(m.receipt)
    for m in got[150:]:
        w.move_to_dlq(m.id, error="ValueError: bad" if int(m.text[1:]) % 2 else "Timeout")


def test_stats(spark: Any, store: str, client: Client, tmp_path: Path) -> None:
    workload(client)
    result = jobs.stats(spark, store)
    by_queue = {r["queue"]: r for r in result.queues}
    assert by_queue["work"]["ready"] == 100 and by_queue["work"]["archived"] == 150
    assert by_queue["work-dlq"]["ready"] == 50
    assert sum(r["processed"] for r in result.throughput) == 150
    [lat] = result.latency
    assert lat["queue"] == "work" and 0 <= lat["in_queue_p50_s"] <= lat["in_queue_p99_s"]
    assert lat["processing_p50_s"] >= 0
    breakdown = {(r["source_queue"], r["error"]): r["messages"] for r in result.dead_letters}
    assert breakdown == {("work", "ValueError: bad"): 25, ("work", "Timeout"): 25}
    files = jobs.write_stats(result, str(tmp_path / "out"), "csv")
    assert (tmp_path / "out" / "dead_letters.csv").read_text().count("\n") == 3
    assert len(files) == 4
    png = jobs.chart(result, str(tmp_path / "chart.png"))
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_export_then_import_is_idempotent(
    spark: Any, store: str, client: Client, tmp_path: Path
) -> None:
    q = client.create_queue("src")
    q.send_batch(
        [SendEntry(entry_id=str(i), body=f"e{i}", attributes={"k": "v"}) for i in range(10)]
    )
    path = str(tmp_path / "export")
    assert jobs.export(spark, store, "src", path) == 10
    client.create_queue("copy")
    assert jobs.import_(spark, store, "copy", path) == (10, 10)
    assert jobs.import_(spark, store, "copy", path) == (10, 0)
    copied = {m.id: m for m in client.queue("copy").peek(limit=100)}
    originals = {m.id: m for m in q.peek(limit=100)}
    assert copied.keys() == originals.keys()
    assert all(copied[i].body == originals[i].body for i in copied)
    assert all(copied[i].attributes == {"k": "v"} for i in copied)
    with pytest.raises(Exception, match="already exists"):
        jobs.export(spark, store, "src", path)


def test_import_takes_body_text_where_a_row_has_no_body(
    spark: Any, store: str, client: Client, tmp_path: Path
) -> None:
    path = str(tmp_path / "mixed")
    rows = [("a", b"\xff raw", "ignored"), ("b", None, "from text"), ("c", b"both", "both")]
    spark.createDataFrame(rows, "id STRING, body BINARY, body_text STRING").write.parquet(path)
    client.create_queue("in")
    assert jobs.import_(spark, store, "in", path) == (3, 3)
    got = {m.id: m.body for m in client.queue("in").peek(limit=10)}
    assert got == {"a": b"\xff raw", "b": b"from text", "c": b"both"}


def test_redrive(spark: Any, store: str, client: Client) -> None:
    workload(client)
    dead = {m.id for m in client.queue("work-dlq").peek(limit=100)}
    assert jobs.redrive(spark, store, "work-dlq") == {"work": 50}
    assert client.queue("work-dlq").stats().ready == 0
    ids = set()
    after = 0
    while page := client.queue("work").peek(limit=100, after=after):
        ids |= {m.id for m in page}
        after = page[-1].sequence
    assert dead <= ids and len(ids) == 150
    assert jobs.redrive(spark, store, "work-dlq") == {}


def test_pipeline_commands(spark: Any, store: str, client: Client, tmp_path: Path) -> None:
    """The commands reuse the running SparkSession (getOrCreate) and print what they did."""
    workload(client)
    runner = CliRunner()
    args = ["--store", store, "--output", "json", "pipeline"]
    out = runner.invoke(cli, [*args, "stats", "work", "--chart", str(tmp_path / "c.png")])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["queues"][0]["archived"] == 150 and data["files"] == [str(tmp_path / "c.png")]
    out = runner.invoke(cli, [*args, "export", "work-dlq", str(tmp_path / "x")])
    assert out.exit_code == 0 and json.loads(out.stdout)["rows"] == 50
    # its phases and stages on stderr, in order, each with its time
    said = [line.split(":")[0].strip() for line in out.stderr.splitlines()]
    assert said[:3] == ["starting Spark (local[*])", "start", "planning"], out.stderr
    assert "execution" in said and said.index("execution") > said.index("planning")
    stages = [line for line in out.stderr.splitlines() if line.startswith("  stage ")]
    assert stages and all(" tasks, " in line and line.endswith(" s") for line in stages)
    out = runner.invoke(cli, [*args, "redrive", "work-dlq", "--to", "nowhere"])
    assert out.exit_code == 1 and "no such queue(s): nowhere" in out.output
    out = runner.invoke(cli, [*args, "redrive", "work-dlq"])
    assert out.exit_code == 0 and json.loads(out.stdout)["moved"] == {"work": 50}
    out = runner.invoke(cli, [*args, "stats", "nope"])
    assert out.exit_code == 1 and "no such queue(s): nope" in out.output
    # inputs are checked before Spark starts: a master that cannot work is never reached
    bad = ["--store", store, "pipeline"]
    out = runner.invoke(cli, [*bad, "import", str(tmp_path / "x"), "nope", "--master", "no://"])
    assert out.exit_code == 1 and "no such queue(s): nope" in out.output
    out = runner.invoke(cli, [*bad, "import", str(tmp_path / "none"), "work", "--master", "no://"])
    assert out.exit_code == 1 and "does not exist" in out.output
    out = runner.invoke(cli, [*bad, "export", "work", str(tmp_path / "x"), "--master", "no://"])
    assert out.exit_code == 1 and "--overwrite" in out.output
    out = runner.invoke(cli, [*bad, "export", "work-dlq", "y", "--archive", "--master", "no://"])
    assert out.exit_code == 1 and "keeps no archive" in out.output
    assert "starting Spark" not in out.output
    # nothing to chart: no picture of nothing, and it says how to get something to chart
    assert jobs.chart(jobs.Stats(), str(tmp_path / "empty.png")) is None
    assert not (tmp_path / "empty.png").exists()
    client.create_queue("plain")
    out = runner.invoke(cli, [*bad, "stats", "plain", "--chart", str(tmp_path / "p.png")])
    assert out.exit_code == 1 and "conveyor queue set plain --archive" in out.output
    assert not (tmp_path / "p.png").exists() and "starting Spark" not in out.output
    client.set_attributes("plain", archive=True)  # on, but nothing processed yet
    out = runner.invoke(cli, [*args, "stats", "plain", "--chart", str(tmp_path / "p.png")])
    assert out.exit_code == 1 and "no chart written" in out.stderr, out.output
    assert not (tmp_path / "p.png").exists()
