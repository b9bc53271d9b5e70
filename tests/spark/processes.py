"""Helpers for the tests that run Spark outside the test process: stopping what they
started, and running `conveyor pipeline` as a user would."""

from __future__ import annotations

import json
import subprocess
import sys


def stop(*procs: subprocess.Popen[bytes]) -> None:
    """SIGTERM each process, then SIGKILL what has not ended within 30 seconds."""
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def pipeline(store: str, *args: str) -> tuple[dict[str, object], str]:
    """`conveyor pipeline ARGS` with JSON output: its result and what it said on stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "conveyor", "--store", store, "-o", "json", "pipeline", *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result, done.stderr


def two_queues(store: str) -> list[str]:
    """`work` with 20 messages and an empty `copy`, on a fresh store; the bodies sent."""
    from conveyor import Client

    bodies = [f"m{i}" for i in range(10)] + [f"n{i}" for i in range(10)]
    with Client(store) as client:
        q = client.create_queue("work")
        q.send_batch(bodies[:10])
        q.send_batch(bodies[10:])
        client.create_queue("copy")
    return bodies
