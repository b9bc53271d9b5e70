"""`conveyor pipeline --remote sc://...` and the `conveyor` data source through Spark Connect:
a Connect server started from the pyspark installation on a loopback port runs the jobs; its
Python workers import this checkout's Conveyor (PYSPARK_PYTHON), the client only plans."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Client

from ..conftest import unavailable
from ..support.waiting import free_port, logged
from .processes import pipeline, stop, two_queues

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import pyspark

    if shutil.which("java") is None:
        unavailable("Java (Spark needs a Java runtime, 17 or newer)")
    work = tmp_path_factory.mktemp("connect")
    port = free_port()
    home = Path(pyspark.__file__).parent
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_DIRS": str(work),
        "TMPDIR": str(work),
    }
    log = work / "server.log"
    server = logged(
        [str(home / "bin" / "spark-submit"), "--master", "local[2]",
         "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
         "--conf", f"spark.connect.grpc.binding.port={port}",
         "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
         "--conf", "spark.ui.enabled=false",
         "--driver-java-options", f"-Djava.io.tmpdir={work}", "spark-internal"],
        log, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise AssertionError("the Spark Connect server did not start:\n" + log.read_text())
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        stop(server)


def test_jobs_run_through_spark_connect(connect_server: str, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/c.db?durability=normal"
    sent = two_queues(store)
    with Client(store) as client:
        client.create_queue("dead").send_batch([f"d{i}" for i in range(5)])
    out = tmp_path / "export"

    def run(*args: str) -> dict[str, object]:
        result, said = pipeline(store, *args, "--remote", connect_server)
        assert "running:" in said  # the phase a Connect session reports
        return result

    assert run("export", "work", str(out))["rows"] == 20
    assert run("import", str(out), "copy")["added"] == 20
    assert run("redrive", "dead", "--to", "copy")["moved"] == {"copy": 5}
    with Client(store) as client:
        got = sorted(m.text for m in client.queue("copy").peek(limit=100))
        assert client.queue("dead").stats().total == 0
    assert got == sorted(sent + [f"d{i}" for i in range(5)])


def test_the_data_source_reads_writes_and_streams_through_spark_connect(
    connect_server: str, tmp_path: Path
) -> None:
    from conveyor.spark import session

    store = f"sqlite:///{tmp_path}/s.db?durability=normal"
    with Client(store) as client:
        q = client.create_queue("in")
        for k in range(3):
            q.send_batch([f"{k}-{i}" for i in range(10)])
        client.create_queue("out")
    marks = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")
    before = {k: os.environ.get(k) for k in marks}
    spark = session(remote=connect_server)  # marks this process as a Connect client
    try:
        df = spark.read.format("conveyor").option("store", store).option("queue", "in").load()
        assert df.count() == 30  # a snapshot receives nothing
        df.select("body").write.format("conveyor").option("store", store).option(
            "queue", "out"
        ).mode("append").save()
        stream = (
            spark.readStream.format("conveyor").option("store", store).option("queue", "in")
            .load().writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True).start()
        )  # fmt: skip
        stream.awaitTermination(120)
    finally:
        spark.stop()
        for key, value in before.items():  # the other tests start classic sessions here
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    with Client(store) as client:
        assert sorted(m.text for m in client.queue("out").peek(limit=100)) == sorted(
            f"{k}-{i}" for k in range(3) for i in range(10)
        )
        assert client.queue("in").stats().total == 0  # the stream consumed every message
