"""How long a `conveyor` command takes from start to exit: ``python -m bench.cli [--runs N]
[--source DIR]``.

Times `conveyor --help`, `conveyor -q q qstat` and `conveyor -q q send x` on a SQLite store
(wall time of the whole process, median and slowest of N runs after one to warm the disk
cache and write the bytecode), beside `python -c pass` (the interpreter alone) and `python -c
"import click"` in the same run. ``--source DIR`` adds the same commands from another
checkout (a worktree of an earlier commit, with PYTHONPATH=DIR), run in turn with this one.
Each import's share: ``python -X importtime -m conveyor ...``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

COMMANDS = {
    "conveyor --help": ["--help"],
    "conveyor -q q qstat": ["-q", "q", "qstat"],
    "conveyor -q q send x": ["-q", "q", "send", "x"],
}


def timed(argv: list[str], env: dict[str, str], cwd: str) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, check=True, capture_output=True, timeout=60)
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--source", help="another checkout to time beside this one")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="conveyor-bench-cli-")
    python = sys.executable
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    base["CONVEYOR_URL"] = f"sqlite:///{work}/cli.db"
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"this checkout": here}
    if args.source:
        trees["--source"] = os.path.abspath(args.source)
    subprocess.run(
        [python, "-m", "conveyor", "queue", "create", "q"], env=base, cwd=here, check=True,
        capture_output=True,
    )  # fmt: skip
    rows: dict[str, list[float]] = {}
    cases: list[tuple[str, list[str], dict[str, str], str]] = [
        ("python -c pass", [python, "-c", "pass"], base, here),
        ('python -c "import click"', [python, "-c", "import click"], base, here),
    ]
    for tree, path in trees.items():
        env = {**base, "PYTHONPATH": path}
        for name, argv in COMMANDS.items():
            label = name if tree == "this checkout" else f"{name} ({tree})"
            cases.append((label, [python, "-m", "conveyor", *argv], env, path))
    for _, argv, env, cwd in cases:  # warm: bytecode written, files cached
        timed(argv, env, cwd)
    for _ in range(args.runs):  # in turn, so that the machine's drift falls on every row
        for label, argv, env, cwd in cases:
            rows.setdefault(label, []).append(timed(argv, env, cwd))
    print(
        f"# CLI start to exit — {platform.platform()}, Python {platform.python_version()},"
        f" {os.cpu_count()} CPUs, SQLite store, {args.runs} runs each, in turn"
    )
    print(f"{'command':44} {'median ms':>10} {'slowest ms':>11}")
    for label, times in rows.items():
        print(f"{label:44} {statistics.median(times) * 1e3:10.0f} {max(times) * 1e3:11.0f}")


if __name__ == "__main__":
    main()
