"""Message ids: UUID version 7 (RFC 9562), time-ordered, so new rows append to indexes."""

from __future__ import annotations

import random
import threading
import time

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def new_id() -> str:
    """A UUIDv7 string: 48-bit Unix milliseconds, a 12-bit counter within the millisecond
    (monotonic within this process), and 62 random bits."""
    return new_ids(1)[0]


def new_ids(n: int) -> list[str]:
    """n UUIDv7 strings made together (one clock read and one lock), in increasing order."""
    global _last_ms, _counter
    ms = time.time_ns() // 1_000_000
    rand = random.getrandbits
    out: list[str] = []
    with _lock:
        if ms <= _last_ms:
            ms, counter = _last_ms, _counter + 1
        else:
            counter = 0
        # the first 13 digits (the millisecond and the version) are the batch's, formatted once
        prefix = "%08x-%04x-7" % (ms >> 16, ms & 0xFFFF)  # noqa: UP031 - see _row_head
        for _ in range(n):
            if counter > 0xFFF:
                ms, counter = ms + 1, 0
                prefix = "%08x-%04x-7" % (ms >> 16, ms & 0xFFFF)  # noqa: UP031
            r = rand(62)
            out.append(
                "%s%03x-%04x-%012x"  # noqa: UP031
                % (prefix, counter, 0x8000 | (r >> 48), r & 0xFFFFFFFFFFFF)
            )
            counter += 1
        _last_ms, _counter = ms, counter - 1
    return out


def row_id(rowid: int, rand: int) -> str:
    """A UUIDv8 (RFC 9562, custom layout) carrying a store row number and 59 random bits.

    A store that makes up ids this way finds a message by id with a primary-key lookup and
    needs no index over ids it generated; the random bits keep an id unique even where a row
    number is used again after its message was deleted.
    """
    return _row_tail(_row_head(rowid >> 15), rowid, rand)


def row_ids(start: int, n: int) -> list[str]:
    """`row_id` for the rows start, start + 1, ... start + n - 1, with fresh random bits each;
    the first 13 digits, which change once in 32,768 rows, formatted once."""
    rand = random.getrandbits
    out: list[str] = []
    high, head = -1, ""
    for rowid in range(start, start + n):
        if rowid >> 15 != high:
            high = rowid >> 15
            head = _row_head(high)
        out.append(_row_tail(head, rowid, rand(59)))
    return out


def _row_head(high: int) -> str:
    """A row id's first 13 digits: the row number's high bits and the version."""
    # %-formatting: twice as fast as str.format or an f-string with its format specs
    return "%08x-%04x-8" % (high >> 16, high & 0xFFFF)  # noqa: UP031


def _row_tail(head: str, rowid: int, rand: int) -> str:
    """A row id: its `head`, the row number's low bits and 59 random bits."""
    return "%s%03x-%04x-%012x" % (  # noqa: UP031 - see _row_head
        head,
        (rowid >> 3) & 0xFFF,
        0x8000 | ((rowid & 0x7) << 11) | ((rand >> 48) & 0x7FF),
        rand & 0xFFFFFFFFFFFF,
    )


def rowid_of(message_id: str) -> int | None:
    """The row number inside an id made by `row_id`, or None for any other id."""
    if len(message_id) != 36 or message_id[14] != "8" or message_id[19] not in "89ab":
        return None
    try:
        value = int(message_id.replace("-", ""), 16)
    except ValueError:
        return None
    if message_id[8] != "-" or message_id[13] != "-" or message_id[18] != "-":
        return None
    return ((value >> 80) << 15) | (((value >> 64) & 0xFFF) << 3) | ((value >> 59) & 0x7)
