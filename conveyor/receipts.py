"""Receipts: opaque handles naming the queue, the receive that issued them (its token), the
message's row and its id. Every store makes and checks them with these helpers, so a receipt
of one queue is refused by another with the same words everywhere.

A receipt is SQS-shaped: characters of the base64 alphabet alone (no `-`, which AWS's SQS
Extended Client splits handles on), `QUEUE/TOKEN/ROW/ID` with the queue's name and the row
in hex and the message id in base64 (it is last, so a `/` of base64 in it is no separator).
Receipts of the earlier form, `QUEUE.TOKEN.ROW.ID` with the name in URL-safe base64, are
still taken (a receive's receipts outlive an upgrade by up to its visibility timeout)."""

from __future__ import annotations

import base64
import binascii
import functools
import os
import threading
from binascii import a2b_base64, b2a_base64
from collections.abc import Sequence

from .exceptions import MalformedReceipt, ReceiptHandleInvalid
from .forks import renew_after_fork
from .validation import MAX_RETENTION, MAX_VISIBILITY

# A receive's token is 16 hex digits: the receive's second modulo 2**24 (six digits; 194
# days, past the life of any message), then 40 random bits. A claim's row keeps the token,
# so a receipt whose stamp was altered no longer matches it.
_STAMP_DIGITS = 6
_STAMP_MOD = 1 << (4 * _STAMP_DIGITS)
_OLDEST_CLAIM = MAX_RETENTION + MAX_VISIBILITY  # a claim older than this has no message left


class _RandomBytes:
    """Bytes from the system's random source (`os.urandom`, as `secrets` draws them), read
    a few kilobytes at a time rather than a system call a receive; a forked child starts
    afresh (it must not hand out its parent's)."""

    SIZE = 4096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool = b""
        self._at = 0
        renew_after_fork(self)

    def hex(self, n: int) -> str:
        with self._lock:
            at = self._at
            if at + n > len(self._pool):
                self._pool, at = os.urandom(self.SIZE), 0
            self._at = at + n
            return self._pool[at : at + n].hex()

    def forked(self) -> None:
        self._lock = threading.Lock()
        self._pool, self._at = b"", 0


_RANDOM = _RandomBytes()


def claim_token(now: float) -> str:
    """A new receive's token, stamped with the second it was made at."""
    return f"{int(now) % _STAMP_MOD:06x}{_RANDOM.hex(5)}"


def seconds_since_claim(receipt: str, now: float) -> int | None:
    """Whole seconds since the receive that issued `receipt`, read from its token's stamp;
    None for what is not a receipt of these stores, or whose stamp puts it older than any
    message lives (a token made before tokens carried stamps)."""
    parts = _fields(receipt)
    if parts is None:
        return None
    try:
        stamp = int(parts[1][:_STAMP_DIGITS], 16)
    except ValueError:
        return None
    elapsed = (int(now) - stamp) % _STAMP_MOD
    return elapsed if elapsed <= _OLDEST_CLAIM else None


@functools.lru_cache(maxsize=4096)
def _queue_tag(queue: str) -> str:
    return queue.encode().hex()


@functools.lru_cache(maxsize=4096)
def _old_queue_tag(queue: str) -> str:
    return base64.urlsafe_b64encode(queue.encode()).decode().rstrip("=")


def make_receipt(queue: str, row: int, message_id: str, token: str) -> str:
    """An opaque receipt: the queue, the receive's token, the message's row and id."""
    return receipt_prefix(queue, token) + receipt_tail(row, message_id)


def receipt_prefix(queue: str, token: str) -> str:
    """What the receipts of one receive share: a receipt is this, then `receipt_tail`."""
    return f"{_queue_tag(queue)}/{token}/"


def receipt_tail(row: int, message_id: str) -> str:
    """What follows `receipt_prefix` in one message's receipt: its row and id."""
    # binascii's own: base64's wrappers would add a Python call or two to every message
    return f"{row:x}/{b2a_base64(message_id.encode(), newline=False).decode()}"


def parse_receipt(queue: str, receipt: str) -> tuple[int, str, str]:
    """(row, message id, token) from a receipt of `queue`; ReceiptHandleInvalid otherwise."""
    return _parse_receipt(_queue_tag(queue), queue, receipt)


def _fields(receipt: object) -> list[str] | None:
    """A receipt's four fields (queue tag, token, row, message id, the id decoded) where it
    has their shape; None where it cannot be a receipt of these stores."""
    if not isinstance(receipt, str) or len(receipt) > 2048:
        return None
    parts = receipt.split("/", 3)
    if len(parts) == 4 and len(parts[1]) == 16:
        try:
            parts[3] = a2b_base64(parts[3], strict_mode=True).decode()
            return parts if parts[3] else None
        except (ValueError, binascii.Error, UnicodeDecodeError):
            pass
    parts = receipt.split(".", 3)  # the earlier form
    if len(parts) != 4 or len(parts[1]) != 16 or not parts[3]:
        return None
    return parts


def _queue_named(tag: str) -> str:
    """The queue name a receipt's tag holds, of either form ("?" for neither)."""
    try:
        return bytes.fromhex(tag).decode()
    except (ValueError, UnicodeDecodeError):
        pass
    try:
        return base64.urlsafe_b64decode(tag + "=" * (-len(tag) % 4)).decode()
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return "?"


def _parse_receipt(tag: str, queue: str, receipt: str) -> tuple[int, str, str]:
    parts = _fields(receipt)
    try:
        if parts is None:
            raise ValueError
        owner, token, row_hex, message_id = parts
        row = int(row_hex, 16)
        int(token, 16)
    except ValueError:
        raise MalformedReceipt(
            f"receipt handle {receipt!r:.60} is malformed: pass the receipt a receive returned"
        ) from None
    if owner != tag and owner != _old_queue_tag(queue):
        name = _queue_named(owner)
        raise ReceiptHandleInvalid(f"this receipt handle belongs to queue {name!r}, not {queue!r}")
    return row, message_id, token


Parsed = tuple[int, str, str] | ReceiptHandleInvalid


def group_receipts(
    queue: str, receipts: Sequence[str]
) -> tuple[list[Parsed], dict[str, list[int]]]:
    """Each receipt parsed (or its error), and the rows to delete grouped by receive token:
    receipts of one receive share its token, so one statement per token deletes them."""
    tag = _queue_tag(queue)
    parsed: list[Parsed] = []
    by_token: dict[str, list[int]] = {}
    for receipt in receipts:
        try:
            item = _parse_receipt(tag, queue, receipt)
        except ReceiptHandleInvalid as exc:
            parsed.append(exc)
            continue
        parsed.append(item)
        row, _, token = item
        rows = by_token.get(token)
        if rows is None:
            by_token[token] = [row]
        else:
            rows.append(row)
    return parsed, by_token


def receipt_results(parsed: Sequence[Parsed], gone: set[tuple[str, int]]) -> list[Exception | None]:
    """Per receipt: None if its claim's row was deleted (`gone` holds the (token, row) pairs
    deleted), else why not: an earlier receipt of a row deleted by its newest one is stale."""
    results: list[Exception | None] = []
    for item in parsed:
        if isinstance(item, ReceiptHandleInvalid):
            results.append(item)
            continue
        row, message_id, token = item
        if (token, row) in gone:
            gone.discard((token, row))
            results.append(None)
        else:
            results.append(stale_receipt(message_id))
    return results


def stale_receipt(message_id: str) -> ReceiptHandleInvalid:
    return ReceiptHandleInvalid(
        f"receipt handle for message {message_id!r} is no longer valid: the message was"
        " deleted or received again since (receive it again for a fresh receipt)"
    )
