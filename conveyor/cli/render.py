"""Output for the CLI: tables for people, stable JSON for scripts.

Whatever a user or a sender wrote (bodies, attributes, names, ids, error texts) is data,
never markup: the consoles read no Rich markup or emoji codes, and `shown` writes control
characters as escapes (`\\x1b`, `\\r`, `\\x00`, `\\u202e`), so a body cannot style, move or
rewrite what the terminal shows. JSON escapes them itself.

Lines go out through click; tables through Rich, imported (a twentieth of a second) only
when a table is shown.
"""

from __future__ import annotations

import array
import base64
import contextlib
import fcntl
import json
import os
import re
import select
import stat
import sys
import termios
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.console import Console

    from ..models import ArchivedMessage, Consumer, Message, QueueAttributes, QueueStats

    console: Console  # Rich's consoles for standard output and error, made on first use
    errors: Console


def __getattr__(name: str) -> Any:
    if name not in ("console", "errors"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from rich.console import Console

    made = Console(
        stderr=name == "errors", highlight=False, soft_wrap=True, markup=False, emoji=False
    )
    globals()[name] = made
    return made


def _console() -> Console:
    made: Console = globals().get("console") or __getattr__("console")
    return made


_stdout_gone = False  # standard output was found closed (`written`)

# C0 controls but tab and line feed, DEL, C1 controls, and the marks that reorder text
# (Unicode's bidirectional controls)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\r": "\\r", "\x0b": "\\v", "\x0c": "\\f"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(value: object) -> str:
    """Text for the terminal: `value` as it is, but control characters and reordering
    marks written as escapes (line feeds and tabs stay)."""
    text = value if isinstance(value, str) else str(value)
    return _CONTROL.sub(_escape, text)


def say(text: object) -> None:
    """A line on standard output."""
    if not _stdout_gone:
        click.echo(shown(text))


def note(text: object) -> None:
    """A line on standard error (progress, what a long job is doing)."""
    click.echo(shown(text), err=True)


def error(text: object) -> None:
    """`error: TEXT` on standard error (the word in red on a terminal)."""
    click.echo(f"{click.style('error:', fg='red')} {shown(text)}", err=True)


def when(ts: float | None) -> str | None:
    if ts is None:
        return None
    if ts >= 253402300799.0:
        return "never"
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def body_text(body: bytes) -> str | None:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def message_dict(m: Message, now: float | None = None, *, with_body: bool = True) -> dict[str, Any]:
    now = time.time() if now is None else now
    out: dict[str, Any] = {
        "id": m.id,
        "queue": m.queue,
        "state": m.state(now).value,
        "receive_count": m.receive_count,
        "priority": m.priority,
        "sent_at": when(m.sent_at),
        "visible_at": when(m.visible_at),
        "first_received_at": when(m.first_received_at),
        "version": m.version,
        "sequence": m.sequence,
    }
    for key in ("group_id", "dedup_id", "source_queue", "error"):
        if getattr(m, key) is not None:
            out[key] = getattr(m, key)
    if m.deadline is not None:
        out["deadline"] = when(m.deadline)
    if with_body:
        text = body_text(m.body)
        if text is None:
            out["body_base64"] = base64.b64encode(m.body).decode()
        else:
            out["body"] = text
        if m.attributes:
            out["attributes"] = {
                k: (base64.b64encode(v).decode() if isinstance(v, bytes) else v)
                for k, v in m.attributes.items()
            }
    if m.receipt is not None:
        out["receipt"] = m.receipt
    return out


def attributes_dict(a: QueueAttributes) -> dict[str, Any]:
    return a.to_dict()


def stats_dict(s: QueueStats) -> dict[str, Any]:
    """What the queue holds now, and under `totals` what happened to it since it was
    created (sent, received, deleted, dead-lettered, expired)."""
    return {
        "queue": s.queue,
        "ready": s.ready,
        "delayed": s.delayed,
        "in_flight": s.in_flight,
        "oldest_age": s.oldest_age,
        "totals": {
            "sent": s.sent,
            "received": s.received,
            "deleted": s.deleted,
            "dead_lettered": s.dead,
            "expired": s.expired,
        },
    }


def archived_dict(a: ArchivedMessage) -> dict[str, Any]:
    return {
        "id": a.id,
        "queue": a.queue,
        "outcome": a.outcome,
        "removed_at": when(a.removed_at),
        "sent_at": when(a.sent_at),
        "receive_count": a.receive_count,
        "priority": a.priority,
        "group_id": a.group_id,
        "attributes": {k: str(v) for k, v in a.attributes.items()},
        "body": a.body.decode("utf-8", errors="replace"),
    }


def consumer_dict(c: Consumer, now: float) -> dict[str, Any]:
    return {
        "id": c.id,
        "queue": c.queue,
        "registered_at": when(c.registered_at),
        "last_heartbeat": when(c.heartbeat_at),
        "heartbeat_age": round(now - c.heartbeat_at, 3),
        "timeout": c.timeout,
        "info": dict(c.info),
    }


def written(out: Callable[[], None], *, grace: float = 0.25) -> bool:
    """Run `out` (which writes to standard output) and flush: whether everything reached
    whoever reads it. A failed write (a closed pipe, a full disk) is False. Into a pipe, a
    write succeeds once the bytes are in the pipe's buffer, so the reader must also take
    them all and not close its end within `grace` seconds after (`| head -1` takes a whole
    buffer, shows a line and exits). After a False, standard output goes nowhere."""
    try:
        if not _wrote(out):
            return False
    except SystemExit:  # Rich's answer to a closed pipe
        return False
    if _stdout_gone or ("console" in globals() and _console().quiet):
        return False
    if not _reader_took_all(grace):
        _discard_stdout()
        return False
    return True


def _wrote(out: Callable[[], None]) -> bool:
    """Run `out` (which writes to standard output) and flush: False where a write failed
    (a closed pipe, a full disk), after which standard output goes nowhere."""
    try:
        out()
        sys.stdout.flush()
    except OSError:  # BrokenPipeError, a full disk, ...
        _discard_stdout()
        return False
    return True


def _reader_took_all(grace: float) -> bool:
    """True unless standard output is a pipe whose reader closed it before reading
    everything, or within `grace` seconds after (a reader that goes on reading keeps its
    end open until this process ends)."""
    try:
        fd = sys.stdout.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return True
    except (OSError, ValueError):
        return True
    poller = select.poll()
    poller.register(fd, select.POLLERR)
    left = array.array("i", [0])
    drained_at: float | None = None
    while True:
        if poller.poll(10):  # the reader closed its end
            return False
        try:
            fcntl.ioctl(fd, termios.FIONREAD, left)
        except OSError:
            return True  # cannot tell: as a terminal or a file
        now = time.monotonic()
        if left[0]:
            drained_at = None
        elif drained_at is None:
            drained_at = now
        elif now - drained_at >= grace:
            return True


def _discard_stdout() -> None:
    global _stdout_gone
    _stdout_gone = True
    if "console" in globals():
        _console().quiet = True
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def emit_json(value: Any) -> None:
    if not _stdout_gone:
        click.echo(json.dumps(value, indent=2, sort_keys=False, default=str))


def stream_json(key: str, pages: Iterable[Sequence[Any]], rest: dict[str, Any]) -> bool:
    """`{key: [...], **rest}` as `emit_json` writes it, the list written a page at a time
    (for listings of any length: only a page is held). False where standard output was
    closed meanwhile (then no more pages are read)."""

    def write() -> None:
        click.echo(f"{{\n  {json.dumps(key)}: [", nl=False)
        first = True
        for page in pages:
            items = [
                json.dumps(item, indent=2, default=str).replace("\n", "\n    ") for item in page
            ]
            if items:
                lead = "\n    " if first else ",\n    "
                click.echo(lead + ",\n    ".join(items), nl=False)
                first = False
        click.echo("]" if first else "\n  ]", nl=False)
        for name, value in rest.items():
            text = json.dumps(value, indent=2, default=str).replace("\n", "\n  ")
            click.echo(f",\n  {json.dumps(name)}: {text}", nl=False)
        click.echo("\n}")

    return not _stdout_gone and _wrote(write)


def stream_table(columns: Sequence[str], pages: Iterable[Sequence[Sequence[Any]]]) -> bool:
    """A table written a page of rows at a time, for listings of any length: the first rows
    show at once, and only a page is held. Its columns are as wide as the header and the
    first page need (a later, wider value widens its own row); nothing folds, so an id is
    never cut in two. False where standard output was closed meanwhile (then no more pages
    are read)."""

    def write() -> None:
        widths: list[int] = []
        for page in pages:
            rows = [[_one_line(v) for v in row] for row in page]
            if not widths:
                widths = [
                    max([cells(c), *(cells(row[i]) for row in rows)]) for i, c in enumerate(columns)
                ]
                click.echo(_head(columns, widths), nl=False)
            click.echo("".join(_row(row, widths) for row in rows), nl=False)
        if not widths:
            widths = [cells(c) for c in columns]
            click.echo(_head(columns, widths), nl=False)
        click.echo(_rule("└", "┴", "┘", widths), nl=False)

    return not _stdout_gone and _wrote(write)


def _one_line(value: Any) -> str:
    text = "-" if value is None else shown(value)
    return text.replace("\n", "\\n").replace("\t", "\\t")


def _head(columns: Sequence[str], widths: Sequence[int]) -> str:
    return _rule("┌", "┬", "┐", widths) + _row(columns, widths) + _rule("├", "┼", "┤", widths)


def _rule(left: str, middle: str, right: str, widths: Sequence[int]) -> str:
    return f"{left}{middle.join('─' * (w + 2) for w in widths)}{right}\n"


def _row(values: Sequence[str], widths: Sequence[int]) -> str:
    cells_ = (f" {v}{' ' * (w - cells(v))} " for v, w in zip(values, widths, strict=True))
    return f"│{'│'.join(cells_)}│\n"


# the columns of free text, folded to fit the terminal; every other column (ids, receipts,
# names, numbers, times) is shown whole, so what a table shows can be copied and searched
TEXT_COLUMNS = frozenset({"body", "error", "queues", "result"})
TEXT_ROOM = 24  # columns a text column keeps where the whole ones alone fill the width


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A table on standard output, as wide as the terminal (into a pipe or a file, $COLUMNS
    or 80): its text columns fold to fit, and ids, receipts, names and numbers are never cut
    in two. Where those alone are wider, the table is as wide as they need (and `TEXT_ROOM`
    for each text column), and the terminal wraps its lines."""
    from rich.measure import Measurement
    from rich.table import Table

    t = Table(
        title=None if title is None else shown(title),
        title_justify="left",
        show_lines=False,
        pad_edge=False,
    )
    for c in columns:
        if c in TEXT_COLUMNS:
            t.add_column(c, overflow="fold", max_width=TEXT_ROOM)
        else:
            t.add_column(c, no_wrap=True)
    for r in rows:
        t.add_row(*["-" if v is None else shown(v) for v in r])
    console = _console()
    width = console.width
    # the width with the text columns at most TEXT_ROOM wide, and the rest whole
    least = Measurement.get(console, console.options.update(width=1 << 20), t).maximum
    if least <= width:  # the text columns take the room there is
        for column in t.columns:
            column.max_width = None
        console.print(t)
        return
    console.width = least
    try:
        console.print(t)
    finally:
        console.width = width


def pairs(title: str | None, items: Iterable[tuple[str, Any]]) -> None:
    """A two-column table of fields and values (drawn here, without Rich: the commands that
    show one start faster)."""
    if not _stdout_gone:
        click.echo(pairs_text(title, items), nl=False)


def pairs_text(title: str | None, items: Iterable[tuple[str, Any]], width: int = 0) -> str:
    """`pairs` as text, `width` columns wide at most (0: the terminal's): a value's lines
    are kept and folded where they are wider than its column."""
    rows = [(shown(k), "-" if v is None else shown(v)) for k, v in items]
    width = width or terminal_width()
    left = max((cells(k) for k, _ in rows), default=1)
    room = max(1, width - left - 4)  # the borders and the space before a value
    value_lines = [[*_fold(v, room)] for _, v in rows]
    right = max((cells(line) for lines in value_lines for line in lines), default=1)
    out = [] if title is None else [f"{shown(title)}\n"]
    out.append(f"┌{'─' * left}┬{'─' * (right + 1)}┐\n")
    for (key, _), lines in zip(rows, value_lines, strict=True):
        for i, line in enumerate(lines or [""]):
            name = key if i == 0 else ""
            out.append(
                f"│{name}{' ' * (left - cells(name))}│ {line}{' ' * (right - cells(line))}│\n"
            )
    out.append(f"└{'─' * left}┴{'─' * (right + 1)}┘\n")
    return "".join(out)


def terminal_width() -> int:
    """The width of what standard output shows: Rich's console's where one is made, else
    $COLUMNS or the terminal's, else 80 (as for a terminal that says it has no columns, as
    a pseudo-terminal made without a size does)."""
    if "console" in globals():
        return int(_console().width)
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns or 80
    except (OSError, ValueError):
        return 80


def cells(text: str) -> int:
    """How many terminal cells `text` takes (East Asian wide characters two)."""
    if text.isascii():
        return len(text)
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _fold(value: str, room: int) -> Iterable[str]:
    """The lines of `value`, each wrapped at spaces into pieces `room` cells wide at most (a
    word longer than that is cut)."""
    for line in value.split("\n"):
        if cells(line) <= room:
            yield line
            continue
        current = ""
        for word in line.split(" "):
            joined = f"{current} {word}" if current else word
            if cells(joined) <= room:
                current = joined
                continue
            if current:
                yield current
            while cells(word) > room:
                head = _cut(word, room)
                yield head
                word = word[len(head) :]
            current = word
        yield current


def _cut(text: str, room: int) -> str:
    """The longest start of `text` that is `room` cells wide at most (one character at
    least)."""
    if text.isascii():
        return text[:room]
    used = 0
    for i, ch in enumerate(text):
        used += cells(ch)
        if used > room:
            return text[: max(1, i)]
    return text
