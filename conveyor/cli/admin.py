"""Admin commands: look into a queue and repair it by hand, on any store."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import click
from click.shell_completion import get_completion_class

from ..client import Client
from ..exceptions import InvalidInput, MessageNotFound
from ..models import Message, MessageState
from ..queues import Queue
from ..urls import redact
from . import render
from .app import (
    State,
    _done,
    cli,
    compact_json,
    parse_attrs,
    pass_state,
    queue_option,
    read_body,
)

TEST_IDS = ("A-101", "A-202", "A-303", "A-404")


def _id_option(f: Any) -> Any:
    return click.option("--id", "message_id", required=True, help="Message id.")(f)


def show_message(state: State, m: Message) -> None:
    data = render.message_dict(m)
    if state.json:
        render.emit_json(data)
    else:
        render.pairs(f"message {m.id}", data.items())


PAGE = 1000  # messages a look at a queue reads at a time
SHOW_PROGRESS_FROM = 10_000  # messages to read before a command shows how far it is


def pages(
    q: Queue, state_filter: MessageState | None = None, after: int = 0
) -> Iterator[list[Message]]:
    """A queue's messages in send order (those after the sequence `after`), a page at a
    time."""
    while True:
        page = q.peek(PAGE, state=state_filter, after=after)
        if page:
            yield page
        if len(page) < PAGE:
            return
        after = page[-1].sequence


def reading(
    state: State, what: str, total: int, found: Iterable[list[Message]], *, show: bool = True
) -> Iterator[list[Message]]:
    """`found`'s pages, with a progress bar on standard error for reading about `total`
    messages (none for JSON, a short read, or where not `show`)."""
    if not show or state.json or total < SHOW_PROGRESS_FROM:
        yield from found
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(
        TextColumn(what),
        BarColumn(),
        MofNCompleteColumn(),
        console=render.errors,
        redirect_stdout=False,  # what is written meanwhile goes where it was going
        redirect_stderr=False,
    ) as progress:
        task = progress.add_task(what, total=total)
        for page in found:
            yield page
            progress.advance(task, len(page))


@cli.command()
@queue_option
@click.option("--state", "state_filter", type=click.Choice([s.value for s in MessageState]))
@click.option("--limit", type=click.IntRange(1, 10000), default=10, show_default=True)
@click.option("--after", type=int, default=0, help="Sequence to start after (paging).")
@click.option("--all", "everything", is_flag=True, help="Every page.")
@pass_state
def ls(
    state: State,
    queue_name: str | None,
    state_filter: str | None,
    limit: int,
    after: int,
    everything: bool,
) -> None:
    """Messages with their state, receive count and age, without receiving them."""
    q = state.queue(queue_name)
    st = MessageState(state_filter) if state_filter else None
    clock = state.client.clock.now  # read as each page is read (`_listing`)
    more: int | None = None
    if everything:
        # written a page at a time as read (a queue of millions is never held in memory);
        # a progress bar where the listing goes elsewhere than the terminal
        shows = not sys.stdout.isatty()
        counts = q.stats()
        total = {
            None: counts.total,
            MessageState.READY: counts.ready,
            MessageState.DELAYED: counts.delayed,
            MessageState.IN_FLIGHT: counts.in_flight,
        }[st]
        every = reading(state, f"reading {q.name}", total, pages(q, st, after), show=shows)
        written = _listing(state, every, clock, more)
    else:
        found = q.peek(limit + 1, state=st, after=after)
        more = found[limit - 1].sequence if len(found) > limit else None
        written = _listing(state, [found[:limit]], clock, more)
    if written and more is not None and not state.json:
        render.say(f"more: conveyor ls --after {more}")


def _listing(
    state: State, found: Iterable[list[Message]], clock: Callable[[], float], more: int | None
) -> bool:
    """`ls`'s messages, page by page: JSON, or a table. Each page's states and ages are
    told by the clock read once the page was read: a message sent after an earlier read of
    the clock would show as delayed, not yet visible then."""
    read = ((page, clock()) for page in found)
    if state.json:
        dicts = ([render.message_dict(m, now, with_body=False) for m in page] for page, now in read)
        return render.stream_json("messages", dicts, {"next_after": more})
    rows = (
        [
            (
                m.id,
                m.state(now).value,
                m.receive_count,
                m.priority,
                # a message some producers date ahead (DynamoMQ's delays) has no age yet
                render.age(now - m.sent_at) if m.sent_at <= now else "-",
                render.age(m.visible_at - now) if m.visible_at > now else "now",
                m.sequence,
            )
            for m in page
        ]
        for page, now in read
    )
    columns = ["id", "state", "receives", "priority", "age", "visible in", "sequence"]
    return render.stream_table(columns, rows)


@cli.command()
@queue_option
@_id_option
@pass_state
def get(state: State, queue_name: str | None, message_id: str) -> None:
    """One message, whole."""
    show_message(state, state.queue(queue_name).get(message_id))


def qstat_data(q: Queue) -> dict[str, Any]:
    s = q.stats()
    data = render.stats_dict(s)
    data["first_ids"] = [m.id for m in q.peek(100, state=MessageState.READY)]
    data["first_ids_in_flight"] = [m.id for m in q.peek(100, state=MessageState.IN_FLIGHT)]
    return data


def qstat_rows(data: dict[str, Any]) -> list[tuple[str, Any]]:
    """What the queue holds now, apart from what happened to it since it was created."""
    rows: list[tuple[str, Any]] = [("now", "")]
    for key, label in (("ready", "ready"), ("delayed", "delayed"), ("in_flight", "in flight")):
        rows.append((f"  {label}", data[key]))
    rows.append(("  oldest", render.age(data["oldest_age"])))
    rows.append(("totals since created", ""))
    for key, value in data["totals"].items():
        rows.append((f"  {key.replace('_', '-')}", value))
    rows.append(("first ids", " ".join(data["first_ids"][:10]) or "-"))
    rows.append(("first in flight", " ".join(data["first_ids_in_flight"][:10]) or "-"))
    return rows


@cli.command()
@queue_option
@click.option("--watch", type=float, default=None, help="Refresh every N seconds until Ctrl-C.")
@pass_state
def qstat(state: State, queue_name: str | None, watch: float | None) -> None:
    """Counts by state, oldest age, totals and the first ids."""
    q = state.queue(queue_name)
    if watch is None or state.json:
        data = qstat_data(q)
        if state.json:
            render.emit_json(data)
        else:
            render.pairs(f"queue {data['queue']}", qstat_rows(data))
        return
    if watch <= 0:
        raise InvalidInput("--watch takes a positive number of seconds")
    from rich.live import Live
    from rich.text import Text

    def shown() -> Text:
        data = qstat_data(q)
        return Text(render.pairs_text(f"queue {data['queue']}", qstat_rows(data)).rstrip("\n"))

    try:
        with Live(shown(), console=render.console, auto_refresh=False) as live:
            while True:
                time.sleep(watch)
                live.update(shown(), refresh=True)
    except KeyboardInterrupt:
        pass


@cli.command()
@queue_option
@pass_state
def dlq(state: State, queue_name: str | None) -> None:
    """Dead-letter stats, by source queue (of the queue's DLQ, or of the DLQ named)."""
    q = state.queue(queue_name)
    policy = q.attributes.dead_letter
    dead = state.client.queue(policy.queue) if policy else q
    by_source: Counter[str] = Counter()
    by_error: Counter[str] = Counter()
    first_ids: list[str] = []
    total = 0
    # page by page, counted as read: a dead-letter queue of millions is not held in memory
    for page in reading(state, f"reading {dead.name}", dead.stats().total, pages(dead)):
        total += len(page)
        by_source.update(m.source_queue or "-" for m in page)
        by_error.update((m.error or "-").split(":")[0] for m in page)
        first_ids += [m.id for m in page[: 100 - len(first_ids)]]
    data = {
        "dead_letter_queue": dead.name,
        "total": total,
        "by_source": dict(by_source),
        "by_error": dict(by_error),
        "first_ids": first_ids,
    }
    if state.json:
        render.emit_json(data)
        return
    render.pairs(f"dead-letter queue {dead.name}", [("total", total)])
    render.table(None, ["source queue", "messages"], by_source.most_common())
    render.table(None, ["error", "messages"], by_error.most_common())


@cli.command()
@queue_option
@_id_option
@click.option("--body", help="New body.")
@click.option("--file", "file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="The new body must be JSON (kept compact).")
@click.option("--attr", "attrs", multiple=True, metavar="K=V", help="Replace the attributes.")
@click.option("--priority", type=int, help="New priority (higher first).")
@click.option("--visible-in", type=float, help="Seconds until visible (0: now; reorders by time).")
@pass_state
def update(
    state: State,
    queue_name: str | None,
    message_id: str,
    body: str | None,
    file: Path | None,
    as_json: bool,
    attrs: tuple[str, ...],
    priority: int | None,
    visible_in: float | None,
) -> None:
    """Edit a message in place: body, attributes, priority, visibility."""
    data = read_body(body, file) if body is not None or file is not None else None
    if data is not None and as_json:
        data = compact_json(data)
    if data is None and not attrs and priority is None and visible_in is None:
        raise click.UsageError(
            "give what to change: --body/--file, --attr, --priority or --visible-in"
        )
    if visible_in is not None and visible_in < 0:
        raise InvalidInput(f"--visible-in takes 0 or more seconds, got {visible_in}")
    q = state.queue(queue_name)
    visible_at = None if visible_in is None else state.client.clock.now() + visible_in
    show_message(
        state,
        q.update(
            message_id,
            body=data,
            attributes=parse_attrs(attrs) if attrs else None,
            priority=priority,
            visible_at=visible_at,
        ),
    )


@cli.command()
@queue_option
@click.option("--limit", type=int, default=20, show_default=True, help="How many, 1 to 1000.")
@click.option("--after", type=int, default=0, help="Skip this many (paging).")
@pass_state
def archive(state: State, queue_name: str | None, limit: int, after: int) -> None:
    """Deleted and expired messages a queue with --archive kept, oldest first."""
    if not 1 <= limit <= 1000:
        raise InvalidInput(f"--limit takes 1 to 1000, got {limit}")
    found = state.queue(queue_name).archive(limit, after)
    rows = [render.archived_dict(a) for a in found]
    if state.json:
        render.emit_json({"archived": rows, "next_after": after + len(found)})
        return
    render.table(
        None,
        ["id", "outcome", "removed", "receives", "body"],
        [
            (r["id"], r["outcome"], r["removed_at"], r["receive_count"], r["body"][:60])
            for r in rows
        ],
    )
    if len(found) == limit:
        render.say(f"more: conveyor archive --after {after + limit}")


@cli.command("fail")
@queue_option
@_id_option
@click.option("--delay", type=float, default=0, show_default=True, help="Seconds until redelivery.")
@pass_state
def fail_cmd(state: State, queue_name: str | None, message_id: str, delay: float) -> None:
    """Release a message for redelivery now (or after --delay)."""
    show_message(state, state.queue(queue_name).fail(message_id, delay))


@cli.command()
@queue_option
@_id_option
@click.option("--error", help="Why (kept with the message).")
@pass_state
def invalid(state: State, queue_name: str | None, message_id: str, error: str | None) -> None:
    """Move a message to the dead-letter queue now."""
    show_message(state, state.queue(queue_name).move_to_dlq(message_id, error or "marked invalid"))


@cli.command()
@queue_option
@click.option("--id", "ids", multiple=True, help="Message id (repeat); or use --all.")
@click.option("--all", "everything", is_flag=True, help="Every ready message of the DLQ.")
@click.option("--rate", type=float, help="Most messages per second (with --all).")
@click.option("--to", "to", help="Destination queue (default: each message's source queue).")
@pass_state
def redrive(
    state: State,
    queue_name: str | None,
    ids: tuple[str, ...],
    everything: bool,
    rate: float | None,
    to: str | None,
) -> None:
    """Move messages from a dead-letter queue back (the DLQ, or the queue whose DLQ it is)."""
    q = state.queue(queue_name)
    policy = q.attributes.dead_letter
    dead = state.client.queue(policy.queue) if policy else q
    if bool(ids) == everything:
        raise click.UsageError("give --id ID (one or more) or --all")
    if ids:
        moved = dead.redrive(list(ids), to=to)
    else:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        total = dead.stats().ready
        with Progress(
            TextColumn("redriving"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=render.errors,
            disable=state.json or total == 0,
        ) as progress:
            task = progress.add_task("redrive", total=total)
            count = dead.redrive_all(rate=rate, to=to, progress=lambda n: progress.advance(task, n))
        moved = [str(count)]
        _done(state, {"redriven": count, "from": dead.name}, f"redrove {count} from {dead.name}")
        return
    _done(state, {"redriven": moved, "from": dead.name}, f"redrove {', '.join(moved)}")


@cli.command()
@queue_option
@_id_option
@pass_state
def reset(state: State, queue_name: str | None, message_id: str) -> None:
    """Receive count 0, visible now."""
    show_message(state, state.queue(queue_name).reset(message_id))


@cli.command()
@queue_option
@_id_option
@pass_state
def delete(state: State, queue_name: str | None, message_id: str) -> None:
    """Delete a message by id, whatever its state."""
    state.queue(queue_name).remove(message_id)
    _done(state, {"deleted": message_id}, f"deleted {message_id}")


@cli.command()
@queue_option
@click.option("--yes", "-y", is_flag=True, help="Do not ask.")
@pass_state
def purge(state: State, queue_name: str | None, yes: bool) -> None:
    """Delete every message of the queue."""
    q = state.queue(queue_name)
    count = q.stats().total
    if not yes and not click.confirm(f"delete all {count} messages of {q.name}?"):
        raise click.Abort()
    removed = q.purge()
    _done(state, {"purged": removed, "queue": q.name}, f"purged {removed} from {q.name}")


def test_payload(message_id: str) -> dict[str, Any]:
    return {
        "id": message_id,
        "items": [
            {"SKU": "Apple", "is_packed": False},
            {"SKU": "Banana", "is_packed": False},
        ],
        "data_element_1": "Foo",
        "data_element_2": "Bar",
        "data_element_3": "Baz",
    }


@cli.command("enqueue-test")
@queue_option
@pass_state
def enqueue_test(state: State, queue_name: str | None) -> None:
    """Send the four test messages A-101, A-202, A-303 and A-404 (replacing old copies)."""
    q = state.queue(queue_name)
    fifo = q.info.attributes.fifo
    successes = []
    for message_id in TEST_IDS:
        with contextlib.suppress(MessageNotFound):
            q.remove(message_id)
        q.send(
            json.dumps(test_payload(message_id)),
            id=message_id,
            group_id="test" if fifo else None,
            dedup_id=message_id if fifo else None,
        )
        successes.append(message_id)
    _done(state, {"successes": successes}, f"sent {', '.join(successes)}")


@cli.command()
@pass_state
def migrate(state: State) -> None:
    """Create or upgrade the store's tables (stores also do it on first use)."""
    with Client(state.store) as client:
        result = client.migrate()
    where = redact(state.store)
    if result is None:
        text = f"{where}: this store has no schema to migrate"
    elif result[0] == result[1]:
        text = f"{where}: schema is up to date (version {result[1]})"
    else:
        text = f"{where}: schema upgraded from version {result[0]} to {result[1]}"
    old, new = result if result is not None else (None, None)
    _done(state, {"store": where, "from_version": old, "to_version": new}, text)


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script: eval "$(conveyor completion bash)"."""
    cls = get_completion_class(shell)
    assert cls is not None
    click.echo(cls(cli, {}, "conveyor", "_CONVEYOR_COMPLETE").source())


@cli.command("apply")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@pass_state
def apply_file(state: State, file: Path) -> None:
    """Create or update the queues, dead-letter policies, topics and subscriptions FILE
    (TOML) declares; idempotent. See docs/cli.md."""
    from ..declare import apply

    report = apply(state.client, file)
    if state.json:
        render.emit_json([{"kind": k, "name": n, "result": r} for k, n, r in report])
        return
    render.table(None, ("kind", "name", "result"), report)
