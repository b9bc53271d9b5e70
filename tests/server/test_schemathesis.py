"""schemathesis against the server's own /openapi.json, bounded and seeded, with every check:
no request gets a 5xx, every answer is documented (status, content type, body), requests the
document allows are accepted and those it forbids refused. The exceptions that depend on a
queue's kind or the server's state are in schemathesis.toml, each with its reason."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Client

from ..support.live import LiveServer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def target() -> Iterator[LiveServer]:
    with Client("memory://") as client, LiveServer(client) as live:
        yield live


ROOT = Path(__file__).resolve().parents[2]


def test_the_openapi_document_is_what_the_server_does(target: LiveServer) -> None:
    tool = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert tool is not None, "schemathesis is part of the dev install"
    proc = subprocess.run(
        [tool, "--config-file", str(ROOT / "schemathesis.toml"), "run",
         f"{target.url}/openapi.json", "--checks", "all",
         "--max-examples", "15", "--seed", "1", "--no-color"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout


def test_no_request_the_document_describes_is_a_server_error_on_sqlite(tmp_path: Path) -> None:
    """Without schemathesis.toml's allowances and on a database (where a value the memory
    store takes in its stride may not fit a column): no 5xx, and no request left hanging."""
    tool = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert tool is not None, "schemathesis is part of the dev install"
    with Client(f"sqlite:///{tmp_path}/s.db") as client, LiveServer(client) as live:
        proc = subprocess.run(
            [tool, "--config-file", "/dev/null", "run", f"{live.url}/openapi.json",
             "--checks", "not_a_server_error", "--request-timeout", "10",
             "--max-examples", "15", "--seed", "2", "--no-color"],
            capture_output=True, text=True, timeout=600, cwd=tmp_path,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout
