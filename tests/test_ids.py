"""Message ids: UUIDv7 made by the SQL and memory stores, row ids made by the SQLite store."""

from __future__ import annotations

import random
import uuid

import pytest

from conveyor.ids import new_id, new_ids, row_id, row_ids, rowid_of


def test_new_ids_are_uuid7_unique_and_increasing() -> None:
    # more than 4096 in one call: the counter runs over into the next millisecond
    ids = [new_id(), *new_ids(5000), new_id(), *new_ids(3)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    stamps = []
    for i in ids:
        u = uuid.UUID(i)
        assert (u.version, u.variant) == (7, uuid.RFC_4122)
        assert str(u) == i
        stamps.append(u.int >> 80)
    assert stamps == sorted(stamps)
    assert len(set(stamps)) >= 2  # the 4,097th id of one millisecond is the next one's
    assert {(uuid.UUID(i).int >> 64) & 0xFFF for i in ids} == set(range(4096))  # every counter


@pytest.mark.parametrize("rowid", [0, 1, 7, 8, 4095, 4096, 12345, (32767 << 47) + 99, 1 << 62])
def test_row_ids_carry_their_row(rowid: int) -> None:
    for rand in (0, 1, (1 << 59) - 1, random.getrandbits(59)):
        made = row_id(rowid, rand)
        u = uuid.UUID(made)
        assert (u.version, u.variant, str(u)) == (8, uuid.RFC_4122, made)
        assert rowid_of(made) == rowid
    assert row_id(rowid, 1) != row_id(rowid, 2)


@pytest.mark.parametrize("start", [0, 32760, (1 << 40) - 3])
def test_row_ids_in_a_run_carry_their_rows(start: int) -> None:
    made = row_ids(start, 20)  # the first and third cross a change of the high digits
    assert [rowid_of(i) for i in made] == list(range(start, start + 20))
    for k, i in enumerate(made):
        u = uuid.UUID(i)
        assert (u.version, u.variant, str(u)) == (8, uuid.RFC_4122, i)
        assert i[:19] == row_id(start + k, 0)[:19]  # only the random bits differ
    assert len(set(made)) == 20


def test_other_ids_carry_no_row() -> None:
    for other in (new_id(), "order-17", str(uuid.uuid4()), "x" * 36, row_id(5, 1).upper()[:35]):
        assert rowid_of(other) is None


def test_claim_tokens_are_random_distinct_and_a_forked_child_makes_its_own() -> None:
    """A receive's token: its stamp, then 40 bits of the system's random source, read a
    few kilobytes at a time; a forked child (`conveyor serve --workers`) must not hand out
    the tokens its parent will, or a stale receipt of one could match a claim of the
    other."""
    import os
    from unittest import mock

    from conveyor.receipts import claim_token

    with mock.patch.object(os, "urandom", wraps=os.urandom) as urandom:
        tokens = [claim_token(1_000_000.0) for _ in range(5000)]
    assert len(set(tokens)) == len(tokens)
    assert all(len(t) == 16 and t.startswith(f"{1_000_000 % (1 << 24):06x}") for t in tokens)
    assert urandom.call_count <= 8  # not one system call a token

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next tokens, then out without the test's teardown
        try:
            os.write(write, " ".join(claim_token(0.0) for _ in range(50)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read().decode().split()
    os.waitpid(pid, 0)
    parent = [claim_token(0.0) for _ in range(50)]
    assert len(child) == 50
    assert not set(child) & set(parent)
