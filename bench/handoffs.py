"""How processes sharing one SQLite file hold its write lock, and the gaps between transactions.

Where a run of one producer and four consumers on one file spends its time: the write
lock's holds, and the gaps between one transaction's commit and the next one's BEGIN.

``python -m bench.handoffs [--messages 20000] [--repeat 3] [--source DIR]``

The loop of `python -m bench`'s 1P+4C rows (single 100-byte messages, durability=normal; the
consumers receive one, delete it, and sleep 1 ms where they found none), with every write
transaction timed in each process: from its BEGIN IMMEDIATE's return to its COMMIT's (a
connection class of sqlite3's that notes both, so that any checkout's store is timed the
same way). With ``--source`` the same loop runs on another checkout's store (``DIR``, e.g. a
worktree of an older commit), the two in turn.

Per run: msgs/s end to end; CPU of the five processes (user + system, seconds); how many
transactions; the share of the run the lock was held (the union of the holds); a hold's
p50/p90/p99; the time of the holds over 1 ms (a COMMIT that ran a checkpoint: SQLite
checkpoints inside the COMMIT that takes the log past 1,000 pages, after the lock is let go);
the gap from a commit to the next BEGIN's return, p50, where the same process wrote next and
where another did (after the holds of 1 ms or less); how often the next writer was another
process. Each row is the median run
by msgs/s.
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
from typing import Any

CHILD = r"""
import json, multiprocessing as mp, os, resource, sqlite3, sys, time
from conveyor import Client

URL, N = sys.argv[1], int(sys.argv[2])
MARKS = []  # BEGIN IMMEDIATE's return (> 0), COMMIT's or ROLLBACK's return (< 0)


class Timed(sqlite3.Connection):
    def execute(self, sql, *args):
        cursor = super().execute(sql, *args)
        if sql == "BEGIN IMMEDIATE":
            MARKS.append(time.monotonic())
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
    cpu = usage()
    for _ in range(N):
        q.send(b"x" * 100)
    out.put((MARKS, usage() - cpu))


def consumer(done, out):
    q = Client(URL).queue("q")
    del MARKS[:]
    cpu = usage()
    while done.value < N:
        got = q.receive(1, wait=0)
        if not got:
            time.sleep(0.001)
            continue
        q.delete(got[0].receipt or "")
        with done.get_lock():
            done.value += 1
    out.put((MARKS, usage() - cpu))


if __name__ == "__main__":
    Client(URL).create_queue("q")
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
    print(json.dumps({"seconds": elapsed, "marks": [m for m, _ in results],
                      "cpu": sum(c for _, c in results)}))
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
    }


def run_once(source: str | None, n: int, workdir: str) -> dict[str, float]:
    """One run in a child Python (of `source`'s store where given), on a new file."""
    path = os.path.join(workdir, "q.db")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.unlink(path + suffix)
    env = dict(os.environ)
    if source:
        env["PYTHONPATH"] = source
    url = f"sqlite:///{path}?durability=normal"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, url, str(n)],
        env=env,
        cwd=source or workdir,
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    return analyse(json.loads(done.stdout.strip().splitlines()[-1]), n)


def row(label: str, runs: list[dict[str, float]]) -> str:
    r = sorted(runs, key=lambda x: x["rate"])[len(runs) // 2]
    return (
        f"{label:<8} {r['rate']:>8,.0f} {r['cpu']:>6.2f} {r['transactions']:>7,.0f}"
        f" {r['held']:>6.0%} {r['p50']:>5.0f} {r['p90']:>5.0f} {r['p99']:>6.0f}"
        f" {r['long']:>6.2f} {r['same']:>6.1f} {r['other']:>6.1f} {r['switches']:>7.1%}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.handoffs", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--source", help="a checkout of Conveyor to compare with ('before')")
    args = ap.parse_args()
    sources: list[tuple[str, str | None]] = [("this", None)]
    if args.source:
        sources.append(("before", os.path.abspath(args.source)))
    workdir = tempfile.mkdtemp(prefix="conveyor-handoffs-")
    try:
        print(
            f"# {platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} CPUs,"
            f" load {os.getloadavg()[0]:.2f}; {args.messages:,} messages, median of"
            f" {args.repeat} runs by msgs/s, the checkouts in turn"
        )
        print(
            f"{'code':<8} {'msgs/s':>8} {'cpu s':>6} {'txns':>7} {'held':>6} {'p50':>5}"
            f" {'p90':>5} {'p99':>6} {'>1ms s':>6} {'gap same':>6} {'other':>6} {'switch':>7}"
        )
        runs: dict[str, list[dict[str, float]]] = {label: [] for label, _ in sources}
        for _ in range(args.repeat):
            for label, source in sources:
                runs[label].append(run_once(source, args.messages, workdir))
        for label, _ in sources:
            print(row(label, runs[label]))
        print(
            "# hold and gap columns in microseconds (a hold: BEGIN IMMEDIATE's return to"
            " COMMIT's); gap: commit to the next BEGIN's return, the same process next or"
            " another; switch: the share of transactions followed by another process's"
        )
        if args.repeat > 1:
            for label, _ in sources:
                rates = [r["rate"] for r in runs[label]]
                spread = f"{min(rates):,.0f}-{max(rates):,.0f}"
                print(f"# {label}: msgs/s {spread}, stdev {statistics.pstdev(rates):,.0f}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
