"""The interactive shell: `conveyor` with no sub-command.

Every one-shot command works here too (``send hello``, ``ls --state ready``). On top:
``use QUEUE`` picks the queue, ``id ID`` enters message mode (``id`` alone leaves it),
where ``system`` (``sys``), ``data``, ``info``, ``reset``, ``redrive``, ``delete``, ``fail``,
``invalid`` and ``update`` act on that message. ``qstats`` and ``et`` are aliases of ``qstat`` and
``enqueue-test``. An error is printed and the shell goes on.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable

import click
from prompt_toolkit import PromptSession
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.history import FileHistory, InMemoryHistory

from ..exceptions import ConveyorError
from ..urls import redact
from . import render
from .app import State, cli

MESSAGE_COMMANDS = (
    "system",
    "sys",
    "data",
    "info",
    "reset",
    "redrive",
    "delete",
    "fail",
    "invalid",
    "update",
)
SHELL_COMMANDS = ("help", "h", "?", "quit", "q", "exit", "use", "id", "qstats", "et", "clear")
ALIASES = {"qstats": "qstat", "et": "enqueue-test"}

HELP = """\
commands (any `conveyor` command works here, with or without the word conveyor):
  use QUEUE              act on QUEUE from now on
  queue list|create|show|set|delete, topic ..., consumers, consumer register|heartbeat|unregister
  send BODY [--priority N --delay S --attr K=V ...]     receive [--max N --ack]
  ls [--state ready|delayed|in_flight] [--limit N]      qstat (qstats)   dlq
  purge   enqueue-test (et)   redrive --all [--rate N]
  id ID                  message mode: system (sys), data, info, reset, redrive,
                         delete, fail, invalid, update; `id` alone leaves it
  clear   help   quit"""


class ShellCompleter(Completer):
    def __init__(self, state: State) -> None:
        self.state = state

    def _queues(self) -> list[str]:
        try:
            return self.state.client.list_queues()
        except ConveyorError:
            return []

    def _ids(self) -> list[str]:
        if not self.state.queue_name:
            return []
        try:
            return [m.id for m in self.state.queue().peek(200)]
        except (ConveyorError, click.UsageError):
            return []

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterable[Completion]:
        text = document.text_before_cursor
        words = text.split()
        word = document.get_word_before_cursor(WORD=True)
        commands = cli.all_commands()
        if len(words) == 0 or (len(words) == 1 and not text.endswith(" ")):
            options: Iterable[str] = sorted({*commands, *SHELL_COMMANDS, *MESSAGE_COMMANDS})
        else:
            previous = words[-1] if text.endswith(" ") else words[-2]
            if previous in ("use", "--queue", "-q", "--to", "subscribe"):
                options = self._queues()
            elif previous in ("id", "--id"):
                options = self._ids()
            elif words[0] in commands and isinstance(commands[words[0]], click.Group):
                group = commands[words[0]]
                assert isinstance(group, click.Group)
                options = group.commands if len(words) <= 2 else self._queues()
            else:
                options = []
        for option in options:
            if option.startswith(word):
                yield Completion(option, start_position=-len(word))


class Shell:
    def __init__(self, state: State) -> None:
        self.state = state
        self.message_id: str | None = None

    @property
    def prompt(self) -> str:
        where = self.state.queue_name or "-"
        if self.message_id:
            return f"{where} ID {self.message_id} >> Enter command: "
        return f"{where} >> Enter command: "

    def run_cli(self, words: list[str]) -> bool:
        """Run a command as `conveyor` would; whether it succeeded."""
        args = ["--store", self.state.store, "--output", self.state.output]
        if self.state.queue_name:
            args += ["--queue", self.state.queue_name]
        try:
            cli.main(args=args + words, prog_name="conveyor", standalone_mode=False)
        except click.exceptions.Abort:
            render.say("aborted")
            return False
        except click.ClickException as exc:
            exc.show()
            return False
        except SystemExit as exc:
            return exc.code in (0, None)
        return True

    def handle(self, line: str) -> bool:
        """Run one line; False to leave the shell."""
        try:
            words = shlex.split(line)
        except ValueError as exc:
            render.error(f"{exc}")
            return True
        if words[:1] == ["conveyor"]:  # a command pasted whole: from a hint, the docs
            words = words[1:]
            if words[:1] and words[0].startswith("-"):  # its global options first
                self.run_cli(words)
                return True
        if not words:
            return True
        command, rest = words[0], words[1:]
        command = ALIASES.get(command, command)
        if command in ("quit", "q", "exit"):
            return False
        if command in ("help", "h", "?"):
            render.say(HELP)
        elif command == "clear":
            render.console.clear()
        elif command == "use":
            if len(rest) != 1:
                render.error("use QUEUE")
            elif self._exists(rest[0]):
                self.state.queue_name = rest[0]
                self.message_id = None
        elif command == "id":
            if not rest:
                self.message_id = None
            elif self._found(rest[0]):  # a missing message leaves the mode as it was
                self.message_id = rest[0]
                self.run_cli(["get", "--id", self.message_id])
        elif command in MESSAGE_COMMANDS and (self.message_id or command not in cli.all_commands()):
            self.message_command(command, rest)
        elif command in cli.all_commands():
            if self.run_cli([command, *rest]) and command == "receive":
                self.run_cli(["qstat"])
        else:
            render.error(f"unknown command {command!r}: type help")
        return True

    def _exists(self, queue: str) -> bool:
        try:
            self.state.client.queue_info(queue)
        except ConveyorError as exc:
            render.error(f"{exc.message} (queue list shows the queues)")
            return False
        return True

    def _found(self, message_id: str) -> bool:
        try:
            self.state.queue().get(message_id)
        except (ConveyorError, click.UsageError) as exc:
            render.error(f"{getattr(exc, 'message', exc)}")
            return False
        return True

    def message_command(self, command: str, rest: list[str]) -> None:
        if not self.message_id:
            render.error(f"{command} acts on one message: select it first with id ID")
            return
        mid = self.message_id
        if command in ("system", "sys", "data", "info"):
            try:
                m = self.state.queue().get(mid)
            except (ConveyorError, click.UsageError) as exc:
                render.error(f"{getattr(exc, 'message', exc)}")
                return
            data = render.message_dict(m)
            if command == "data":
                render.say(data.get("body", data.get("body_base64")))
            elif command == "info":
                render.emit_json(data) if self.state.json else render.pairs(None, data.items())
            else:
                system = {
                    k: v for k, v in data.items() if k not in ("body", "body_base64", "attributes")
                }
                render.emit_json(system) if self.state.json else render.pairs(None, system.items())
            return
        ok = self.run_cli([command, "--id", mid, *rest])
        if not ok:
            return  # a usage error or a failure: said already, no stats after it
        if command in ("delete", "fail", "invalid"):
            self.run_cli(["qstat"])
        if command in ("delete", "invalid", "redrive"):
            self.message_id = None


def run_shell(state: State) -> None:
    path = os.path.expanduser("~/.conveyor_history")
    try:
        history: FileHistory | InMemoryHistory = FileHistory(path)
    except OSError:
        history = InMemoryHistory()
    session: PromptSession[str] = PromptSession(
        history=history, completer=ShellCompleter(state), complete_while_typing=False
    )
    shell = Shell(state)
    render.say(f"conveyor shell on {redact(state.store)} — type help, or quit")
    while True:
        try:
            line = session.prompt(shell.prompt)
        except KeyboardInterrupt:
            continue
        except EOFError:
            break
        if not shell.handle(line):
            break
