"""The `conveyor` command: queues, topics, messages and consumers on any store.

Global options come before the sub-command: ``conveyor --store URL --output json qstat``.
With no sub-command, the interactive shell opens.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from ..client import Client
from ..exceptions import ConveyorError, InvalidInput, QueueDoesNotExist, StoreUnavailable
from ..models import Consumer, DeadLetterPolicy, Delivery, QueueAttributes
from ..queues import Queue
from ..urls import DEFAULT_URL, redact
from . import render

F = TypeVar("F", bound=Callable[..., Any])


class State:
    """What the global options set; the client opens on first use."""

    def __init__(self, store: str, output: str, queue: str | None) -> None:
        self.store = store
        self.output = output
        self.queue_name = queue
        self._client: Client | None = None

    @property
    def json(self) -> bool:
        return self.output == "json"

    @property
    def client(self) -> Client:
        if self._client is None:
            if _missing_sqlite_file(self.store) is not None and _read_only_command():
                # nothing there to show: answer as an empty store would, creating no file
                self._client = Client("memory://")
                return self._client
            try:
                self._client = Client(self.store)
                self._client.list_queues()
            except StoreUnavailable as exc:
                raise StoreUnavailable(
                    f"cannot reach store {redact(self.store)}: {exc.message}"
                ) from exc
        return self._client

    def queue(self, name: str | None = None) -> Queue:
        name = name or self.queue_name
        if not name:
            raise click.UsageError("name a queue with --queue NAME (or `use NAME` in the shell)")
        try:
            return self.client.queue(self.client.find_queue(name))
        except QueueDoesNotExist:
            return self.client.queue(name)  # the command says what is missing, as it always has

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


pass_state = click.make_pass_decorator(State)

# commands that only look: they never create a store that is not there
READ_ONLY = {
    ("queue", "list"), ("queue", "show"), ("topic", "list"), ("qstat",), ("ls",), ("get",),
    ("dlq",), ("consumers",),
}  # fmt: skip


def _read_only_command() -> bool:
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return False
    return tuple(ctx.command_path.split()[1:]) in READ_ONLY


def _missing_sqlite_file(url: str) -> str | None:
    """The absolute path of a SQLite store's file when the URL names one that is absent
    (in a directory that exists)."""
    if not url.startswith("sqlite://"):
        return None
    path = url[len("sqlite://") :].split("?", 1)[0]
    path = path[1:] if path.startswith("/") else path
    if not path or path == ":memory:":
        return None
    path = os.path.abspath(path)
    if os.path.exists(path) or not os.path.isdir(os.path.dirname(path)):
        return None  # there, or a directory that is not: opening it says what is wrong
    return path


def fail(message: str, code: str = "Error") -> NoReturn:
    """Say what went wrong (as JSON on standard output with --output json) and exit 1."""
    ctx = click.get_current_context(silent=True)
    state = ctx.find_object(State) if ctx is not None else None
    if state is not None and state.json:
        click.echo(json.dumps({"error": message, "code": code}))
    else:
        render.error(message)
    sys.exit(1)


OUTPUT = click.Choice(["table", "json"])


class OutputCommand(click.Command):
    """A command that also takes -o/--output itself, as the global option."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.append(
            click.Option(
                ["--output", "-o", "output_here"],
                type=OUTPUT,
                help="Tables for people, JSON for scripts (as the global --output).",
            )
        )

    def invoke(self, ctx: click.Context) -> Any:
        output = ctx.params.pop("output_here", None)
        state = ctx.find_object(State)
        if output is not None and state is not None:
            state.output = output
        return super().invoke(ctx)


LATER = {"serve": "serve", "gateway": "serve", "pipeline": "pipeline"}
"""Commands whose module is imported only when one of them is asked for (or all are, for
`--help` and the shell): the everyday commands start without them."""


class ConveyorGroup(click.Group):
    """Turns Conveyor errors into `error: ...` and exit code 1 (usage errors exit 2); its
    commands and sub-groups take -o/--output too."""

    command_class = OutputCommand
    group_class = type

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in LATER:
            importlib.import_module(f"{__package__}.{LATER[cmd_name]}")  # registers it
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *LATER})

    def all_commands(self) -> Mapping[str, click.Command]:
        """Every command, those in `LATER` imported."""
        for module in sorted(set(LATER.values())):
            importlib.import_module(f"{__package__}.{module}")
        return self.commands

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ConveyorError as exc:
            fail(exc.message, exc.code)
        except json.JSONDecodeError as exc:
            fail(f"not valid JSON: {exc}", "InvalidJSON")
        except OSError as exc:
            fail(str(exc), "OSError")


def queue_option(f: F) -> F:
    return click.option("--queue", "-q", "queue_name", help="Queue to act on.")(f)


@click.group(
    cls=ConveyorGroup,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--store",
    envvar="CONVEYOR_URL",
    default=DEFAULT_URL,
    show_default=True,
    help="Store URL (env CONVEYOR_URL): sqlite:///file.db, memory://, postgresql://...",
)
@click.option(
    "--output",
    "-o",
    type=OUTPUT,
    default="table",
    show_default=True,
    help="Tables for people, JSON for scripts.",
)
@click.option("--queue", "-q", "queue_name", help="Queue the message commands act on.")
@click.version_option(package_name="conveyor-mq", prog_name="conveyor")
@click.pass_context
def cli(ctx: click.Context, store: str, output: str, queue_name: str | None) -> None:
    """Conveyor: message queues with SQS semantics on the storage you already run.

    Run without a command for the interactive shell.
    """
    state = State(store, output, queue_name)
    ctx.obj = state
    ctx.call_on_close(state.close)
    if ctx.invoked_subcommand is None:
        from .shell import run_shell

        run_shell(state)


# -- queues -------------------------------------------------------------------------------


@cli.group()
def queue() -> None:
    """Create, inspect, change and delete queues."""


def attribute_options(f: F) -> F:
    options = [
        click.option(
            "--visibility-timeout", type=float, help="Seconds a received message stays hidden (30)."
        ),
        click.option("--delay", type=float, help="Seconds before a new message is visible (0)."),
        click.option(
            "--retention", type=float, help="Seconds messages are kept (345600 = 4 days)."
        ),
        click.option("--max-message-bytes", type=int, help="Largest body + attributes (1048576)."),
        click.option("--receive-wait", type=float, help="Default long-poll wait in seconds (0)."),
        click.option("--dead-letter-queue", help="Queue that takes messages received too often."),
        click.option(
            "--max-receive-count",
            type=int,
            help="Receives before dead-lettering (with --dead-letter-queue).",
        ),
        click.option(
            "--content-based-dedup/--no-content-based-dedup",
            default=None,
            help="FIFO: de-duplicate by body hash.",
        ),
        click.option(
            "--dedup-per-group/--no-dedup-per-group",
            default=None,
            help="FIFO: de-duplicate within each message group, not across the queue.",
        ),
        click.option(
            "--delivery", type=click.Choice([d.value for d in Delivery]), help="Delivery guarantee."
        ),
        click.option(
            "--archive/--no-archive", default=None, help="Keep deleted messages for analytics."
        ),
        click.option("--rate-limit", type=float, help="Most deliveries per second."),
        click.option(
            "--compress-over", type=int, help="zlib-compress bodies larger than this many bytes."
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _changes(current: QueueAttributes | None, **opts: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in (
        "visibility_timeout",
        "delay",
        "retention",
        "max_message_bytes",
        "receive_wait",
        "content_based_dedup",
        "dedup_per_group",
        "archive",
        "rate_limit",
        "compress_over",
    ):
        if opts.get(key) is not None:
            out[key] = opts[key]
    if opts.get("delivery"):
        out["delivery"] = Delivery(opts["delivery"])
    dlq, count = opts.get("dead_letter_queue"), opts.get("max_receive_count")
    if dlq is not None or count is not None:
        old = current.dead_letter if current else None
        queue_name = dlq or (old.queue if old else None)
        if queue_name is None:
            raise InvalidInput("--max-receive-count needs --dead-letter-queue")
        out["dead_letter"] = DeadLetterPolicy(
            queue=queue_name, max_receive_count=count or (old.max_receive_count if old else 5)
        )
    return out


def show_attributes(state: State, name: str) -> None:
    info = state.client.queue_info(name, fresh=True)
    data = render.attributes_dict(info.attributes)
    if state.json:
        render.emit_json(
            {"name": name, "created_at": render.when(info.created_at), "attributes": data}
        )
    else:
        # tags and the settings other APIs keep (SQS's Policy, ...) a row each, where set
        tags, settings = data.pop("tags"), data.pop("settings")
        rows = [("created_at", render.when(info.created_at)), *data.items()]
        rows += [(f"tag {k}", v) for k, v in sorted(tags.items())]
        rows += [(f"SQS {k}", v) for k, v in sorted(settings.items())]
        render.pairs(f"queue {name}", rows)


@queue.command("create")
@click.argument("name")
@click.option("--fifo", is_flag=True, help="FIFO queue (the name must end in .fifo).")
@attribute_options
@pass_state
def queue_create(state: State, /, name: str, fifo: bool, **opts: Any) -> None:
    """Create a queue (idempotent when the attributes are equal)."""
    changes = _changes(None, **opts)
    state.client.create_queue(name, fifo=fifo or name.endswith(".fifo"), **changes)
    show_attributes(state, name)


@queue.command("set")
@click.argument("name")
@attribute_options
@pass_state
def queue_set(state: State, /, name: str, **opts: Any) -> None:
    """Change a queue's attributes."""
    current = state.client.queue_info(name, fresh=True).attributes
    changes = _changes(current, **opts)
    if not changes:
        raise click.UsageError("nothing to change: pass at least one attribute option")
    state.client.set_attributes(name, **changes)
    show_attributes(state, name)


@queue.command("show")
@click.argument("name", required=False)
@pass_state
def queue_show(state: State, name: str | None) -> None:
    """A queue's attributes (NAME, or the queue of --queue / the shell's `use`)."""
    show_attributes(state, state.queue(name).name)


@queue.command("list")
@click.option("--prefix", default="", help="Only names starting with this.")
@pass_state
def queue_list(state: State, prefix: str) -> None:
    """Queues with their message counts."""
    names = state.client.list_queues(prefix)
    stats = [state.client.queue(n).stats() for n in names]
    if state.json:
        render.emit_json({"queues": [render.stats_dict(s) for s in stats]})
        return
    render.table(
        None,
        ["queue", "ready", "delayed", "in flight", "oldest"],
        [(s.queue, s.ready, s.delayed, s.in_flight, render.age(s.oldest_age)) for s in stats],
    )


@queue.command("delete")
@click.argument("name")
@click.option("--yes", "-y", is_flag=True, help="Do not ask.")
@pass_state
def queue_delete(state: State, name: str, yes: bool) -> None:
    """Delete a queue and all its messages."""
    state.client.queue_info(name, fresh=True)
    if not yes and not click.confirm(f"delete queue {name} and all its messages?"):
        raise click.Abort()
    state.client.delete_queue(name)
    _done(state, {"deleted": name}, f"deleted queue {name}")


def _done(state: State, data: dict[str, Any], text: str) -> None:
    if state.json:
        render.emit_json(data)
    else:
        render.say(text)


# -- topics -------------------------------------------------------------------------------


@cli.group()
def topic() -> None:
    """Topics fan a message out to every subscribed queue."""


@topic.command("create")
@click.argument("name")
@pass_state
def topic_create(state: State, name: str) -> None:
    created = state.client.create_topic(name)
    _done(
        state,
        {"topic": name, "created": created},
        f"created topic {name}" if created else f"topic {name} exists",
    )


@topic.command("delete")
@click.argument("name")
@pass_state
def topic_delete(state: State, name: str) -> None:
    state.client.delete_topic(name)
    _done(state, {"deleted": name}, f"deleted topic {name}")


@topic.command("list")
@pass_state
def topic_list(state: State) -> None:
    topics = {t: state.client.topic_queues(t) for t in state.client.list_topics()}
    if state.json:
        render.emit_json({"topics": [{"topic": t, "queues": q} for t, q in topics.items()]})
    else:
        render.table(None, ["topic", "queues"], [(t, ", ".join(q)) for t, q in topics.items()])


@topic.command("subscribe")
@click.argument("topic_name")
@click.argument("queue_name")
@pass_state
def topic_subscribe(state: State, topic_name: str, queue_name: str) -> None:
    state.client.subscribe(topic_name, queue_name)
    _done(
        state,
        {"topic": topic_name, "queues": state.client.topic_queues(topic_name)},
        f"{queue_name} subscribed to {topic_name}",
    )


@topic.command("unsubscribe")
@click.argument("topic_name")
@click.argument("queue_name")
@pass_state
def topic_unsubscribe(state: State, topic_name: str, queue_name: str) -> None:
    state.client.unsubscribe(topic_name, queue_name)
    _done(
        state,
        {"topic": topic_name, "queues": state.client.topic_queues(topic_name)},
        f"{queue_name} unsubscribed from {topic_name}",
    )


@topic.command("publish")
@click.argument("topic_name")
@click.argument("body", required=False)
@click.option("--file", "file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--attr", "attrs", multiple=True, metavar="K=V", help="Message attribute (repeat).")
@pass_state
def topic_publish(
    state: State, topic_name: str, body: str | None, file: Path | None, attrs: tuple[str, ...]
) -> None:
    """Send one message to every queue subscribed to TOPIC."""
    data = read_body(body, file)
    out = state.client.publish(topic_name, data, attributes=parse_attrs(attrs))
    ids = {q: r.id for q, r in out.items()}
    if state.json:
        render.emit_json(ids)
    else:
        render.table(f"published to {topic_name}", ["queue", "message id"], ids.items())


# -- consumers ----------------------------------------------------------------------------


@cli.group()
def consumer() -> None:
    """Register a consumer, beat its heart, unregister it (`consumers` lists them)."""


def _show_consumer(state: State, c: Consumer) -> None:
    data = render.consumer_dict(c, time.time())
    if state.json:
        render.emit_json(data)
    else:
        render.pairs(f"consumer {c.id}", data.items())


@consumer.command("register")
@click.option("--id", "consumer_id", help="Its id (default: a new one).")
@queue_option
@click.option(
    "--timeout",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds without a heartbeat before it counts as gone.",
)
@click.option("--info", "infos", multiple=True, metavar="K=V", help="What to keep with it.")
@pass_state
def consumer_register(
    state: State, consumer_id: str | None, queue_name: str | None, timeout: float,
    infos: tuple[str, ...],
) -> None:  # fmt: skip
    """Register (or re-register) a consumer; its heartbeat is now."""
    c = state.client.register_consumer(
        consumer_id, queue=queue_name or state.queue_name, timeout=timeout,
        info=parse_attrs(infos),
    )  # fmt: skip
    _show_consumer(state, c)


@consumer.command("heartbeat")
@click.argument("consumer_id")
@pass_state
def consumer_heartbeat(state: State, consumer_id: str) -> None:
    """Refresh a consumer's heartbeat."""
    _show_consumer(state, state.client.heartbeat(consumer_id))


@consumer.command("unregister")
@click.argument("consumer_id")
@pass_state
def consumer_unregister(state: State, consumer_id: str) -> None:
    """Forget a consumer."""
    state.client.unregister_consumer(consumer_id)
    _done(state, {"unregistered": consumer_id}, f"unregistered {consumer_id}")


@cli.command()
@queue_option
@pass_state
def consumers(state: State, queue_name: str | None) -> None:
    """Live consumers with their last heartbeat: the SDK's workers, and the push gateway's
    consumers (their app, how they get pushes, weight and messages in flight)."""
    now = time.time()
    found = state.client.list_consumers(queue_name or state.queue_name)
    if state.json:
        render.emit_json({"consumers": [render.consumer_dict(c, now) for c in found]})
    else:
        render.table(
            None,
            ["id", "queue", "via", "mode", "weight", "in flight", "last heartbeat", "age"],
            [
                (
                    c.id,
                    c.queue,
                    c.info.get("via", "worker"),
                    c.info.get("mode"),
                    c.info.get("weight"),
                    c.info.get("in_flight"),
                    render.when(c.heartbeat_at),
                    render.age(now - c.heartbeat_at),
                )
                for c in found
            ],
        )


# -- messages -----------------------------------------------------------------------------


def read_body(body: str | None, file: Path | None) -> bytes:
    if body is not None and file is not None:
        raise click.UsageError("give the body as an argument or with --file, not both")
    if file is not None:
        return file.read_bytes()
    if body is not None:
        return body.encode()
    if sys.stdin.isatty():
        raise click.UsageError("give a body: as an argument, with --file, or on standard input")
    return sys.stdin.buffer.read()


def compact_json(data: bytes) -> bytes:
    """A body given with --json: it must be JSON, and travels compact."""
    return json.dumps(json.loads(data), separators=(",", ":")).encode()


def parse_attrs(attrs: tuple[str, ...]) -> dict[str, str | int | float]:
    out: dict[str, str | int | float] = {}
    for item in attrs:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.UsageError(f"--attr takes KEY=VALUE, got {item!r}")
        out[key] = value
    return out


@cli.command()
@click.argument("body", required=False)
@queue_option
@click.option("--file", "file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="The body must be JSON (sent compact).")
@click.option("--delay", type=float, help="Seconds before the message is visible.")
@click.option("--group", "group_id", help="FIFO message group.")
@click.option("--dedup-id", help="FIFO de-duplication id.")
@click.option("--priority", type=int, default=0, show_default=True, help="Higher first.")
@click.option("--attr", "attrs", multiple=True, metavar="K=V", help="Message attribute (repeat).")
@click.option("--id", "message_id", help="Message id (a second send with it is a duplicate).")
@click.option(
    "--deadline",
    type=float,
    help="Seconds to process it in: after that an at-most-once queue drops it, and an"
    " at-least-once queue lets another consumer take it.",
)
@pass_state
def send(
    state: State,
    body: str | None,
    queue_name: str | None,
    file: Path | None,
    as_json: bool,
    delay: float | None,
    group_id: str | None,
    dedup_id: str | None,
    priority: int,
    attrs: tuple[str, ...],
    message_id: str | None,
    deadline: float | None,
) -> None:
    """Send a message (BODY, --file, or standard input)."""
    data = read_body(body, file)
    if as_json:
        data = compact_json(data)
    result = state.queue(queue_name).send(
        data,
        id=message_id,
        delay=delay,
        group_id=group_id,
        dedup_id=dedup_id,
        priority=priority,
        attributes=parse_attrs(attrs),
        deadline=None if deadline is None else state.client.clock.now() + deadline,
    )
    out = {"id": result.id, "duplicate": result.duplicate}
    if result.sequence is not None:
        out["sequence"] = result.sequence
    _done(state, out, f"{'duplicate of' if result.duplicate else 'sent'} {result.id}")


@cli.command()
@queue_option
@click.option("--max", "max_messages", type=int, default=1, show_default=True, help="1 to 10.")
@click.option("--wait", type=float, default=0, show_default=True, help="Long-poll seconds (0-20).")
@click.option("--visibility", type=float, help="Visibility timeout for these messages.")
@click.option("--ack", is_flag=True, help="Delete what was received.")
@pass_state
def receive(
    state: State,
    queue_name: str | None,
    max_messages: int,
    wait: float,
    visibility: float | None,
    ack: bool,
) -> None:
    """Receive messages (they stay hidden for the visibility timeout unless --ack).

    With --ack a message is deleted only once it has been written out in full: if the output
    cannot be written (a closed pipe, a crash), nothing is deleted and the messages come
    back after their visibility timeout."""
    q = state.queue(queue_name)
    got = q.receive(max_messages, wait=wait, visibility_timeout=visibility)
    now = time.time()
    if state.json:
        written = render.written(
            lambda: render.emit_json(
                {"messages": [render.message_dict(m, now) for m in got], "acked": ack}
            )
        )
    elif not got:
        written = render.written(lambda: render.say("no messages"))
    else:
        rows = [
            (
                m.id,
                m.receive_count,
                render.body_text(m.body) or "<binary>",
                m.receipt if not ack else "yes",
            )
            for m in got
        ]
        columns = ["id", "receives", "body", "receipt" if not ack else "acked"]
        written = render.written(lambda: render.table(None, columns, rows))
    if not written:
        if ack and got:
            render.error(
                f"the output could not be written: {len(got)} message(s) were not acknowledged"
                " and come back after their visibility timeout"
            )
        sys.exit(1)
    if ack and got:
        failed = [
            f"{m.id}: {r.error}"
            for m, r in zip(got, q.delete_batch([m.receipt or "" for m in got]), strict=True)
            if r.error is not None
        ]
        if failed:
            fail("acknowledging failed for " + "; ".join(failed))


@cli.command()
@click.argument("receipts", nargs=-1, required=True)
@queue_option
@pass_state
def ack(state: State, receipts: tuple[str, ...], queue_name: str | None) -> None:
    """Delete received messages by receipt."""
    q = state.queue(queue_name)
    failed = []
    for start in range(0, len(receipts), 10):
        for r in q.delete_batch(list(receipts[start : start + 10])):
            if r.error is not None:
                failed.append(str(r.error))
    if failed:
        fail("; ".join(failed))
    _done(state, {"acked": len(receipts)}, f"acked {len(receipts)}")


from . import admin, ops  # noqa: E402,F401  (registers their commands; LATER: the others)
