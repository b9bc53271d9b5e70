"""What the command line imports before it does anything: each command imports what it
needs alone (`python -m bench.cli` measures the times), and the package's public names load
on first use."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import conveyor

HEAVY = ("asyncio", "rich", "uvicorn", "fastapi", "boto3", "psycopg", "redis", "pyspark")


def imported(tmp_path: Path, *args: str) -> set[str]:
    """The top-level modules a `conveyor` command imports (it runs for real)."""
    env = {**os.environ, "CONVEYOR_URL": f"sqlite:///{tmp_path}/start.db"}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "conveyor", *args],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


def tops(names: set[str]) -> set[str]:
    return {name.split(".")[0] for name in names}


def test_help_imports_no_store_and_no_rich(tmp_path: Path) -> None:
    names = imported(tmp_path, "--help")
    assert not tops(names) & set(HEAVY), sorted(tops(names) & set(HEAVY))
    assert "conveyor.backends.sql.sqlite" not in names and "sqlite3" not in names


@pytest.mark.parametrize("command", [["send", "x"], ["qstat"], ["ls"]])
def test_everyday_commands_import_neither_asyncio_nor_rich(
    tmp_path: Path, command: list[str]
) -> None:
    subprocess.run(
        [sys.executable, "-m", "conveyor", "--store", f"sqlite:///{tmp_path}/start.db",
         "queue", "create", "q"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    names = imported(tmp_path, "-q", "q", *command)
    assert "sqlite3" in names and "conveyor.backends.sql.store" in names  # it did its work
    assert not names & {"conveyor.cli.serve", "conveyor.cli.pipeline", "multiprocessing"}
    heavy = {"asyncio", "uvicorn", "fastapi", "boto3", "psycopg", "redis", "pyspark"}
    if command != ["ls"]:  # ls draws a table of many columns with Rich
        heavy.add("rich")
    assert not tops(names) & heavy, sorted(tops(names) & heavy)


def test_the_commands_imported_later_are_all_named_where_they_are_found() -> None:
    """A command of a module the CLI imports only when asked (`LATER`) is listed by `--help`
    and found by name before its module is imported: each names its module there."""
    from conveyor.cli.app import LATER, cli

    for name, command in cli.all_commands().items():
        assert command.callback is not None
        module = command.callback.__module__.rsplit(".", 1)[-1]
        assert (LATER.get(name) == module) == (module in set(LATER.values())), name
    out = subprocess.run(
        [sys.executable, "-m", "conveyor", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert all(f"  {name} " in out for name in LATER), out


def test_the_public_names_are_all_there_and_load_on_first_use() -> None:
    """`conveyor.__all__` is the package's public API: every name in it resolves, and no
    public name (not starting with _) is left out of it."""
    for name in conveyor.__all__:
        assert getattr(conveyor, name) is not None, name
    public = {n for n in dir(conveyor) if not n.startswith("_")}
    assert public == set(conveyor.__all__) - {"__version__"}
    assert conveyor.__version__
    with pytest.raises(AttributeError):
        conveyor.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
