"""SQL stores against hand-written SKIP LOCKED queues: ``python -m bench.sql [--quick]``.

1 producer + 4 consumer processes (and one process alone), single messages and batches of
10, 100-byte bodies, on the PostgreSQL and MariaDB servers named by ``--postgres`` and
``--mysql``. Each store runs in its own table prefix, dropped afterwards. Prints msgs/s
with p50/p99 latency and the store's share of its baseline (target on PostgreSQL: >= 80%
end to end). See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets

from .drivers import ConveyorDriver, Driver
from .runs import alternate, run_multi, run_single
from .sql_drivers import MySQLBaseline, PostgresBaseline


def _drop(url: str, prefix: str) -> None:
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tests.support.sqlstores import drop

    drop(f"{url}?prefix={prefix}")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.sql", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer messages (a smoke run)")
    ap.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    ap.add_argument("--mysql", default="mysql://root@127.0.0.1:3306/test")
    ap.add_argument("--only", help="postgres or mysql")
    ap.add_argument("--modes", default="1P+4C,1 proc")
    ap.add_argument("--messages", type=int, default=6000)
    ap.add_argument(
        "--repeat", type=int, default=3, help="rounds per row, drivers in turn; the median is shown"
    )
    args = ap.parse_args()
    prefix = f"bench{secrets.token_hex(3)}_"
    pairs: list[tuple[str, Driver, PostgresBaseline | MySQLBaseline]] = []
    if args.only in (None, "postgres"):
        pairs.append(
            (
                "postgresql",
                ConveyorDriver("postgres store", f"{args.postgres}?prefix={prefix}"),
                PostgresBaseline("psycopg baseline", args.postgres),
            )
        )
    if args.only in (None, "mysql"):
        pairs.append(
            (
                "mysql",
                ConveyorDriver("mysql store", f"{args.mysql}?prefix={prefix}"),
                MySQLBaseline("pymysql baseline", args.mysql),
            )
        )
    n_base = args.messages // 4 if args.quick else args.messages
    print(
        f"# SQL stores vs hand-written SKIP LOCKED — {platform.platform()},"
        f" {os.cpu_count()} CPUs; msgs/s, p50 ms, p99 ms; each row the median of"
        f" {args.repeat} runs, store and baseline in turn"
    )
    header = (
        f"{'driver':<18} {'mode':<7} {'batch':>5} | {'send':^25} | {'receive+delete':^25} |"
        f" {'end to end':^25}"
    )
    print(header)
    print("-" * len(header))
    ratios: list[tuple[str, str, int, float]] = []
    try:
        for db, store, base in pairs:
            for mode in args.modes.split(","):
                for batch in (1, 10):
                    n = n_base * (2 if batch > 1 else 1) // batch * batch
                    rates = []
                    runner = run_single if mode == "1 proc" else run_multi
                    results = alternate((store, base), runner, n, batch, 100, args.repeat)
                    for d, (send, recv, e2e) in zip((store, base), results, strict=True):
                        rates.append(e2e.rate)
                        print(
                            f"{d.name:<18} {mode:<7} {batch:>5} | {send.cell()} |"
                            f" {recv.cell()} | {e2e.cell()}",
                            flush=True,
                        )
                    ratios.append((db, mode, batch, rates[0] / rates[1]))
    finally:
        for _, _, base in pairs:
            base.drop()
        _drop(args.postgres, prefix)
        _drop(args.mysql, prefix)
    print()
    print("## Store end to end as a share of its baseline (target on PostgreSQL >= 80%)")
    for db, mode, batch, ratio in ratios:
        verdict = ("ok" if ratio >= 0.8 else "BELOW TARGET") if db == "postgresql" else ""
        print(f"  {db:<10} {mode:<7} batch {batch:>2}: {ratio:6.1%}  {verdict}")


if __name__ == "__main__":
    main()
