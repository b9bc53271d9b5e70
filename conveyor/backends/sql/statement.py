"""SQL statements named once, and compiled once for each database's driver.

Each statement the SQL stores run is a `Statement`: a name, what it does in one line, and
its text. The catalog of them is `statements.py` (with `pipeline_statements.py` and
`server_statements.py`). Their text is SQL with four marks:

- ``:name`` a parameter, given by name (``::``, PostgreSQL's cast, is not one);
- ``:name*`` a list of values, one parameter each, comma-separated (``id IN (:ids*)``);
- ``(...)*`` a row of values repeated once per row (a multi-row ``VALUES``): inside it
  ``:name*`` is the row's own value, ``:name`` one all rows share, and ``#`` the row's
  index (from 0);
- ``{slot}`` a table's or an index's name, or a dialect's own words for something
  (``{for_update}``), filled by the dialect that compiles the statement.

A `Compiler` (one per dialect) turns a statement into its driver's text once and keeps it:
names of tables are checked (``[a-z_][a-z0-9_]*``) and quoted by the driver's rules,
parameters become the driver's own named form (``%(name)s`` for psycopg and PyMySQL) or,
for sqlite3, numbered ones bound by position (`Numbered`, `positional`). Values are passed
in a mapping; `spread` and `each` give the values of a list or of rows under the names the
compiled text uses.
"""

from __future__ import annotations

import functools
import itertools
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

KEEP = 4096  # compiled texts a `Compiler` keeps
_PARAM = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)(\*?)")
_GROUP = re.compile(r"\(([^()]*)\)\*")
_NAME = re.compile(r"[a-z_][a-z0-9_]*")
_SLOT = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


@dataclass(frozen=True, slots=True, eq=False)
class Statement:
    """One SQL statement: `name` (unique in the catalog), `doc` (what it does, one line)
    and `text` (see the module's docstring for its marks); where a database words it its
    own way, that database's text beside it (`sqlite`, `postgresql`, `mysql`). Compared by
    identity."""

    name: str
    doc: str
    text: str
    sqlite: str | None = None
    postgresql: str | None = None
    mysql: str | None = None
    binary: bool = False  # parameters go in binary where the driver can (psycopg's %b)

    def text_for(self, dialect: str) -> str:
        """The text a dialect runs (its own wording, or the common one)."""
        own: str | None = getattr(self, dialect)
        return self.text if own is None else own

    def params(self, dialect: str) -> list[str]:
        """The names of its parameters in a dialect's text, in the order they first appear."""
        return list(dict.fromkeys(m.group(1) for m in _PARAM.finditer(self.text_for(dialect))))


def spread(name: str, values: Sequence[Any]) -> dict[str, Any]:
    """The values of list parameter `name` (``:name*``) under their compiled names."""
    return dict(zip(_listed(name, len(values)), values, strict=True))


def each(names: tuple[str, ...], rows: Sequence[Sequence[Any]]) -> dict[str, Any]:
    """The values of rows (``(...)*``; per row, the values of `names` in that order)
    under their compiled names."""
    return dict(zip(_rowed(names, len(rows)), itertools.chain.from_iterable(rows), strict=True))


@functools.lru_cache(maxsize=256)
def _listed(name: str, n: int) -> tuple[str, ...]:
    return tuple(f"{name}_{i}" for i in range(n))


@functools.lru_cache(maxsize=256)
def _rowed(names: tuple[str, ...], n: int) -> tuple[str, ...]:
    return tuple(f"{name}_{i}" for i in range(n) for name in names)


@dataclass(frozen=True, slots=True)
class Style:
    """How a driver takes named parameters and quotes names."""

    param: str  # a named parameter, with {} for its name
    quote: Callable[[str], str]  # a checked name as the database reads it
    percent: bool = False  # the driver reads % in the text: a literal % is written %%
    # parameters are numbered (``?1``, ``?2``; one number a name) and bound by position from
    # the named values (`positional`): sqlite3 lets go of the GIL once for each parameter it
    # binds by name, and so hands it to another thread several times a statement
    numbered: bool = False
    # parameters are bound by position, one marker (`param`, without a name) where each
    # occurs, from the named values (`positional`): psycopg then takes a statement's values
    # as they are, where by name it would turn a mapping of them back into a list
    by_occurrence: bool = False
    binary: str | None = None  # a named parameter sent in binary (`Statement.binary`)


def _double_quoted(name: str) -> str:
    return f'"{name}"'


def _backquoted(name: str) -> str:
    return f"`{name}`"


SQLITE = Style(param="?{}", quote=_double_quoted, numbered=True)
MYSQL = Style(param="%({})s", quote=_backquoted, percent=True)


def postgres_style() -> Style:
    """psycopg's positional parameters (`Style.by_occurrence`); names quoted by psycopg's
    own `sql.Identifier`."""
    from psycopg import sql

    def quote(name: str) -> str:
        return sql.Identifier(name).as_string(None)

    return Style(param="%s", quote=quote, percent=True, binary="%b", by_occurrence=True)


def checked_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a name a statement may hold: [a-z_][a-z0-9_]*")
    return name


class Compiler:
    """Compiles statements for one dialect's driver and keeps what it compiled.

    `names` gives the tables and indexes a statement's slots name (checked and quoted),
    `words` the dialect's own words (SQL text, which may hold parameters of its own). Both
    may depend on the queue (`qid`): SQLite keeps a table per queue, and the server stores
    write a queue's id into the statements that find its rows by key (their plans must not
    be generic across queues)."""

    def __init__(
        self,
        dialect: str,
        style: Style,
        names: Callable[[int], Mapping[str, str]],
        words: Callable[[int], Mapping[str, str]],
    ) -> None:
        self.dialect = dialect
        self.style = style
        self._names = names
        self._words = words
        self._done: dict[tuple[Statement, int, int], str] = {}

    def __call__(self, statement: Statement, qid: int = 0, n: int = 0) -> str:
        """The driver's text of `statement` for queue `qid`, its lists and rows of size `n`."""
        key = (statement, qid, n)
        text = self._done.get(key)
        if text is None:
            if len(self._done) >= KEEP:  # a bound for many queues and sizes; clear() is
                self._done.clear()  # one step, safe while other threads read and write it
            text = self._done[key] = self.compile(statement, qid, n)
        return text

    def compile(self, statement: Statement, qid: int = 0, n: int = 0) -> str:
        source = statement.text_for(self.dialect)
        slots: dict[str, str] = {}
        for slot in _SLOT.findall(source):
            if slot in slots:
                continue
            names = self._names(qid)
            if slot in names:
                slots[slot] = self.style.quote(checked_name(names[slot]))
                continue
            words = self._words(qid)
            if slot not in words:
                raise KeyError(f"statement {statement.name}: no slot {slot!r} in this dialect")
            slots[slot] = words[slot]
        text = _SLOT.sub(lambda m: slots[m.group(1)], source)
        if self.style.percent:
            text = text.replace("%", "%%")
        text = _GROUP.sub(lambda m: ", ".join(_row(m.group(1), k) for k in range(n)), text)
        param = self.style.param
        if statement.binary and self.style.binary:
            param = self.style.binary
        order: dict[str, int] = {}  # numbered styles: each name's number, from 1
        occurrences: list[str] = []  # styles by occurrence: the names where they occur

        def mark(name: str) -> str:
            if self.style.by_occurrence:
                occurrences.append(name)
                return param
            if not self.style.numbered:
                return param.format(name)
            return param.format(order.setdefault(name, len(order) + 1))

        def one(m: re.Match[str]) -> str:
            name, many = m.group(1), m.group(2)
            if not many:
                return mark(name)
            if n < 1:
                raise ValueError(f"statement {statement.name}: a list of {n} values")
            return ", ".join(mark(f"{name}_{i}") for i in range(n))

        text = _PARAM.sub(one, text)
        if self.style.numbered:
            return Numbered(text, tuple(order), _row_layout(source, tuple(order), n))
        if self.style.by_occurrence:
            positions = tuple(occurrences)
            return Numbered(text, positions, _row_layout(source, positions, n))
        return text


class Numbered(str):
    """A statement's text whose parameters are bound by position, numbered (``?1``) or one
    marker an occurrence (``%s``): `order`, the names of its parameters in their positions'
    order; `pick`, their values from a mapping, in that order (`positional`)."""

    order: tuple[str, ...]
    pick: Callable[[Mapping[str, Any]], tuple[Any, ...]]
    # rows (``(...)*``) whose values all come after what they share, in the rows' order:
    # the names they share, then one row's own names (`by_rows`)
    layout: tuple[tuple[str, ...], tuple[str, ...]] | None
    shared: Callable[[Mapping[str, Any]], tuple[Any, ...]]  # the values of layout[0]

    def __new__(
        cls,
        text: str,
        order: tuple[str, ...],
        layout: tuple[tuple[str, ...], tuple[str, ...]] | None = None,
    ) -> Numbered:
        self = super().__new__(cls, text)
        self.order = order
        self.layout = layout
        self.pick = _values_of(order)
        self.shared = _values_of(() if layout is None else layout[0])
        return self


def _values_of(names: tuple[str, ...]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """The values of `names` from a mapping, as a tuple in that order."""
    if len(names) > 1:
        return operator.itemgetter(*names)  # in C: most statements bind several
    return lambda values: tuple(values[name] for name in names)


def by_rows(
    sql: str, shared: dict[str, Any], names: tuple[str, ...], rows: Sequence[Sequence[Any]]
) -> Mapping[str, Any] | Sequence[Any]:
    """The parameters of a statement of rows (``(...)*``): `shared`, the values the rows
    share, and `rows`, each row's own values in the order of `names`; as positional values
    built straight from the rows where the text's numbers allow (the shared values first,
    then row after row), else by name."""
    if isinstance(sql, Numbered) and sql.layout is not None and sql.layout[1] == names:
        return (*sql.shared(shared), *itertools.chain.from_iterable(rows))
    values = each(names, rows)
    values.update(shared)
    return positional(sql, values)


def _row_layout(
    source: str, order: tuple[str, ...], n: int
) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The layout `Numbered.layout` speaks of, where `order` has it."""
    group = _GROUP.search(source)
    if group is None or n < 1:
        return None
    own = tuple(m.group(1) for m in _PARAM.finditer(group.group(1)) if m.group(2))
    shared = order[: len(order) - len(own) * n]
    if order[len(shared) :] != _rowed(own, n) or any(name in own for name in shared):
        return None
    return shared, own


def positional(
    sql: str, params: Mapping[str, Any] | Sequence[Any]
) -> Mapping[str, Any] | Sequence[Any]:
    """The parameters of `sql` as its driver binds them: named values in the order of a
    `Numbered` text's parameters; anything else as it is (a text of the driver's own)."""
    if isinstance(sql, Numbered) and isinstance(params, Mapping):
        return sql.pick(params)
    return params


R = TypeVar("R", covariant=True)


class Executes(Protocol[R]):
    """A DB-API connection or cursor: sqlite3's, psycopg's, PyMySQL's."""

    def execute(self, sql: str, params: Any, /) -> R: ...


def execute(conn: Executes[R], sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> R:
    """Run a statement on a connection or cursor, a compiled one's named values bound by
    position (`positional`)."""
    if type(params) is dict and type(sql) is Numbered:  # the common case, without a call
        return conn.execute(sql, sql.pick(params))
    return conn.execute(sql, positional(sql, params))


def _row(group: str, k: int) -> str:
    """One row of a repeated group: its own values named for row `k`, `#` its index."""
    row = _PARAM.sub(lambda m: f":{m.group(1)}_{k}" if m.group(2) else m.group(0), group)
    return f"({row.replace('#', str(k))})"
