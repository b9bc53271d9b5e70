"""Real processes sharing one SQLite file: exactly-once draining, SIGTERM and SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Client, ManualClock
from conveyor.models import NewMessage

from .conftest import unavailable
from .support import sqlstores, waiting

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.procs", *args],
        cwd=ROOT,
        stderr=subprocess.PIPE,
    )


@pytest.fixture(params=["sqlite", "redis"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store several processes share: a SQLite file, or a Redis key prefix."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/shared.db?durability=normal"
        return
    why = sqlstores.reachable("redis")
    if why is not None:
        unavailable(why)
    url = sqlstores.fresh_url("redis")
    yield url
    sqlstores.drop(url)


def test_four_processes_drain_20000_exactly_once(tmp_path: Path, shared_url: str) -> None:
    url = shared_url
    client = Client(url)
    client.create_queue("bulk")
    ids = [f"m{i:05d}" for i in range(20_000)]
    for start in range(0, len(ids), 1000):
        client.backend.send(
            "bulk", [NewMessage(id=i, body=b"x" * 100) for i in ids[start : start + 1000]]
        )
    procs = [_spawn("drain", url, "bulk", str(tmp_path / f"out{n}")) for n in range(4)]
    waiting.until(lambda: all((tmp_path / f"out{n}.ready").exists() for n in range(4)), 60)
    for n in range(4):
        (tmp_path / f"out{n}.go").touch()
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
    received: list[str] = []
    per_process = []
    for n in range(4):
        lines = (tmp_path / f"out{n}").read_text().split()
        per_process.append(len(lines))
        received += lines
    assert len(received) == 20_000, "a message was delivered twice or lost"
    assert set(received) == set(ids)
    assert all(n > 0 for n in per_process), per_process
    st = client.queue("bulk").stats()
    assert (st.total, st.deleted) == (0, 20_000)


def test_sigterm_mid_batch_loses_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/term.db"
    client = Client(url)
    q = client.create_queue("jobs", visibility_timeout=600)
    sent = {q.send(f"job {i}").id for i in range(12)}
    out = tmp_path / "log"
    proc = _spawn("work", url, "jobs", str(out), "0.3")
    waiting.until(lambda: out.exists() and out.read_text().count("start") >= 2, 30)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    lines = out.read_text().split("\n")
    done = {line.split()[1] for line in lines if line.startswith("done")}
    started = {line.split()[1] for line in lines if line.startswith("start")}
    assert started == done, "a handler that started was cut off"
    remaining = {m.id for m in q.peek(100)}
    assert done | remaining == sent and not done & remaining
    assert remaining, "the worker should have been stopped before the queue was empty"
    st = q.stats()
    assert st.in_flight == 0 and st.ready == len(remaining)  # released, not left in flight
    assert b"stopping" in err


def test_sigkill_messages_come_back_after_visibility_timeout(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/kill.db"
    client = Client(url)
    q = client.create_queue("jobs", visibility_timeout=30)
    sent = {q.send(f"job {i}").id for i in range(6)}
    out = tmp_path / "log"
    proc = _spawn("work", url, "jobs", str(out), "60")
    waiting.until(lambda: q.stats().in_flight >= 2, 30)
    held = {m.id for m in q.peek(10, state="in_flight")}
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=10)
    assert held
    now_ready = {m.id for m in q.receive(10, visibility_timeout=600)}
    assert not now_ready & held, "a killed worker's messages must stay invisible until timeout"
    later = Client(url, clock=ManualClock(start=time.time() + 31))
    back = later.queue("jobs").receive(10)
    assert {m.id for m in back} == held
    assert {m.id for m in back} <= sent
    assert all(m.receive_count == 2 for m in back if m.id in held)
