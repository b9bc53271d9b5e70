"""How processes sharing one SQLite file hold its write lock, and the gaps between transactions.

Where a run of one producer and four consumers on one file spends its time: the write
lock's holds, and the gaps between one transaction's commit and the next one's BEGIN.

``python -m bench.handoffs [--messages 20000] [--repeat 3] [--source DIR] [--fine-after MS,...]``

The loop of `python -m bench`'s 1P+4C rows (single 100-byte messages, durability=normal; the
consumers receive one, delete it, and sleep 1 ms where they found none), with every write
transaction timed in each process: from its BEGIN IMMEDIATE's return to its COMMIT's (a
connection class of sqlite3's that notes both, so that any checkout's store is timed the
same way). With ``--source`` the same loop runs on another checkout's store (``DIR``, e.g. a
worktree of an older commit), the two in turn.

Per run: msgs/s end to end; CPU of the five processes (user + system, seconds); how many
transactions; the share of the run the lock was held (the union of the holds); a hold's
p50/p90/p99; the time of the holds over 1 ms (a COMMIT that ran a checkpoint: SQLite
checkpoints inside the COMMIT that takes the log past 1,000 pages, after the lock is let
go); the gap from a commit to the next BEGIN's return, p50, where the same process wrote
next and where another did (after the holds of 1 ms or less); how often the next writer was
another process; how many BEGINs waited (returned over 0.2 ms after they were asked); the
busiest consumer's share of the messages; from send to receive, p50 and p99 (each body
carries its send's time); the consumers' CPU a message (a receive and a delete), and how
much of it was spent in SQLite's statements (the thread's CPU in `execute`) and how much in
the rest; and the same for the consumers' loop run in one process alone, on a queue of as
many messages sent first (what a message costs where no other process writes). Each row is
the median run by msgs/s.

With ``--fine-after 5,20,50`` this checkout runs once with each as the milliseconds a write
waits in SQLite's busy handler before it tries in short steps (`FINE_AFTER`, 5 by default):
what the waiting writers' turns cost in CPU and buy in latency.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

CHILD = r"""
import json, multiprocessing as mp, os, resource, sqlite3, sys, time
from conveyor import Client

URL, N = sys.argv[1], int(sys.argv[2])
if os.environ.get("FINE_AFTER"):  # this checkout's wait in SQLite's busy handler, in seconds
    from conveyor.backends.sql import sqlite_connections
    sqlite_connections.FINE_AFTER = float(os.environ["FINE_AFTER"])
MARKS = []  # BEGIN IMMEDIATE's return (> 0), COMMIT's or ROLLBACK's return (< 0)
SQL = [0.0]  # the thread's CPU in the statements
WAITS = [0]  # BEGINs that returned more than WAITED seconds after they were asked
WAITED = 0.0002


class Timed(sqlite3.Connection):
    def execute(self, sql, *args):
        cpu, asked = time.thread_time(), time.monotonic()
        try:
            cursor = super().execute(sql, *args)
        finally:
            SQL[0] += time.thread_time() - cpu
        if sql == "BEGIN IMMEDIATE":
            MARKS.append(time.monotonic())
            if MARKS[-1] - asked > WAITED:
                WAITS[0] += 1
        elif sql == "COMMIT" or sql == "ROLLBACK":
            MARKS.append(-time.monotonic())
        return cursor


_connect = sqlite3.connect
sqlite3.connect = lambda *a, **k: _connect(*a, factory=Timed, **k)


def usage():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def producer(out):
    q = Client(URL).queue("q")
    del MARKS[:]
    cpu, SQL[0], WAITS[0] = usage(), 0.0, 0
    for _ in range(N):
        q.send(b"%-100.6f" % time.monotonic())  # the send's time, for the receiver
    out.put(("producer", MARKS, usage() - cpu, SQL[0], [], WAITS[0]))


def consumer(done, out):
    q = Client(URL).queue("q")
    del MARKS[:]
    cpu, SQL[0], WAITS[0] = usage(), 0.0, 0
    latencies = []
    while done.value < N:
        got = q.receive(1, wait=0)
        if not got:
            time.sleep(0.001)
            continue
        latencies.append(time.monotonic() - float(got[0].body))
        q.delete(got[0].receipt or "")
        with done.get_lock():
            done.value += 1
    out.put(("consumer", MARKS, usage() - cpu, SQL[0], latencies, WAITS[0]))


def alone():
    q = Client(URL).queue("q")
    for _ in range(N):
        q.send(b"x" * 100)
    cpu, SQL[0] = usage(), 0.0
    for _ in range(N):
        [m] = q.receive(1, wait=0)
        q.delete(m.receipt or "")
    print(json.dumps({"consumer_cpu": usage() - cpu, "consumer_sql": SQL[0]}))


if __name__ == "__main__":
    Client(URL).create_queue("q")
    if sys.argv[3:] == ["alone"]:
        alone()
        sys.exit()
    ctx = mp.get_context("fork")
    out, done = ctx.Queue(), ctx.Value("i", 0)
    procs = [ctx.Process(target=consumer, args=(done, out)) for _ in range(4)]
    procs.append(ctx.Process(target=producer, args=(out,)))
    start = time.perf_counter()
    for p in procs:
        p.start()
    results = [out.get(timeout=600) for _ in procs]
    elapsed = time.perf_counter() - start
    for p in procs:
        p.join()
    consumers = [r for r in results if r[0] == "consumer"]
    print(json.dumps({"seconds": elapsed, "marks": [r[1] for r in results],
                      "cpu": sum(r[2] for r in results),
                      "consumer_cpu": sum(r[2] for r in consumers),
                      "consumer_sql": sum(r[3] for r in consumers),
                      "latencies": [x for r in consumers for x in r[4]],
                      "waited": sum(r[5] for r in results),
                      "moved": [len(r[4]) for r in consumers]}))
"""


def pct(values: list[float], p: float) -> float:
    """The `p`th percentile of sorted `values`, in microseconds."""
    return values[min(len(values) - 1, int(p / 100 * len(values)))] * 1e6


def analyse(run: dict[str, Any], n: int) -> dict[str, float]:
    """A run's figures from each process's marks."""
    spans: list[tuple[float, float, int]] = []
    for proc, marks in enumerate(run["marks"]):
        began = None
        for mark in marks:
            if mark > 0:
                began = mark
            elif began is not None:
                spans.append((began, -mark, proc))
                began = None
    spans.sort()
    holds = sorted(end - start for start, end, _ in spans)
    union, reach = 0.0, float("-inf")
    for start, end, _ in spans:
        if end > reach:
            union += end - max(start, reach)
            reach = end
    same: list[float] = []
    other: list[float] = []
    for (began, end, proc), (start, _, following) in itertools.pairwise(spans):
        if end - began <= 0.001:  # not a COMMIT that checkpointed after letting the lock go
            (same if proc == following else other).append(start - end)
    same.sort()
    other.sort()
    latencies = sorted(run["latencies"])
    seconds = float(run["seconds"])
    return {
        "rate": n / seconds,
        "cpu": float(run["cpu"]),
        "transactions": len(spans),
        "held": union / (spans[-1][1] - spans[0][0]),
        "p50": pct(holds, 50),
        "p90": pct(holds, 90),
        "p99": pct(holds, 99),
        "long": sum(h for h in holds if h > 0.001),
        "same": pct(same, 50) if same else float("nan"),
        "other": pct(other, 50) if other else float("nan"),
        "switches": len(other) / max(1, len(spans) - 1),
        "e2e50": pct(latencies, 50) / 1e3,  # milliseconds
        "e2e99": pct(latencies, 99) / 1e3,
        "consumer": float(run["consumer_cpu"]) / n * 1e6,
        "statements": float(run["consumer_sql"]) / n * 1e6,
        "waited": float(run["waited"]) / len(spans),
        "most": max(run["moved"]) / n,  # the busiest consumer's share of the messages
    }


def run_once(
    source: str | None, n: int, workdir: str, fine_after: float | None = None
) -> dict[str, float]:
    """One run in a child Python (of `source`'s store where given), on a new file; with
    `fine_after`, this checkout's store waits that long in SQLite's busy handler. Then the
    consumers' loop in one process alone, on a queue of `n` sent first."""
    run = analyse(json.loads(child(source, n, workdir, fine_after)), n)
    solo = json.loads(child(source, n, workdir, fine_after, "alone"))
    run["alone"] = float(solo["consumer_cpu"]) / n * 1e6
    run["alone_statements"] = float(solo["consumer_sql"]) / n * 1e6
    return run


def child(source: str | None, n: int, workdir: str, fine_after: float | None, *args: str) -> str:
    """What the child script printed last, run on a new file."""
    path = os.path.join(workdir, "q.db")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.unlink(path + suffix)
    env = dict(os.environ)
    if source:
        env["PYTHONPATH"] = source
    if fine_after is not None:
        env["FINE_AFTER"] = str(fine_after)
    url = f"sqlite:///{path}?durability=normal"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, url, str(n), *args],
        env=env,
        cwd=source or workdir,
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    return done.stdout.strip().splitlines()[-1]


def median_run(runs: list[dict[str, float]]) -> dict[str, float]:
    return sorted(runs, key=lambda x: x["rate"])[len(runs) // 2]


def row(label: str, runs: list[dict[str, float]]) -> str:
    r = median_run(runs)
    return (
        f"{label:<11} {r['rate']:>8,.0f} {r['cpu']:>6.2f} {r['transactions']:>7,.0f}"
        f" {r['held']:>6.0%} {r['p50']:>5.0f} {r['p90']:>5.0f} {r['p99']:>6.0f}"
        f" {r['long']:>6.2f} {r['same']:>6.1f} {r['other']:>6.1f} {r['switches']:>7.1%}"
        f" {r['waited']:>7.1%} {r['most']:>6.0%}"
    )


def cost_row(label: str, runs: list[dict[str, float]]) -> str:
    r = median_run(runs)
    rest = r["consumer"] - r["statements"]
    alone_rest = r["alone"] - r["alone_statements"]
    return (
        f"{label:<11} {r['rate']:>8,.0f} {r['e2e50']:>8.1f} {r['e2e99']:>8.1f}"
        f" {r['consumer']:>9.0f} {r['statements']:>10.0f} {rest:>8.0f}"
        f" {r['alone']:>6.0f} {r['alone_statements']:>10.0f} {alone_rest:>8.0f}"
    )


# each table: its header, a row of it, and what its columns say
TABLES: tuple[tuple[str, Callable[[str, list[dict[str, float]]], str], str], ...] = (
    (
        f"{'code':<11} {'msgs/s':>8} {'cpu s':>6} {'txns':>7} {'held':>6} {'p50':>5}"
        f" {'p90':>5} {'p99':>6} {'>1ms s':>6} {'gap same':>6} {'other':>6} {'switch':>7}"
        f" {'waited':>7} {'most':>6}",
        row,
        "# hold and gap columns in microseconds (a hold: BEGIN IMMEDIATE's return to"
        " COMMIT's); gap: commit to the next BEGIN's return, the same process next or"
        " another; switch: the share of transactions followed by another process's;"
        " waited: the share of BEGINs that returned over 0.2 ms after they were asked;"
        " most: the busiest consumer's share of the messages (a quarter each is even)",
    ),
    (
        f"{'code':<11} {'msgs/s':>8} {'e2e p50':>8} {'e2e p99':>8} {'consumers':>9}"
        f" {'statements':>10} {'the rest':>8} {'alone':>6} {'statements':>10} {'the rest':>8}",
        cost_row,
        "# e2e: send to receive, ms; consumers: the four consumers' CPU a message"
        " (receive and delete), µs, of it in SQLite's statements (the thread's CPU in"
        " execute) and the rest; alone: the same loop in one process, the queue filled"
        " first",
    ),
)


def main() -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.handoffs", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--source", help="a checkout of Conveyor to compare with ('before')")
    ap.add_argument(
        "--fine-after",
        help="milliseconds, comma-separated: run this checkout once with each as its wait in"
        " SQLite's busy handler before it tries in short steps (its own: 5)",
    )
    args = ap.parse_args()
    sources: list[tuple[str, str | None, float | None]] = []
    if args.fine_after:
        for ms in args.fine_after.split(","):
            sources.append((f"this {float(ms):g}ms", None, float(ms) / 1000))
    else:
        sources.append(("this", None, None))
    if args.source:
        sources.append(("before", os.path.abspath(args.source), None))
    workdir = tempfile.mkdtemp(prefix="conveyor-handoffs-")
    try:
        print(
            f"# {platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} CPUs,"
            f" load {os.getloadavg()[0]:.2f}; {args.messages:,} messages, median of"
            f" {args.repeat} runs by msgs/s, the checkouts in turn"
        )
        runs: dict[str, list[dict[str, float]]] = {label: [] for label, _, _ in sources}
        for _ in range(args.repeat):
            for label, source, fine_after in sources:
                runs[label].append(run_once(source, args.messages, workdir, fine_after))
        for header, line, note in TABLES:
            print(header)
            for label, _, _ in sources:
                print(line(label, runs[label]))
            print(note)
        if args.repeat > 1:
            for label, _, _ in sources:
                rates = [r["rate"] for r in runs[label]]
                spread = f"{min(rates):,.0f}-{max(rates):,.0f}"
                print(f"# {label}: msgs/s {spread}, stdev {statistics.pstdev(rates):,.0f}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
