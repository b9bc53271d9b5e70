"""Receive cost by messages in flight on the SQL stores: ``python -m bench.inflight
[--levels 1000,10000] [--stores sqlite,postgres,mysql]``.

For each store (SQLite at durability=normal, PostgreSQL, MariaDB) one queue holds the
largest level plus 2,000 messages of 100 bytes, with a visibility timeout of an hour.
Receives of 10 (never deleted) put messages in flight up to each level in turn; at each
level 100 more receives are timed: msgs/s and p50/p99 of one receive. In flight at the
queue's head, those messages are what a receive must get past (consumers holding messages
for long, or dead ones that never delete). Target: at the highest level, >= 80% of the
rate at the lowest.
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import statistics
import sys
import tempfile
import time

from conveyor import Client

from .depth import STORES, drop, fill, rate

TIMED = 100  # receives timed at each level


def measure(url: str, levels: list[int], label: str) -> list[tuple[float, float, float]]:
    """(msgs/s, p50 ms, p99 ms) of receives of 10 at each level of messages in flight."""
    client = Client(url)
    try:
        q = client.create_queue("inflight", visibility_timeout=3600)
        fill(client, "inflight", max(levels) + TIMED * 10 * len(levels) + 2_000, label)
        held = 0
        out = []
        for level in levels:
            started = time.perf_counter()
            while held < level:
                held += len(q.receive(min(10, level - held)))
                print(
                    f"\r  {label}: {held:,} in flight ({time.perf_counter() - started:.0f} s)",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
            print(file=sys.stderr)
            times = []
            got = 0
            for _ in range(TIMED):
                t0 = time.perf_counter()
                got += len(q.receive(10))
                times.append(time.perf_counter() - t0)
            held += got
            times.sort()
            out.append(
                (got / sum(times), statistics.median(times) * 1e3, times[TIMED * 99 // 100] * 1e3)
            )
        return out
    finally:
        client.close()


def main() -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.inflight", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--levels", default="1000,10000")
    ap.add_argument("--stores", default="sqlite,postgres,mysql")
    args = ap.parse_args()
    levels = sorted(int(x) for x in args.levels.split(","))
    print(f"# receive cost by messages in flight — {platform.platform()}, {os.cpu_count()} CPUs")
    print(f"# receives of 10 at {', '.join(f'{n:,}' for n in levels)} in flight; {TIMED} timed")
    results = []
    for store in args.stores.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            url = STORES[store].format(tmp=tmp, depth="f", prefix=f"fl{secrets.token_hex(3)}_")
            try:
                results.append((store, measure(url, levels, store)))
            finally:
                if store != "sqlite":
                    drop(url)
    print()
    head = " ".join(f"{f'{n:,} in flight':>26}" for n in levels)
    print(f"{'store':9} {head}  ratio  target")
    for store, rows in results:
        cells = " ".join(f"{rate(r):>9} msgs/s {p50:5.2f}/{p99:5.2f} ms" for r, p50, p99 in rows)
        ratio = rows[-1][0] / rows[0][0]
        flag = "" if ratio >= 0.8 else "BELOW TARGET"
        print(f"{store:9} {cells}  {ratio:5.2f}  >= 0.80 {flag}")
    print("# each cell: msgs/s, then p50/p99 of one receive")


if __name__ == "__main__":
    main()
