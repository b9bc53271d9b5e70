"""The SQL stores' statements: named once, each with what it does, compiled for each
driver's parameters and quoting, and every one SQLite runs accepted by SQLite itself."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from conveyor import Client
from conveyor.backends.sql import schema
from conveyor.backends.sql import statement as statement_module
from conveyor.backends.sql.rows import MessageRow
from conveyor.backends.sql.server_statements import SERVER_COLUMNS
from conveyor.backends.sql.statement import (
    MYSQL,
    SQLITE,
    Compiler,
    Numbered,
    Statement,
    Style,
    by_rows,
    each,
    positional,
    postgres_style,
    spread,
)
from conveyor.backends.sql.statements import (
    FRESH,
    SQLITE_COLUMNS,
    SQLITE_CREATE_QUEUE,
    SQLITE_DROP_QUEUE,
    catalog,
)
from conveyor.backends.sql.store import SQLStore

PYFORMAT = Style(param="%({})s", quote=lambda name: f'"{name}"', percent=True)


def compiler(style: Style, dialect: str = "sqlite") -> Compiler:
    return Compiler(
        dialect,
        style,
        lambda qid: {"queues": "conveyor_queues", **({"messages": f"q{qid}"} if qid else {})},
        lambda qid: {"for_update": " FOR UPDATE", "scope": f"queue_id = {qid}"},
    )


def test_every_statement_is_named_once_and_says_what_it_does() -> None:
    statements = catalog() + schema.catalog()
    names = [s.name for s in statements]
    assert len(statements) > 100
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    for s in statements:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", s.name), s.name
        assert s.doc.endswith(".") and "\n" not in s.doc and s.doc[0].isupper(), s.name
        for dialect in ("sqlite", "postgresql", "mysql"):
            assert "%s" not in s.text_for(dialect), f"{s.name}: positional parameter"


def test_a_statement_compiles_to_each_drivers_named_parameters() -> None:
    s = Statement(
        "t",
        "A test.",
        "SELECT x::bigint, '5%' FROM {queues} WHERE name = :name AND a = :name{for_update}",
    )
    sqlite = compiler(SQLITE)(s)
    assert sqlite == (
        "SELECT x::bigint, '5%' FROM \"conveyor_queues\" WHERE name = ?1 AND a = ?1 FOR UPDATE"
    )
    assert positional(sqlite, {"name": "q", "other": 1}) == ("q",)
    assert compiler(MYSQL)(s) == (
        "SELECT x::bigint, '5%%' FROM `conveyor_queues` WHERE name = %(name)s AND a = %(name)s"
        " FOR UPDATE"
    )
    postgres = compiler(postgres_style(), "postgresql")(s)
    assert postgres == (
        "SELECT x::bigint, '5%%' FROM \"conveyor_queues\" WHERE name = %s AND a = %s FOR UPDATE"
    )  # psycopg's markers by position: a name twice, its value twice
    assert positional(postgres, {"name": "q", "other": 1}) == ("q", "q")
    assert s.params("sqlite") == ["name"]


def test_lists_and_rows_expand_to_their_size() -> None:
    listed = Statement("l", "A list.", "DELETE FROM {messages} WHERE {scope} AND k IN (:keys*)")
    assert compiler(PYFORMAT)(listed, 7, 3) == (
        'DELETE FROM "q7" WHERE queue_id = 7 AND k IN (%(keys_0)s, %(keys_1)s, %(keys_2)s)'
    )
    assert spread("keys", [4, 5, 6]) == {"keys_0": 4, "keys_1": 5, "keys_2": 6}
    rows = Statement("r", "Rows.", "INSERT INTO {queues} (a, b, c) VALUES (:a, :b*, :c + #)*")
    text = compiler(SQLITE)(rows, 0, 2)
    assert (
        text == 'INSERT INTO "conveyor_queues" (a, b, c) VALUES (?1, ?2, ?3 + 0), (?1, ?4, ?3 + 1)'
    )
    values = {"a": 1, "c": 3, **each(("b",), [(20,), (21,)])}
    assert positional(text, values) == (1, 20, 3, 21)
    assert each(("b", "d"), [(1, 2), (3, 4)]) == {"b_0": 1, "d_0": 2, "b_1": 3, "d_1": 4}
    pg = compiler(postgres_style(), "postgresql")
    shared_first = Statement("s", "Rows after what they share.", "SELECT :q, (:b*, :c*)*")
    text = pg(shared_first, 0, 2)
    assert text == "SELECT %s, (%s, %s), (%s, %s)"
    assert by_rows(text, {"q": 7}, ("b", "c"), [(1, 2), (3, 4)]) == (7, 1, 2, 3, 4)
    shared_after = Statement("s", "A shared value after the rows.", "SELECT (:b*)* WHERE :q > 0")
    text = pg(shared_after, 0, 2)
    assert text == "SELECT (%s), (%s) WHERE %s > 0"
    assert by_rows(text, {"q": 7}, ("b",), [(1,), (3,)]) == (1, 3, 7)  # by name, then placed


def test_a_statement_says_what_it_lacks() -> None:
    c = compiler(SQLITE)
    with pytest.raises(KeyError, match="no slot 'messages'"):
        c(Statement("m", "A queue's table without a queue.", "SELECT 1 FROM {messages}"))
    with pytest.raises(ValueError, match="a list of 0 values"):
        c(Statement("e", "An empty list.", "SELECT 1 WHERE 1 IN (:keys*)"))
    bad = Compiler("sqlite", SQLITE, lambda qid: {"queues": 'x"; DROP TABLE y; --'}, lambda qid: {})
    with pytest.raises(ValueError, match="not a name"):
        bad(Statement("q", "A name to quote.", "SELECT 1 FROM {queues}"))


def test_a_dialects_own_wording_is_the_one_it_runs() -> None:
    s = Statement("w", "Worded two ways.", "INSERT ... ON CONFLICT", mysql="INSERT IGNORE ...")
    assert compiler(SQLITE, "sqlite")(s) == "INSERT ... ON CONFLICT"
    assert compiler(MYSQL, "mysql")(s) == "INSERT IGNORE ..."


class _Zeros(dict[str, int]):
    def __missing__(self, key: str) -> int:
        return 0


def test_sqlite_accepts_every_statement_it_runs(tmp_path: Path) -> None:
    """Each statement but those worded for the servers alone, compiled for queue 1 (its
    partial indexes made) and a list of two, is prepared by SQLite against the store's
    schema: a misspelt column or slot fails here, not in a receive."""
    with Client(f"sqlite:///{tmp_path}/s.db") as client:
        client.create_queue("q")
        store = client.backend
        assert isinstance(store, SQLStore)
        d = store.dialect
        conn = sqlite3.connect(tmp_path / "s.db")
        try:
            conn.execute(f"CREATE INDEX q1_fresh ON q1 (receive_count) WHERE {FRESH}")
            conn.execute("CREATE INDEX q1_held ON q1 (visible_at)")
            checked = 0
            for s in catalog():
                if s.name.startswith(("postgres_", "mysql_", "mariadb_", "server_")):
                    continue
                if s in SQLITE_CREATE_QUEUE or s is SQLITE_DROP_QUEUE:
                    continue  # run below, for a queue of their own
                sql = d.sql(s, 1, 2)
                conn.execute(f"EXPLAIN {sql}", positional(sql, _Zeros()))
                checked += 1
            assert checked > 90
            for s in (*SQLITE_CREATE_QUEUE, SQLITE_DROP_QUEUE):
                conn.execute(d.sql(s, 2))
        finally:
            conn.close()


def test_a_message_rows_columns_are_the_ones_message_row_names() -> None:
    """Every dialect reads a message row in MessageRow's order, each column under its name
    (the key and the priority in each database's own terms)."""
    own = {"rowid": "key", "seq": "key", "-nprio": "priority"}
    for columns in (SQLITE_COLUMNS, SERVER_COLUMNS):
        names = [own.get(c.strip(), c.strip()) for c in columns.split(",")]
        assert names == list(MessageRow._fields)


def test_rows_bind_straight_from_their_values() -> None:
    """Rows whose own values all follow what they share bind without a mapping; others by
    name, to the same values."""
    after = Statement(
        "f", "Rows after what they share.", "INSERT INTO {queues} VALUES (:a, :b*, :c*)*"
    )
    text = compiler(SQLITE)(after, 0, 2)
    assert isinstance(text, Numbered) and text.layout == (("a",), ("b", "c"))
    assert by_rows(text, {"a": 1}, ("b", "c"), [(2, 3), (4, 5)]) == (1, 2, 3, 4, 5)
    mixed = Statement(
        "m", "A shared value after a row's own.", "INSERT INTO {queues} VALUES (:b*, :a)*"
    )
    text = compiler(SQLITE)(mixed, 0, 2)  # numbered b_0, a, b_1
    assert isinstance(text, Numbered) and text.layout is None
    assert by_rows(text, {"a": 1}, ("b",), [(2,), (4,)]) == (2, 1, 4)


def test_a_compiler_keeps_a_bounded_number_of_texts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(statement_module, "KEEP", 3)
    c = compiler(SQLITE)
    listed = Statement("l", "A list.", "SELECT 1 FROM {queues} WHERE id IN (:ids*)")
    texts = [c(listed, 0, n) for n in range(1, 8)]
    assert len(c._done) <= 3
    assert texts[6] == c(listed, 0, 7) and texts[6].count("?") == 7
