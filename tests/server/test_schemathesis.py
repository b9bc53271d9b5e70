"""schemathesis against the server's own /openapi.json, bounded and seeded: whatever the
document allows (and a good deal it does not), no request gets a 5xx."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Client

from ..live import LiveServer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def target() -> Iterator[LiveServer]:
    with Client("memory://") as client, LiveServer(client) as live:
        yield live


def test_no_request_the_openapi_document_leads_to_is_a_server_error(target: LiveServer) -> None:
    tool = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert tool is not None, "schemathesis is part of the dev install"
    proc = subprocess.run(
        [tool, "run", f"{target.url}/openapi.json", "--checks", "not_a_server_error",
         "--max-examples", "15", "--seed", "1", "--no-color"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout
