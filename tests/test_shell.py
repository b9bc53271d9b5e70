"""The interactive shell, driven through a pseudo-terminal."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import pexpect
import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
# a terminal's control sequences (colours, cursor, wrap): what prompt_toolkit writes between
# the parts of a line it redraws
CONTROL = r"(?:\x1b\[[0-9;?]*[A-Za-z])*"


def drawn(text: str) -> re.Pattern[str]:
    """`text` as the terminal shows it: written at once, or in parts with control sequences
    between (a completion that comes after the typed text was drawn adds only the rest)."""
    return re.compile(CONTROL.join(re.escape(c) for c in text))


def test_shell_session_with_completion_and_message_mode(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "CONVEYOR_URL": f"sqlite:///{tmp_path}/shell.db",
        "TERM": "xterm",
        "PROMPT_TOOLKIT_NO_CPR": "1",
        "HOME": str(tmp_path),
        "COLUMNS": "160",
    }
    child = pexpect.spawn(
        sys.executable,
        ["-m", "conveyor"],
        cwd=str(ROOT),
        env=env,
        encoding="utf-8",
        timeout=60,  # generous: a loaded machine is slow, not wrong
        dimensions=(50, 160),
    )
    prompt = ">> Enter command:"
    child.expect("type help")
    child.expect_exact(prompt)

    def do(line: str, *texts: str) -> None:
        """Send a line and wait for each text of its output in turn, then the prompt."""
        child.sendline(line)
        for text in texts:
            child.expect_exact(text)
        child.expect_exact(prompt)

    do("help", "use QUEUE", "message mode")
    do("queue create orders-dlq", "max_message_bytes")
    do("queue create orders --dead-letter-queue orders-dlq --max-receive-count 2", "orders-dlq")
    # completion of a command, then of a queue name
    child.send("us\t")
    child.expect(drawn("use"))
    child.send(" orders-d\t")
    child.expect(drawn("orders-dlq"))
    child.sendline("")
    child.expect_exact("orders-dlq >> Enter command:")
    child.sendline("use orders")
    child.expect_exact("orders >> Enter command:")
    do("send hello --id m1", "sent m1")
    do("qstats", "ready", "1")
    do("et", "sent A-101, A-202, A-303, A-404")
    do("ls --limit 10", "m1", "A-404")
    # completion of a message id after `id`
    child.send("id m\t")
    child.expect(drawn("m1"))
    child.sendline("")
    child.expect_exact("orders ID m1 >> Enter command:")
    child.sendline("sys")
    child.expect_exact("receive_count")
    child.expect_exact(prompt)
    child.sendline("data")
    child.expect_exact("hello")
    child.expect_exact(prompt)
    child.sendline("fail")
    child.expect_exact("state")
    child.expect_exact(prompt)
    child.sendline("invalid")
    child.expect_exact("orders-dlq")
    child.expect_exact("orders >> Enter command:")  # leaves message mode: it moved
    child.sendline("sys")
    child.expect_exact("select it first with id ID")
    child.expect_exact(prompt)
    do("frobnicate", "unknown command")
    do("send x --queue nope", "does not exist")  # an error does not end the shell
    child.sendline("use orders-dlq")
    child.expect_exact("orders-dlq >> Enter command:")
    child.sendline("redrive --id m1")
    child.expect_exact("redrove m1")
    child.expect_exact(prompt)
    child.sendline("quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def using(state: Any) -> str | None:
    """The shell's queue (a `State`), read afresh: each command may change it."""
    queue: str | None = state.queue_name
    return queue


def test_shell_modes_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from conveyor import Client
    from conveyor.cli.app import State
    from conveyor.cli.shell import Shell

    url = f"sqlite:///{tmp_path}/modes.db"
    with Client(url) as client:
        client.create_queue("jobs").send("x", id="m-1")
    state = State(url, "table", None)
    shell = Shell(state)
    try:
        shell.handle("use nope")
        assert using(state) is None
        assert "does not exist" in capsys.readouterr().err
        shell.handle("use jobs")
        assert using(state) == "jobs"
        shell.handle("id m-1")
        assert shell.message_id == "m-1"
        shell.handle("id missing")  # a missing message leaves the mode as it was
        assert shell.message_id == "m-1"
        assert "missing" in capsys.readouterr().err
        shell.handle("fail --delay nonsense")  # a usage error: said, and no stats after it
        out = capsys.readouterr()
        assert "nonsense" in out.err + out.out and "ready" not in out.out
        # a command pasted with its program's name, as hints and the docs write them
        shell.handle("conveyor ls --limit 1")
        assert "m-1" in capsys.readouterr().out
        shell.handle("conveyor -q jobs -o json qstat")
        assert '"ready": 1' in capsys.readouterr().out
        shell.handle("clear")
        assert shell.handle("id") and shell.message_id is None
    finally:
        state.close()
