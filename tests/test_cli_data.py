"""What operators see: bodies, attributes, ids and error texts shown verbatim by every command
and shell mode (never read as markup, terminal escapes shown escaped), nothing acknowledged
before it was written out, tables that never cut an id in two, listings of queues of any
depth, and install hints that name a command that works."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest
from click.testing import CliRunner

from conveyor import Client, DeadLetterPolicy, Message, Queue
from conveyor.cli import cli
from conveyor.cli.app import State
from conveyor.cli.render import shown
from conveyor.cli.shell import Shell

from .support.waiting import free_port, wait_port

ROOT = Path(__file__).resolve().parent.parent

# bodies that broke the tools: Rich markup (a closing tag alone raised), bracketed words that
# vanished, terminal escapes that the terminal ran, a carriage return that rewrote the line,
# NUL, the marks that reorder text, and emoji codes
HOSTILE = {
    "close": "step 2 [/done] ok",
    "tags": "[bold]loud[/bold] [ERROR] [a] [postgres] [link=http://x]y[/link]",
    "escape": "\x1b[31mred\x1b[0m \x1b]0;title\x07 \x9b2J",
    "cr": "shown\rhidden",
    "nul": "nul\x00byte",
    "rtl": "rtl \u202eevil\u202c \u200fmark \u2066iso\u2069",
    "emoji": ":smile: :thumbs_up:",
}
RAW = ("\x1b", "\r", "\x00", "\u202e", "\u200f", "\u2066", "\x9b", "\x07")


def clean(output: str, *texts: str) -> None:
    """`output` holds each text as `shown` writes it, and none of the raw characters."""
    for text in texts:
        assert shown(text) in output, (shown(text), output[-2000:])
    for raw in RAW:
        assert raw not in output, f"{raw!r} reached the terminal"
    assert "\U0001f604" not in output, "an emoji code was replaced"


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables as wide as their bodies, so that a body is on one line to look for."""
    from conveyor.cli import render

    monkeypatch.setattr(render.console, "width", 400)
    monkeypatch.setattr(render.errors, "width", 400)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path}/data.db"
    with Client(url) as client:
        client.create_queue("bad-dlq")
        q = client.create_queue(
            "bad", dead_letter=DeadLetterPolicy(queue="bad-dlq", max_receive_count=3), archive=True
        )
        for key, body in HOSTILE.items():
            q.send(body, id=f"m-{key}", attributes={"note": body, "kind": "[x]"})
    yield url


def cli_run(url: str, *args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, ["--store", url, *args], catch_exceptions=False)
    assert result.exit_code == code, (result.exit_code, result.output)
    return result.output


@pytest.mark.parametrize("key", sorted(HOSTILE))
def test_every_command_shows_a_body_as_it_is(store: str, key: str) -> None:
    body = HOSTILE[key]
    mid = f"m-{key}"
    for output in ("table", "json"):
        got = cli_run(store, "-o", output, "-q", "bad", "get", "--id", mid)
        if output == "json":
            data = json.loads(got)
            assert data["body"] == body and data["attributes"] == {"note": body, "kind": "[x]"}
        else:
            clean(got, body, "[x]")
    clean(cli_run(store, "-q", "bad", "update", "--id", mid, "--priority", "1"), body)
    clean(cli_run(store, "-q", "bad", "fail", "--id", mid), body)
    clean(cli_run(store, "-q", "bad", "reset", "--id", mid), body)
    clean(cli_run(store, "-q", "bad", "invalid", "--id", mid, "--error", body), body)
    clean(cli_run(store, "-q", "bad", "dlq"), body.split(":")[0])
    clean(cli_run(store, "-q", "bad-dlq", "get", "--id", mid), body)
    moved = json.loads(cli_run(store, "-o", "json", "-q", "bad-dlq", "get", "--id", mid))
    assert moved["error"] == body and moved["body"] == body
    cli_run(store, "-q", "bad-dlq", "redrive", "--id", mid)
    for output in ("table", "json"):
        got = cli_run(
            store, "-o", output, "-q", "bad", "receive", "--max", "10", "--visibility", "0"
        )
        if output == "json":
            bodies = {m["id"]: m["body"] for m in json.loads(got)["messages"]}
            assert bodies[mid] == body
        else:
            clean(got, body)
    cli_run(store, "-q", "bad", "receive", "--max", "10", "--ack")
    clean(cli_run(store, "-q", "bad", "archive", "--limit", "20"), body[:60])


def test_names_ids_and_errors_are_shown_as_they_are(store: str) -> None:
    clean(cli_run(store, "-q", "bad", "ls"), "m-close")
    sent = cli_run(store, "-q", "bad", "send", "x", "--id", "[bold]id[/bold]")
    assert "sent [bold]id[/bold]" in sent
    clean(cli_run(store, "-q", "bad", "qstat"), "[bold]id[/bold]")
    missing = cli_run(store, "-q", "bad", "get", "--id", "[/nope]", code=1)
    assert "error: " in missing and "[/nope]" in missing
    bad = cli_run(store, "queue", "create", "[red]x", code=1)
    assert "[red]x" in bad
    got = cli_run(store, "consumer", "register", "--id", "c1", "--info", "host=[b]\x1bx")
    clean(got, "host")
    assert "[b]\\x1bx" in got
    clean(cli_run(store, "consumers"), "c1")
    cli_run(store, "topic", "create", "t")
    cli_run(store, "topic", "subscribe", "t", "bad")
    published = cli_run(store, "topic", "publish", "t", HOSTILE["escape"], "--attr", "k=[/v]")
    clean(published, "bad")


def test_a_megabyte_body_is_shown_whole(store: str, tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_text("%" * (1 << 20))
    cli_run(store, "-q", "bad", "send", "--file", str(big), "--id", "big")
    table = cli_run(store, "-q", "bad", "get", "--id", "big")
    assert table.count("%") == 1 << 20
    data = json.loads(cli_run(store, "-o", "json", "-q", "bad", "get", "--id", "big"))
    assert data["body"] == "%" * (1 << 20)


def test_the_shell_survives_every_body(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    state = State(store, "table", None)
    shell = Shell(state)
    try:
        shell.handle("use bad")
        for key, body in HOSTILE.items():
            assert shell.handle(f"id m-{key}")
            assert shell.message_id == f"m-{key}"
            for mode in ("data", "system", "info"):
                assert shell.handle(mode)
            out = capsys.readouterr()
            clean(out.out, body)
        assert shell.handle("id")
        assert shell.handle("receive --max 10 --ack")
        clean(capsys.readouterr().out, *HOSTILE.values())
        assert Client(store).queue("bad").stats().total == 0
    finally:
        state.close()


def test_the_shell_in_a_terminal(store: str, tmp_path: Path) -> None:
    """The crash the reproducer showed: `id` on a body with a closing tag ended the shell."""
    env = {
        **os.environ,
        "CONVEYOR_URL": store,
        "TERM": "xterm",
        "PROMPT_TOOLKIT_NO_CPR": "1",
        "HOME": str(tmp_path),
    }
    child = pexpect.spawn(
        sys.executable, ["-m", "conveyor", "-q", "bad"], cwd=str(ROOT), env=env,
        encoding="utf-8", timeout=60, dimensions=(50, 200),
    )  # fmt: skip
    prompt = ">> Enter command:"
    child.expect_exact(prompt)
    child.sendline("id m-close")
    child.expect_exact("[/done]")
    child.expect_exact(prompt)
    child.sendline("data")
    child.expect_exact("step 2 [/done] ok")
    child.expect_exact(prompt)
    child.sendline("id m-escape")
    child.expect_exact("\\x1b[31mred")
    child.expect_exact(prompt)
    child.sendline("quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def run_cli(url: str, *args: str, shell: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONVEYOR_URL": url}
    command = [sys.executable, "-m", "conveyor", *args]
    if shell is not None:
        return subprocess.run(
            " ".join(command) + shell, shell=True, capture_output=True, text=True, env=env,
            timeout=60,
        )  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)


def queued(url: str) -> dict[str, int]:
    with Client(url) as client:
        s = client.queue("bad").stats()
    return {"ready": s.ready, "in_flight": s.in_flight, "deleted": s.deleted}


@pytest.mark.parametrize("output", ["table", "json"])
def test_receive_ack_deletes_only_what_was_written(store: str, output: str) -> None:
    # a reader that takes a line and goes: nothing is acknowledged, all come back
    cut = run_cli(
        store, "-o", output, "-q", "bad", "receive", "--max", "10", "--ack",
        "--visibility", "1", shell=" | head -1",
    )  # fmt: skip
    assert "not acknowledged" in cut.stderr
    assert queued(store) == {"ready": 0, "in_flight": len(HOSTILE), "deleted": 0}
    # a reader that reads to the end: all written, all acknowledged
    with Client(store) as client:
        client.clock.sleep(1.2)
    whole = run_cli(
        store, "-o", output, "-q", "bad", "receive", "--max", "10", "--ack", shell=" | cat"
    )
    assert whole.returncode == 0, whole.stderr
    if output == "json":
        assert {m["body"] for m in json.loads(whole.stdout)["messages"]} == set(HOSTILE.values())
    assert queued(store) == {"ready": 0, "in_flight": 0, "deleted": len(HOSTILE)}


def test_receive_ack_into_a_closed_output_deletes_nothing(store: str, tmp_path: Path) -> None:
    env = {**os.environ, "CONVEYOR_URL": store}
    read, write = os.pipe()
    os.close(read)  # nobody will read
    proc = subprocess.run(
        [sys.executable, "-m", "conveyor", "-q", "bad", "receive", "--max", "10", "--ack"],
        stdout=write, stderr=subprocess.PIPE, text=True, env=env, timeout=60,
    )  # fmt: skip
    os.close(write)
    assert proc.returncode == 1
    assert "not acknowledged" in proc.stderr
    assert queued(store)["deleted"] == 0


# -- tables and listings: ids whole, queues of any depth ------------------------------------

ID = "7fff0000-0000-8000-8f86-8910d0f47ad9"
RECEIPT = "6a6f6273/0d23b5547fa5c16f/3fff800000000003/N2ZmZjAwMDAtMDAwMC04MDAwLTlkYjMtMmU2MGM2MGYz"
BODY = " ".join(["word"] * 60)


def console_into(monkeypatch: pytest.MonkeyPatch, *, terminal: bool, width: int) -> io.StringIO:
    """The CLI's standard output console replaced by one writing to a buffer (returned)."""
    from rich.console import Console

    from conveyor.cli import render

    out = io.StringIO()
    console = Console(
        file=out, width=width, force_terminal=terminal, color_system=None, highlight=False,
        soft_wrap=True, markup=False, emoji=False,
    )  # fmt: skip
    monkeypatch.setattr(render, "console", console)
    return out


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "pipe"])
@pytest.mark.parametrize("body", [BODY, "x" * 5000], ids=["words", "one-word"])
def test_a_table_never_cuts_an_id_or_a_receipt_in_two(
    monkeypatch: pytest.MonkeyPatch, terminal: bool, body: str
) -> None:
    from conveyor.cli import render

    out = console_into(monkeypatch, terminal=terminal, width=80)
    render.table(None, ["id", "receives", "body", "receipt"], [(ID, 1, body, RECEIPT)])
    lines = out.getvalue().splitlines()
    assert any(ID in line and RECEIPT in line for line in lines), out.getvalue()
    # the body folds: the table is as wide as the whole columns need, and a little more
    assert sum(body[:4] in line for line in lines) > 1
    assert max(map(len, lines)) <= len(ID) + len(RECEIPT) + render.TEXT_ROOM + 20


def test_a_table_that_fits_the_terminal_stays_within_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from conveyor.cli import render

    out = console_into(monkeypatch, terminal=True, width=100)
    render.table(None, ["id", "receives", "body"], [(ID, 1, BODY)])
    lines = out.getvalue().splitlines()
    assert max(map(len, lines)) <= 100
    assert any(ID in line for line in lines)
    assert sum("word" in line for line in lines) > 1


def test_receipts_received_into_a_pipe_can_be_acknowledged(store: str) -> None:
    # an 80-column pipe, as a script or `| less` reads it: each receipt on one line
    env = {**os.environ, "CONVEYOR_URL": store, "COLUMNS": "80"}
    got = subprocess.run(
        f"{sys.executable} -m conveyor -q bad receive --max 10 | cat", shell=True,
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    receipts = [
        cells[-2].strip()
        for line in got.stdout.splitlines()
        if len(cells := line.split("│")) > 2 and cells[1].strip().startswith("m-")
    ]
    assert len(receipts) == len(HOSTILE), got.stdout
    cli_run(store, "-q", "bad", "ack", *receipts)
    assert queued(store) == {"ready": 0, "in_flight": 0, "deleted": len(HOSTILE)}


def test_dlq_reads_every_page_and_shows_how_far_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conveyor.cli import admin

    monkeypatch.setattr(admin, "PAGE", 100)
    monkeypatch.setattr(admin, "SHOW_PROGRESS_FROM", 200)
    url = f"sqlite:///{tmp_path}/dlq.db"
    moved: list[str] = []
    with Client(url) as client:
        client.create_queue("dead")
        for name, n, error in (("a", 150, "timeout: slow"), ("b", 120, "bad sku: 7")):
            q = client.create_queue(
                name, dead_letter=DeadLetterPolicy(queue="dead", max_receive_count=5)
            )
            for i in range(n):
                moved.append(q.move_to_dlq(q.send(f"{name}{i}").id, error).id)
    runner = CliRunner()
    got = runner.invoke(cli, ["--store", url, "-o", "json", "-q", "a", "dlq"])
    assert got.exit_code == 0, got.output
    data = json.loads(got.stdout)
    assert data["total"] == 270
    assert data["by_source"] == {"a": 150, "b": 120}
    assert data["by_error"] == {"timeout": 150, "bad sku": 120}
    assert data["first_ids"] == moved[:100]
    shown_as_table = runner.invoke(cli, ["--store", url, "-q", "a", "dlq"])
    assert shown_as_table.exit_code == 0, shown_as_table.output
    assert "reading dead" in shown_as_table.stderr and "270/270" in shown_as_table.stderr
    assert "reading" not in got.stderr  # JSON: standard error stays quiet


def test_a_terminal_without_a_size_is_taken_as_80_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a pseudo-terminal made without a size (`script`, some CI runners) says 0 columns
    from conveyor.cli import render

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delitem(vars(render), "console", raising=False)
    monkeypatch.setattr(os, "get_terminal_size", lambda fd=0: os.terminal_size((0, 0)))
    assert render.terminal_width() == 80
    shown_pairs = render.pairs_text("dead-letter queue dead", [("total", 200000)])
    assert "│total│ 200000│" in shown_pairs


def test_ls_all_writes_every_page_as_it_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conveyor.cli import admin

    monkeypatch.setattr(admin, "PAGE", 100)
    url = f"sqlite:///{tmp_path}/ls.db"
    with Client(url) as client:
        q = client.create_queue("deep")
        ids = [q.send(f"m{i}").id for i in range(250)]
    runner = CliRunner()
    got = runner.invoke(cli, ["--store", url, "-o", "json", "-q", "deep", "ls", "--all"])
    assert got.exit_code == 0, got.output
    data = json.loads(got.stdout)
    assert [m["id"] for m in data["messages"]] == ids and data["next_after"] is None
    after = data["messages"][99]["sequence"]
    rest = runner.invoke(
        cli, ["--store", url, "-o", "json", "-q", "deep", "ls", "--all", "--after", str(after)]
    )
    assert [m["id"] for m in json.loads(rest.stdout)["messages"]] == ids[100:]
    table = runner.invoke(cli, ["--store", url, "-q", "deep", "ls", "--all"]).stdout
    lines = table.splitlines()
    assert [line.split("│")[1].strip() for line in lines[3:-1]] == ids
    assert sum("│ id " in line for line in lines) == 1  # one header for every page
    assert len({len(line) for line in lines}) == 1  # the pages line up
    # a page of a listing, and where the next one starts
    page = runner.invoke(cli, ["--store", url, "-o", "json", "-q", "deep", "ls", "--limit", "5"])
    first = json.loads(page.stdout)
    assert [m["id"] for m in first["messages"]] == ids[:5]
    shown_page = runner.invoke(cli, ["--store", url, "-q", "deep", "ls", "--limit", "5"]).stdout
    assert f"more: conveyor ls --after {first['next_after']}" in shown_page


def test_ls_tells_a_message_sent_while_it_lists_as_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message sent after `ls` began and before it read the queue is ready, not delayed:
    each page's states are told by the clock read once the page was read."""
    url = f"sqlite:///{tmp_path}/ls.db"
    with Client(url) as client:
        client.create_queue("now").send("before")
    real = Queue.peek

    def peek_after_a_send(self: Queue, *args: Any, **kwargs: Any) -> list[Message]:
        self.send("meanwhile")  # lands between the listing's start and its read
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Queue, "peek", peek_after_a_send)
    runner = CliRunner()
    for how in (["ls"], ["ls", "--all"]):
        got = runner.invoke(cli, ["--store", url, "-o", "json", "-q", "now", *how])
        assert got.exit_code == 0, got.output
        listed = json.loads(got.stdout)["messages"]
        assert len(listed) >= 2 and {m["state"] for m in listed} == {"ready"}, listed
        table = runner.invoke(cli, ["--store", url, "-q", "now", *how]).stdout
        assert "delayed" not in table and table.count("ready") >= 2, table


def test_ls_all_into_a_reader_that_stops_early(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/ls.db"
    with Client(url) as client:
        client.create_queue("deep").send_batch([b"x"] * 2500)
    cut = run_cli(url, "-q", "deep", "ls", "--all", shell=" | head -4")
    assert len(cut.stdout.splitlines()) == 4 and "│ id " in cut.stdout
    assert "Traceback" not in cut.stderr and "error" not in cut.stderr, cut.stderr


# -- install hints ------------------------------------------------------------------------


def blocked(*modules: str) -> str:
    """Python that makes `modules` fail to import, as if their extra were not installed."""
    return "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules)


# the CLI, run by `python -c` after the code that sets its process up
CLI = "from conveyor.cli import main\nsys.argv = ['conveyor', *sys.argv[1:]]\nmain()\n"


def run_python(code: str, *argv: str, env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-c", code + CLI, *argv], capture_output=True, text=True, cwd=str(ROOT),
        env={**os.environ, **(env or {})}, timeout=120,
    )  # fmt: skip


def test_a_missing_server_extra_is_one_line(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/s.db"
    proc = run_python(blocked("uvicorn", "fastapi"), "--store", store, "serve")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "needs the server extra" in lines[0]
    assert "pip install -e '.[server]'" in lines[0]  # run from the checkout it was installed from
    assert "Traceback" not in proc.stderr and "conveyor-mq" not in proc.stderr


# every module of the server extra, and uvloop (which uvicorn's standard extra brings)
SERVER_EXTRA = ("uvicorn", "fastapi", "httptools", "orjson", "prometheus_client", "statsd",
                "httpx", "cryptography", "uvloop")  # fmt: skip


def test_the_push_gateway_needs_no_server_extra(tmp_path: Path) -> None:
    """`conveyor gateway` is the standard library's asyncio alone: with no module of the
    server extra importable it serves SKMQ, and SIGTERM ends it with 0."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", blocked(*SERVER_EXTRA) + CLI, "--store",
         f"sqlite:///{tmp_path}/g.db", "gateway", "--listen", f"127.0.0.1:{port}"],
        cwd=str(ROOT),
    )  # fmt: skip
    try:
        wait_port(proc, port)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(b"ping\r\n\r\n")
            assert conn.recv(64).startswith(b"pong"), "the gateway answers a ping"
        proc.terminate()
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_missing_driver_names_the_extra_for_this_install() -> None:
    proc = run_python(blocked("psycopg"), "--store", "postgresql://127.0.0.1/none", "queue", "list")
    assert proc.returncode == 1
    assert "pip install -e '.[postgres]'" in proc.stderr, proc.stderr
    assert "psycopg is not installed" in proc.stderr
    assert "conveyor-mq" not in proc.stderr


def test_a_missing_pyspark_or_java_is_said_as_such(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/p.db"
    Client(url).create_queue("jobs")
    proc = run_python(blocked("pyspark"), "--store", url, "pipeline", "stats", "jobs")
    assert proc.returncode == 1
    assert "needs the spark extra (pyspark is not installed)" in proc.stderr, proc.stderr
    assert "pip install -e '.[spark]'" in proc.stderr and "Java" not in proc.stderr
    no_java = {"PATH": str(Path(sys.executable).parent), "JAVA_HOME": ""}
    proc = run_python("import sys\n", "--store", url, "pipeline", "stats", "jobs", env=no_java)
    assert proc.returncode == 1
    assert "Java 17+" in proc.stderr and "extra" not in proc.stderr, proc.stderr
