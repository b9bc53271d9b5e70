"""What a durable commit's sync costs on this disk: ``python -m bench.disk [--writes N]``.

A SQLite commit in WAL mode appends frames (a 24-byte header and a 4 KiB page each) to the
write-ahead log, which is then synced. The log grows until a checkpoint lets SQLite start it
again from its beginning, after which it is rewritten in place. Here, in a file in the
directory given (default: the system's temporary directory), each write of one or two frames
is followed by a sync of the file, with ``fsync`` and with ``fdatasync``, where the file
grows and where it is rewritten in place, the four in turn, `--repeat` rounds: the sync's
p50/p90/p99 in µs (the median round's, by p50).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable

from .runs import pct  # milliseconds

FRAME = 24 + 4096


def measure(
    fd: int, sync: Callable[[int], None], grow: bool, writes: int, frames: int
) -> list[float]:
    """Seconds each sync took after a write of `frames` frames, the file grown or rewritten."""
    size = writes * frames * FRAME + 32
    if grow:
        os.ftruncate(fd, 0)
    else:
        os.pwrite(fd, b"\1" * size, 0)
    os.fsync(fd)
    data = b"x" * (frames * FRAME)
    at = 32  # past the log's header
    took: list[float] = []
    for _ in range(writes):
        os.pwrite(fd, data, at)
        at += len(data)
        start = time.perf_counter()
        sync(fd)
        took.append(time.perf_counter() - start)
    return took


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.disk", description=__doc__)
    parser.add_argument("--writes", type=int, default=2000, help="writes and syncs a run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args(argv)
    syncs: list[tuple[str, Callable[[int], None]]] = [("fsync", os.fsync)]
    if hasattr(os, "fdatasync"):
        syncs.append(("fdatasync", os.fdatasync))
    print(f"# python -m bench.disk: {args.writes:,} writes a run, in {args.dir}; load average"
          f" {os.getloadavg()[0]:.2f}\n")  # fmt: skip
    print("| write, sync            | log      |  p50 µs |  p90 µs |  p99 µs |")
    print("|------------------------|----------|---------|---------|---------|")
    fd, path = tempfile.mkstemp(prefix="conveyor-bench-disk-", dir=args.dir)
    try:
        for frames in (1, 2):
            runs: dict[tuple[str, bool], list[list[float]]] = {}
            for _ in range(args.repeat):
                for name, sync in syncs:
                    for grow in (True, False):
                        took = measure(fd, sync, grow, args.writes, frames)
                        runs.setdefault((name, grow), []).append(took)
            for (name, grow), rounds in runs.items():
                took = sorted(rounds, key=lambda t: statistics.median(t))[len(rounds) // 2]
                label = f"{frames} frame{'s' if frames > 1 else ''}, {name}"
                print(
                    f"| {label:<22} | {'grows' if grow else 'in place':<8} |"
                    f" {pct(took, 50) * 1e3:7.0f} | {pct(took, 90) * 1e3:7.0f} |"
                    f" {pct(took, 99) * 1e3:7.0f} |",
                    flush=True,
                )
    finally:
        os.close(fd)
        os.unlink(path)


if __name__ == "__main__":
    main()
