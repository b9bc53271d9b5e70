"""Checks on names, attributes, sizes and batches. Each failure says what to fix."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .exceptions import (
    BatchEntryIdsNotDistinct,
    EmptyBatch,
    InvalidAttribute,
    InvalidBatchEntryId,
    InvalidInput,
    InvalidName,
    MessageTooLong,
    TooManyEntries,
)
from .models import AttributeValue, QueueAttributes, TypedValue

NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,80}")
FIFO_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,75}\.fifo")
MAX_TOPIC_NAME = 256
INTERNAL_TOPICS = "conveyor-internal-"
"""The prefix of the topics the servers keep for themselves (their settings hold state, such
as SNS's signing key): never listed."""
TOPIC_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,256}")
FIFO_TOPIC_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,251}\.fifo")
ENTRY_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,80}")
ENTRY_IDS_RE = re.compile(f"{ENTRY_ID_RE.pattern}(?:\n{ENTRY_ID_RE.pattern})*")  # a line each
ATTRIBUTE_NAME_RE = re.compile(r"[A-Za-z0-9_.\u00c0-\u017f-]{1,256}")
"""SQS's documented characters, and the Latin letters U+00C0 to U+017F SQS also takes."""
MESSAGE_ID_RE = re.compile(r"[\x21-\x7e]{1,128}")
GROUP_ID_RE = re.compile(r"[\x21-\x7e]{1,128}")
NAMESPACE_RE = re.compile(r"[a-z0-9-]{1,32}:[0-9]{12}:")
"""A queue of another region and account of the SQS API: ``eu-west-1:123456789012:orders``."""

MAX_BATCH = 10
"""The most entries of a batch request of the SQS and SNS APIs (SQS's limit)."""
SDK_BATCH = 10_000
"""The most messages one SDK call sends, receives, deletes or changes (gq's producers and
consumers batch any number): split into the store's own batches (`Backend.batch_limit`)."""
# the entry ids of a batch given as a plain list: each entry's index
INDEX_IDS = tuple(str(i) for i in range(SDK_BATCH))
MAX_MESSAGE_ATTRIBUTES = 10
MAX_MESSAGE_BYTES = 1048576
"""The most any queue accepts (SQS's maximum)."""
MAX_RECEIVE = 10
MAX_VISIBILITY = 12 * 3600.0
MAX_RETENTION = 14 * 86400.0
MAX_DELAY = 15 * 60.0
MAX_WAIT = 20.0
# priorities every store orders by: a 16-bit band of the delivery order's key (docs/stores.md)
MIN_PRIORITY, MAX_PRIORITY = -32768, 32767
DEDUP_WINDOW = 5 * 60.0
MIN_RATE, MAX_RATE = 0.001, 1_000_000.0
"""Messages a second of a queue's rate limit or a throttled move."""
MAX_OFFSET = 2**63 - 1
"""The largest sequence number or offset (a signed 64-bit column on every store)."""
MAX_PEEK = 10_000
"""The most messages one peek or archive page returns."""
MAX_FAIL_DELAY = 12 * 3600.0


def check_queue_name(name: str) -> str:
    if not isinstance(name, str):
        raise InvalidName(f"queue name must be a string, got {type(name).__name__}")
    if NAME_RE.fullmatch(name) or FIFO_NAME_RE.fullmatch(name):
        return name
    ns = NAMESPACE_RE.match(name)
    if ns and (NAME_RE.fullmatch(name, ns.end()) or FIFO_NAME_RE.fullmatch(name, ns.end())):
        return name
    raise InvalidName(
        f"invalid queue name {name!r}: use 1-80 characters from A-Z, a-z, 0-9, '-' and '_'"
        " (FIFO queue names end in '.fifo')"
    )


def check_topic_name(name: str) -> str:
    if isinstance(name, str):
        start = ns.end() if (ns := NAMESPACE_RE.match(name)) else 0
        if TOPIC_NAME_RE.fullmatch(name, start) or FIFO_TOPIC_NAME_RE.fullmatch(name, start):
            return name
    raise InvalidName(
        f"invalid topic name {name!r}: use 1-{MAX_TOPIC_NAME} characters from A-Z, a-z, 0-9,"
        " '-' and '_' (FIFO topic names end in '.fifo')"
    )


def _range(name: str, value: Any, low: float, high: float, unit: str = "s") -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidAttribute(
            f"{name} must be a number from {low:g} to {high:g} {unit}, got {value!r}"
        )
    if not low <= value <= high:
        raise InvalidAttribute(f"{name} must be between {low:g} and {high:g} {unit}, got {value!r}")


def validate_attributes(name: str, attrs: QueueAttributes) -> QueueAttributes:
    """Check every attribute against its SQS range; return `attrs` unchanged when valid."""
    _range("visibility_timeout", attrs.visibility_timeout, 0, MAX_VISIBILITY)
    _range("delay", attrs.delay, 0, MAX_DELAY)
    _range("retention", attrs.retention, 60, MAX_RETENTION)
    _range("max_message_bytes", attrs.max_message_bytes, 1024, MAX_MESSAGE_BYTES, "bytes")
    _range("receive_wait", attrs.receive_wait, 0, MAX_WAIT)
    is_fifo_name = name.endswith(".fifo")
    if attrs.fifo != is_fifo_name:
        raise InvalidAttribute(
            f"queue {name!r}: FIFO queues must have names ending in '.fifo' and only they may"
            " (set fifo=True with a '.fifo' name, or neither)"
        )
    if attrs.content_based_dedup and not attrs.fifo:
        raise InvalidAttribute("content_based_dedup applies only to FIFO queues")
    if attrs.dedup_per_group and not attrs.fifo:
        raise InvalidAttribute("dedup_per_group applies only to FIFO queues")
    dl = attrs.dead_letter
    if dl is not None:
        check_queue_name(dl.queue)
        if dl.queue == name:
            raise InvalidAttribute(f"queue {name!r} cannot be its own dead-letter queue")
        if isinstance(dl.max_receive_count, bool) or not isinstance(dl.max_receive_count, int):
            raise InvalidAttribute("dead_letter.max_receive_count must be an integer")
        if not 1 <= dl.max_receive_count <= 1000:
            raise InvalidAttribute(
                f"dead_letter.max_receive_count must be between 1 and 1000,"
                f" got {dl.max_receive_count}"
            )
        if dl.queue.endswith(".fifo") != attrs.fifo:
            raise InvalidAttribute(
                "the dead-letter queue of a FIFO queue must be FIFO, and of a standard queue"
                " standard"
            )
    if attrs.rate_limit is not None:
        _range("rate_limit", attrs.rate_limit, MIN_RATE, MAX_RATE, "messages/s")
    if attrs.compress_over is not None:
        _range("compress_over", attrs.compress_over, 0, 1048576, "bytes")
    for key, value in attrs.tags.items():
        if not isinstance(key, str) or not 1 <= len(key) <= 128 or not isinstance(value, str):
            raise InvalidAttribute(f"tag {key!r}: keys are 1-128 characters, values strings")
    if len(attrs.tags) > 50:
        raise InvalidAttribute("a queue may have at most 50 tags")
    return attrs


def check_number(name: str, value: float, low: float, high: float, unit: str = "s") -> float:
    """`value` as a float when it is a number from `low` to `high` (not NaN, not infinite,
    not a bool); else InvalidInput naming the range."""
    try:
        _range(name, value, low, high, unit)
    except InvalidAttribute as exc:
        raise InvalidInput(exc.message) from None
    return float(value)


def check_count(name: str, value: int, low: int, high: int) -> int:
    """`value` when it is a whole number from `low` to `high` (not a bool); else
    InvalidInput naming the range."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(f"{name} must be a whole number from {low} to {high}, got {value!r}")
    return value


def check_visibility(value: float) -> float:
    return check_number("visibility_timeout", value, 0, MAX_VISIBILITY)


def check_delay(value: float) -> float:
    return check_number("delay", value, 0, MAX_DELAY)


def check_wait(value: float) -> float:
    return check_number("wait", value, 0, MAX_WAIT)


def check_deadline(value: float, now: float) -> float:
    """When a message must be processed by (gq's deadline): a Unix time up to 14 days (the
    longest retention) from `now`."""
    try:
        return check_number("deadline", value, 0, now + MAX_RETENTION)
    except InvalidInput:
        raise InvalidInput(
            f"deadline must be a Unix time in seconds, up to 14 days from now, got {value!r}"
        ) from None


def check_rate(value: float) -> float:
    """Messages a second of a throttled move: from 0.001 to 1,000,000."""
    return check_number("rate", value, MIN_RATE, MAX_RATE, "messages/s")


def check_max_messages(value: int, most: int = MAX_RECEIVE) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise InvalidInput(f"max_messages must be an integer from 1 to {most}, got {value!r}")
    return value


def check_priority(value: int) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not MIN_PRIORITY <= value <= MAX_PRIORITY
    ):
        raise InvalidInput(
            f"priority must be a whole number from {MIN_PRIORITY} to {MAX_PRIORITY}, got {value!r}"
        )
    return value


def check_message_id(value: str) -> str:
    if not isinstance(value, str) or not MESSAGE_ID_RE.fullmatch(value):
        raise InvalidInput(
            f"message id {value!r} must be 1-128 printable ASCII characters without spaces"
        )
    return value


def check_group_id(value: str, what: str = "group_id") -> str:
    if not isinstance(value, str) or not GROUP_ID_RE.fullmatch(value):
        raise InvalidInput(f"{what} {value!r} must be 1-128 printable ASCII characters")
    return value


def attribute_size(attributes: Mapping[str, AttributeValue]) -> int:
    """What attributes add to a message's size, as SQS counts it: each one's name, data type
    and value (a plain str is a "String", plain bytes a "Binary")."""
    size = 0
    for key, value in attributes.items():
        size += len(key.encode())
        if isinstance(value, TypedValue):
            size += len(value.data_type) + len(
                value.value if isinstance(value.value, bytes) else value.value.encode()
            )
        elif isinstance(value, bytes):
            size += 6 + len(value)  # "Binary"
        else:
            size += 6 + len(str(value).encode())  # "String"
    return size


def check_message_attributes(attributes: Mapping[str, AttributeValue]) -> None:
    if len(attributes) > MAX_MESSAGE_ATTRIBUTES:
        raise InvalidInput(
            f"a message may carry at most {MAX_MESSAGE_ATTRIBUTES} attributes,"
            f" got {len(attributes)}"
        )
    for key, value in attributes.items():
        if not isinstance(key, str) or not ATTRIBUTE_NAME_RE.fullmatch(key):
            raise InvalidInput(
                f"attribute name {key!r}: use 1-256 characters from A-Z, a-z, 0-9, '_', '-', '.'"
                " (and the letters U+00C0 to U+017F, such as ö or ß)"
            )
        if key.lower().startswith(("aws.", "amazon.")):
            raise InvalidInput(
                f"attribute name {key!r}: the prefixes AWS. and Amazon. are reserved"
            )
        if isinstance(value, TypedValue):
            check_typed_value(key, value)
        elif isinstance(value, bool) or not isinstance(value, str | int | float | bytes):
            raise InvalidInput(
                f"attribute {key!r} must be a string, a number or bytes, got {type(value).__name__}"
            )


def parse_json_text(text: str | bytes) -> Any:
    """`json.loads` for text a client gave (a policy, a message structure, a frame's
    content): JSON nested deeper than the parser goes is a ValueError too, as any JSON that
    does not parse, where `json.loads` raises RecursionError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


NUMBER_RE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def is_sqs_number(text: str) -> bool:
    """Whether `text` is a value SQS takes for a Number attribute: decimal notation in ASCII
    (an exponent allowed), up to 38 significant digits (leading and trailing zeros do not
    count), zero or between 10^-128 and 10^+126 in magnitude."""
    if not NUMBER_RE.fullmatch(text):
        return False
    mantissa, _, exponent = text.lower().partition("e")
    whole, _, fraction = mantissa.lstrip("+-").partition(".")
    digits = whole + fraction
    significant = digits.strip("0")
    if not significant:
        return True  # zero, whatever its exponent
    if len(significant) > 38:
        return False
    try:
        power = int(exponent or 0)
    except ValueError:  # past the digits Python converts: far out of range
        return False
    first = len(digits) - len(digits.lstrip("0"))  # where the first significant digit is
    magnitude = power + len(whole) - 1 - first  # the power of ten of that digit
    return -128 <= magnitude < 126 or (magnitude == 126 and significant == "1")


def check_typed_value(key: str, value: TypedValue) -> None:
    base, _, _ = value.data_type.partition(".")
    if base not in ("String", "Number", "Binary") or len(value.data_type) > 256:
        raise InvalidInput(
            f"attribute {key!r}: data type {value.data_type!r} must be String, Number or Binary,"
            " optionally followed by '.' and a custom label"
        )
    if isinstance(value.value, bytes) != (base == "Binary"):
        kind = "bytes" if base == "Binary" else "text"
        raise InvalidInput(f"attribute {key!r}: a {base} value must be {kind}")
    if base == "Number" and not is_sqs_number(str(value.value)):
        raise InvalidInput(
            f"attribute {key!r}: {value.value!r} is not a number"
            " (up to 38 digits of precision, between 10^-128 and 10^+126)"
        )


def check_body_size(body: bytes, attributes: Mapping[str, AttributeValue], limit: int) -> None:
    size = len(body) + attribute_size(attributes)
    if size > limit:
        raise MessageTooLong(
            f"message is {size} bytes (body and attributes); this queue accepts at most {limit}"
            " (raise max_message_bytes up to 1048576, or store the payload elsewhere)"
        )
    if not body:
        raise InvalidInput("message body must not be empty")


def check_batch_size(n: int, most: int = MAX_BATCH) -> None:
    if not n:
        raise EmptyBatch("a batch needs at least one entry")
    if n > most:
        raise TooManyEntries(f"a batch holds at most {most} entries, got {n}")


def check_batch(entry_ids: Sequence[str], most: int = MAX_BATCH) -> None:
    n = len(entry_ids)
    check_batch_size(n, most)
    # one match over the ids a line each (a third of the cost of one match per id); an id
    # holding a line break would pass as two, so the line breaks are counted too
    try:
        joined = "\n".join(entry_ids)
    except TypeError:  # an id that is not a string: said below
        joined = ""
    if joined.count("\n") != n - 1 or not ENTRY_IDS_RE.fullmatch(joined):
        for entry_id in entry_ids:
            if not isinstance(entry_id, str) or not ENTRY_ID_RE.fullmatch(entry_id):
                raise InvalidBatchEntryId(
                    f"batch entry id {entry_id!r}: use 1-80 characters from A-Z, a-z, 0-9, '-', '_'"
                )
    if len(set(entry_ids)) != n:
        raise BatchEntryIdsNotDistinct("batch entry ids must be distinct within one batch")
