"""The wheel (docs/deploy.md): built from the source tree, it carries the dashboard's static
files, the Redis scripts and Spark's log settings; installed with the server extra into a
fresh virtual environment, `conveyor serve` answers boto3 and serves the dashboard."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import venv
import zipfile
from pathlib import Path

import boto3
import httpx
import pytest

from conveyor import __version__

from .support.waiting import free_port, logged

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SKIP = shutil.ignore_patterns(
    ".git", ".venv", "node_modules", "__pycache__", "build", "dist", "*.egg-info", ".*cache"
)


def run(*args: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=600, cwd=cwd
    )
    assert done.returncode == 0, f"{args}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def test_the_wheel_installs_and_serves(tmp_path: Path) -> None:
    source = tmp_path / "src"  # a copy: building writes build/ and egg-info into the tree
    shutil.copytree(ROOT, source, ignore=SKIP)
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", dist, source)
    [wheel] = dist.glob("conveyor_mq-*.whl")
    assert wheel.name == f"conveyor_mq-{__version__}-py3-none-any.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    for data in (
        "dashboard/static/index.html",
        "dashboard/static/app.js",
        "dashboard/static/app.css",
    ):
        assert f"conveyor/server/{data}" in names
    lua = {n for n in names if n.startswith("conveyor/backends/redis/lua/")}
    assert lua == {
        f"conveyor/backends/redis/lua/{p.name}"
        for p in (ROOT / "conveyor/backends/redis/lua").glob("*.lua")
    }
    assert "conveyor/spark/log4j2-quiet.properties" in names and "conveyor/py.typed" in names
    assert not any(n.startswith("tests/") or n.startswith("bench/") for n in names)

    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    python, conveyor = env / "bin" / "python", env / "bin" / "conveyor"
    run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
        f"{wheel}[server]")  # fmt: skip
    assert run(conveyor, "--version").strip() == f"conveyor, version {__version__}"
    # an extra it was not installed with is named with the file it came from
    hint = subprocess.run(
        [conveyor, "--store", "postgresql://127.0.0.1/none", "queue", "list"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert hint.returncode != 0
    assert f"pip install '{wheel}[postgres]'" in hint.stderr + hint.stdout

    port = free_port()
    log = tmp_path / "serve.log"
    server = logged(
        [conveyor, "--store", f"sqlite:///{tmp_path}/c.db", "serve", "--port", str(port)],
        log, cwd=tmp_path,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + "/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        sqs = boto3.client(
            "sqs", endpoint_url=url, region_name="us-east-1",
            aws_access_key_id="k", aws_secret_access_key="s",
        )  # fmt: skip
        queue = sqs.create_queue(QueueName="from-the-wheel")["QueueUrl"]
        sqs.send_message(QueueUrl=queue, MessageBody="installed")
        [got] = sqs.receive_message(QueueUrl=queue)["Messages"]
        assert got["Body"] == "installed"
        assert "conveyor" in httpx.get(url + "/ui").text.lower()
        script = httpx.get(url + "/ui/app.js")
        assert script.status_code == 200 and len(script.content) > 1000
        # it runs the code it installed, not this checkout's
        where = run(python, "-c", "import conveyor; print(conveyor.__file__)", cwd=tmp_path)
        assert re.search(r"/venv/lib/python3\.\d+/site-packages/conveyor/", where), where
    finally:
        server.terminate()
        assert server.wait(30) == 0, log.read_text()
