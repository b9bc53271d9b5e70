"""The README's examples run in order, as written, against a live `conveyor serve` on a fresh
store: every `sh` and `python` block after the set-up commands, in a fresh directory, with
the clone's `.venv/bin` on the PATH (docs that cannot drift). Only the port changes, to a
free one; `text` blocks are for reading."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .support.waiting import free_port, logged, logged_line

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.M | re.S)

pytestmark = pytest.mark.slow


def blocks() -> list[tuple[str, str]]:
    found = BLOCK.findall((ROOT / "README.md").read_text())
    return [(lang, code) for lang, code in found if lang in ("sh", "python")]


def test_the_readme_runs_top_to_bottom(tmp_path: Path) -> None:
    found = blocks()
    setup, examples = found[0], found[1:]
    assert "./scripts/serve" in setup[1] and "./scripts/test" in setup[1]
    assert len(examples) >= 4, "the README lost its examples"
    port = free_port()
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        "COLUMNS": "120",
    }
    env.pop("CONVEYOR_URL", None)
    log = tmp_path / "serve.log"
    server = logged(
        [sys.executable, "-m", "conveyor", "serve", "--port", str(port)],
        log,
        cwd=tmp_path,
        env=env,
    )
    outputs: list[str] = []
    try:
        logged_line(server, log, "serving")
        for lang, code in examples:
            code = code.replace("9324", str(port))
            command = ["bash", "-euo", "pipefail", "-c", code]
            if lang == "python":
                command = [sys.executable, "-c", code]
            proc = subprocess.run(
                command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
            )
            assert proc.returncode == 0, f"README {lang} block failed:\n{code}\n{proc.stderr}"
            outputs.append(proc.stdout + proc.stderr)
    finally:
        server.terminate()
        server.wait(30)
    text = "\n".join(outputs)
    assert "hello" in text  # the message the AWS CLI sent, received through boto3
    assert "handling" in text or "urgent" in text  # the SDK's worker ran
    assert "redrove 1" in text, text  # A-101 went to the dead-letter queue and came back
