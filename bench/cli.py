"""How long a `conveyor` command takes from start to exit: ``python -m bench.cli [--runs N]
[--source DIR]``.

Times `conveyor --help`, `conveyor -q q qstat` and `conveyor -q q send x` on a SQLite store
(wall time of the whole process, median and slowest of N runs after one to warm the disk
cache and write the bytecode), beside `python -c pass` (the interpreter alone) and `python -c
"import click"` in the same run. ``--source DIR`` adds the same commands from another
checkout (a worktree of an earlier commit, with PYTHONPATH=DIR), run in turn with this one.
Each import's share: ``python -X importtime -m conveyor ...``.

``--deep N``: instead, the commands that read a whole queue, on one of N messages of 200
bytes (`ls --all` as a table and as JSON, `dlq` of its dead-letter queue), their output
to /dev/null: wall time and the process's peak resident memory.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
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


DEEP = {
    "conveyor -q dead ls --all": ["-q", "dead", "ls", "--all"],
    "conveyor -q dead -o json ls --all": ["-q", "dead", "-o", "json", "ls", "--all"],
    "conveyor -q src dlq": ["-q", "src", "dlq"],
}
# run from a parent of its own, whose children's peak memory is the command's
PROBE = (
    "import resource, subprocess, sys, time; t = time.perf_counter();"
    " subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL,"
    " stderr=subprocess.DEVNULL); print(time.perf_counter() - t,"
    " resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def measured(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, int]:
    """A command's wall time (seconds) and peak resident memory (KB)."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], env=env, cwd=cwd, check=True,
        capture_output=True, text=True, timeout=1800,
    ).stdout.split()  # fmt: skip
    return float(out[0]), int(out[1])


def fill(url: str, n: int) -> None:
    """Queue `src` and its dead-letter queue `dead`, which holds n messages."""
    from conveyor import Client, DeadLetterPolicy
    from conveyor.models import NewMessage

    with Client(url) as client:
        client.create_queue("dead")
        client.create_queue("src", dead_letter=DeadLetterPolicy(queue="dead", max_receive_count=5))
        body = b"x" * 200
        for done in range(0, n, 5000):
            batch = [NewMessage(id="", body=body, generated_id=True)] * min(5000, n - done)
            client.backend.send("dead", batch)


def deep(n: int, runs: int, trees: dict[str, str], envs: dict[str, dict[str, str]]) -> None:
    for tree, path in trees.items():  # each tree's code fills a store of its own
        subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--fill", str(n)], env=envs[tree],
            cwd=path, check=True, timeout=1800,
        )  # fmt: skip
    cases = [
        (name if tree == "this checkout" else f"{name} ({tree})", argv, tree)
        for tree in trees
        for name, argv in DEEP.items()
    ]
    rows: dict[str, list[tuple[float, int]]] = {}
    for _ in range(runs):  # in turn
        for label, argv, tree in cases:
            env, path = envs[tree], trees[tree]
            command = [sys.executable, "-m", "conveyor", *argv]
            rows.setdefault(label, []).append(measured(command, env, path))
    print(
        f"# CLI over a whole queue — {platform.platform()}, Python {platform.python_version()},"
        f" {os.cpu_count()} CPUs, SQLite store, {n:,} messages of 200 bytes, {runs} runs each,"
        " in turn, output to /dev/null"
    )
    print(f"{'command':48} {'median s':>9} {'slowest s':>10} {'peak MB':>8}")
    for label, got in rows.items():
        seconds = [t for t, _ in got]
        peak = max(kb for _, kb in got) / 1024
        print(f"{label:48} {statistics.median(seconds):9.2f} {max(seconds):10.2f} {peak:8.0f}")


def timed(argv: list[str], env: dict[str, str], cwd: str) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, check=True, capture_output=True, timeout=60)
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--source", help="another checkout to time beside this one")
    ap.add_argument("--deep", type=int, help="time the commands that read a queue of N")
    ap.add_argument("--fill", type=int, help=argparse.SUPPRESS)  # (--deep: in each tree)
    args = ap.parse_args()
    if args.fill is not None:
        fill(os.environ["CONVEYOR_URL"], args.fill)
        return
    work = tempfile.mkdtemp(prefix="conveyor-bench-cli-")
    try:
        run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, work: str) -> None:
    python = sys.executable
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"this checkout": here}
    if args.source:
        trees["--source"] = os.path.abspath(args.source)
    # a store of each tree's own: an earlier checkout refuses a schema newer than its own
    envs = {
        tree: {**base, "PYTHONPATH": path, "CONVEYOR_URL": f"sqlite:///{work}/cli-{i}.db"}
        for i, (tree, path) in enumerate(trees.items())
    }
    if args.deep:
        deep(args.deep, args.runs, trees, envs)
        return
    rows: dict[str, list[float]] = {}
    cases: list[tuple[str, list[str], dict[str, str], str]] = [
        ("python -c pass", [python, "-c", "pass"], base, here),
        ('python -c "import click"', [python, "-c", "import click"], base, here),
    ]
    for tree, path in trees.items():
        env = envs[tree]
        subprocess.run(
            [python, "-m", "conveyor", "queue", "create", "q"], env=env, cwd=path, check=True,
            capture_output=True,
        )  # fmt: skip
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
