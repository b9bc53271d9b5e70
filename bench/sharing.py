"""Processes sharing one SQLite file: how evenly its write lock goes round.

``python -m bench.sharing [--processes 2,4] [--messages 3000] [--repeat 3]``

Each workload runs with the store's way of waiting for the write lock (5 ms in SQLite's
busy handler, then short steps, then turns: sqlite_turnstile.py; "turns: yes") and, as the
baseline, with SQLite's busy handler alone, in turn, on a new file each run
(durability=normal, 100-byte bodies):

- send: N processes each send M single messages;
- drain: N processes receive up to 10 and delete them, until the queued (20,000) are gone.

Prints msgs/s in all, p50/p99/max ms of a call (a send; a receive and its delete), and how
the processes fared: for send the first and last to finish (seconds), for drain the fewest
and most messages one process moved. Each row is the median run by msgs/s.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from conveyor import Client
from conveyor.models import NewMessage

from .runs import pct


def _without_turns(turns: bool) -> None:
    if not turns:
        from conveyor.backends.sql import sqlite_turnstile

        sqlite_turnstile.Turnstile.open = classmethod(lambda cls, database: None)  # type: ignore[method-assign, assignment]


def _sender(url: str, n: int, turns: bool, go: Any, out: Any) -> None:
    _without_turns(turns)
    q = Client(url).queue("q")
    q.stats()
    go.wait()
    lat = []
    start = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        q.send(b"x" * 100)
        lat.append(time.perf_counter() - t0)
    out.put((n, start, time.perf_counter(), lat))


def _drainer(url: str, turns: bool, go: Any, out: Any) -> None:
    _without_turns(turns)
    q = Client(url).queue("q")
    q.stats()
    go.wait()
    lat = []
    count = 0
    start = last = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        got = q.receive(10, visibility_timeout=300, wait=0.5)
        if not got:
            break
        q.delete_batch([m.receipt or "" for m in got])
        last = time.perf_counter()
        lat.append(last - t0)
        count += len(got)
    out.put((count, start, last, lat))


@dataclass
class Run:
    msgs: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    per_process: list[int] = field(default_factory=list)
    finished: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.msgs / self.seconds if self.seconds else 0.0


def run(kind: str, processes: int, messages: int, turns: bool, drain: int) -> Run:
    folder = tempfile.mkdtemp(prefix="conveyor-bench-")
    try:
        url = f"sqlite:///{folder}/q.db?durability=normal"
        client = Client(url)
        client.create_queue("q")
        if kind == "drain":
            for start in range(0, drain, 1000):
                ids = range(start, start + 1000)
                batch = [NewMessage(id=f"m{i}", body=b"x" * 100) for i in ids]
                client.backend.send("q", batch)
        client.close()
        ctx = mp.get_context("fork")
        go, out = ctx.Event(), ctx.Queue()
        if kind == "send":
            procs = [
                ctx.Process(target=_sender, args=(url, messages, turns, go, out))
                for _ in range(processes)
            ]
        else:
            procs = [
                ctx.Process(target=_drainer, args=(url, turns, go, out)) for _ in range(processes)
            ]
        for p in procs:
            p.start()
        time.sleep(1.0)  # every process connected and waiting
        go.set()
        results = [out.get(timeout=600) for _ in procs]
        for p in procs:
            p.join()
        began = min(r[1] for r in results)
        r = Run()
        r.msgs = sum(x[0] for x in results)
        r.seconds = max(x[2] for x in results) - began
        for count, _, end, lat in results:
            r.latencies += lat
            r.per_process.append(count)
            r.finished.append(end - began)
        return r
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.sharing", description=__doc__.split("\n")[0])
    ap.add_argument("--processes", default="2,4", help="numbers of processes, comma-separated")
    ap.add_argument("--messages", type=int, default=3000, help="single sends per process")
    ap.add_argument("--repeat", type=int, default=3, help="runs per row, turns and not in turn")
    ap.add_argument("--drain", type=int, default=20_000, help="messages queued for drain")
    ap.add_argument("--only", choices=("send", "drain"))
    args = ap.parse_args()
    print(
        f"# Processes sharing one SQLite file — {platform.platform()}, Python"
        f" {platform.python_version()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f},"
        f" durability=normal, median of {args.repeat} runs by msgs/s, with and without turns"
        " in turn"
    )
    print(
        "| workload | processes | turns | msgs/s | p50 ms | p99 ms | max ms"
        " | per process (fewest-most msgs; first-last done, s) |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---|")
    kinds = [args.only] if args.only else ["send", "drain"]
    for kind in kinds:
        for n in (int(x) for x in args.processes.split(",")):
            runs: dict[bool, list[Run]] = {True: [], False: []}
            for _ in range(args.repeat):
                for turns in (True, False):
                    runs[turns].append(run(kind, n, args.messages, turns, args.drain))
            for turns in (True, False):
                r = sorted(runs[turns], key=lambda x: x.rate)[len(runs[turns]) // 2]
                every = [x for run_ in runs[turns] for x in run_.latencies]
                worst = max(every) * 1000
                fewest = min(min(x.per_process) for x in runs[turns])
                share = (
                    f"{min(r.per_process):,}-{max(r.per_process):,} msgs (fewest of all runs:"
                    f" {fewest:,})"
                    if kind == "drain"
                    else f"{min(r.finished):.2f}-{max(r.finished):.2f} s"
                )
                print(
                    f"| {kind} | {n} | {'yes' if turns else 'no (baseline)'} | {r.rate:,.0f}"
                    f" | {pct(r.latencies, 50):.2f} | {pct(r.latencies, 99):.2f}"
                    f" | {worst:.0f} (of all runs) | {share} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
