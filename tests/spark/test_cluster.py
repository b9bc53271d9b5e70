"""`conveyor pipeline --master spark://...` against a standalone Spark cluster (a master and
one worker, from the pyspark installation, on loopback ports): the driver, the executor and
its Python workers are separate processes, as on a real cluster."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Client

from ..conftest import unavailable
from ..support.waiting import free_port, logged
from .processes import pipeline, stop, two_queues

pytestmark = pytest.mark.slow


def spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if shutil.which("java") is None:
        unavailable("Java (Spark needs a Java runtime, 17 or newer)")
    work = tmp_path_factory.mktemp("standalone")
    port, ui, worker_ui = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_WORKER_DIR": str(work / "worker"),
        "SPARK_LOG_DIR": str(work),
        "PYSPARK_PYTHON": sys.executable,
    }
    cls = str(spark_class())
    master = logged(
        [cls, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
         "--port", str(port), "--webui-port", str(ui)],
        work / "master.log", env=env,
    )  # fmt: skip
    url = f"spark://127.0.0.1:{port}"
    worker = logged(
        [cls, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
         "--cores", "2", "--memory", "1g", "--webui-port", str(worker_ui),
         "--work-dir", str(work / "worker")],
        work / "worker.log", env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
                    state = json.load(r)
                workers = state.get("workers", []) if isinstance(state, dict) else []
                if any(w.get("state") == "ALIVE" for w in workers):
                    break
            except (OSError, ValueError):  # not up yet; while it starts the UI may answer
                pass  # its HTML page at /json/
            if time.monotonic() > deadline or master.poll() is not None:
                raise AssertionError(
                    "the standalone cluster did not start:\n" + (work / "master.log").read_text()
                )
            time.sleep(0.5)
        yield url
    finally:
        stop(worker, master)


def test_jobs_run_on_a_standalone_cluster(standalone: str, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/c.db?durability=normal"
    sent = two_queues(store)
    out = tmp_path / "export"

    def run(*args: str) -> dict[str, object]:
        result, said = pipeline(store, *args, "--master", standalone)
        assert "execution" in said  # the tasks ran, on the cluster's executor
        return result

    assert run("export", "work", str(out))["rows"] == 20
    assert run("import", str(out), "copy")["added"] == 20
    with Client(store) as client:
        got = sorted(m.text for m in client.queue("copy").peek(limit=100))
    assert got == sorted(sent)
