"""An SQS request's parameters, read and checked, and its errors in SQS's own words: what
the actions of `api.SqsApi` share before and after they call the store."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ...exceptions import (
    BatchEntryIdsNotDistinct,
    ConveyorError,
    EmptyBatch,
    InvalidBatchEntryId,
    InvalidInput,
    MalformedReceipt,
    MessageTooLong,
    MissingParameter,
    TooManyEntries,
)
from ...validation import GROUP_ID_RE, MAX_BATCH, check_batch
from . import attributes as sqs_attributes
from .wire import sqs_code, xml_unsafe

TRACE_PARAM = "\x00X-Amzn-Trace-Id"  # the request's trace header, set by the endpoint

Params = dict[str, Any]
Result = dict[str, Any]


def check_fifo(entries: list[Params], content_based: bool, *, batch: bool = False) -> None:
    """A FIFO queue's send, or a batch with any entry, without MessageGroupId, without a
    de-duplication id (unless content-based) or with a delay fails whole, as on SQS (which
    calls a missing group a missing parameter in SendMessage, an invalid value in a batch)."""
    if any(not e.get("MessageGroupId") for e in entries):
        missing = "The request must contain the parameter MessageGroupId."
        raise InvalidInput(missing) if batch else MissingParameter(missing)
    if not content_based and any(e.get("MessageDeduplicationId") is None for e in entries):
        raise InvalidInput(
            "The queue should either have ContentBasedDeduplication enabled or"
            " MessageDeduplicationId provided explicitly"
        )
    for e in entries:
        delay = e.get("DelaySeconds")
        if delay not in (None, 0, "0"):
            raise InvalidInput(
                f"Value {delay} for parameter DelaySeconds is invalid. Reason: The request"
                " include parameter that is not valid for this queue type."
            )


def require(params: Params, key: str) -> Any:
    value = params.get(key)
    if value is None or value == "":
        raise MissingParameter(f"The request must contain the parameter {key}.")
    return value


def int_param(
    params: Params, key: str, low: int, high: int, default: int | None = None
) -> int | None:
    value = params.get(key)
    if value is None or value == "":
        return default
    number = sqs_attributes.int_in(value, low, high)
    if number is None:
        # SQS's words: WaitTimeSeconds says its range its own way
        limits = (
            f">= {low} and <= {high}" if key == "WaitTimeSeconds" else f"between {low} and {high}"
        )
        raise InvalidInput(
            f"Value {value} for parameter {key} is invalid. Reason: Must be {limits}, if provided."
        )
    return number


def check_ordering_ids(params: Params) -> None:
    """MessageGroupId and MessageDeduplicationId, where given, as SQS takes them (on any
    queue): 1-128 printable ASCII characters other than space, refused in SQS's words."""
    for key in ("MessageGroupId", "MessageDeduplicationId"):
        value = params.get(key)
        if value is not None and not (isinstance(value, str) and GROUP_ID_RE.fullmatch(value)):
            raise InvalidInput(
                f"Value {value} for parameter {key} is invalid. Reason: {key} can only include"
                " alphanumeric and punctuation characters. 1 to 128 in length."
            )


def list_param(params: Params, key: str) -> list[str]:
    value = params.get(key) or []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidInput(f"{key} must be a list of strings")
    return value


def batch_entries(params: Params, action: str) -> list[Params]:
    entries = params.get("Entries")
    if entries is None:
        raise MissingParameter("The request must contain the parameter Entries.")
    if entries == "":
        entries = []  # an empty list in the Query protocol (``Entries=``)
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise InvalidInput("Entries must be a list of objects")
    if not entries:
        raise EmptyBatch(f"There should be at least one {action}RequestEntry in the request.")
    return entries


def entry_size(entry: Params) -> int:
    """What a batch entry counts towards the batch's 1 MiB, as SQS counts it: the body and
    each attribute's name, data type and value (in UTF-8; a lone surrogate, which the entry
    is refused for, counted as its three bytes)."""
    size = _utf8_len(str(entry.get("MessageBody", "")))
    attributes = entry.get("MessageAttributes")
    if isinstance(attributes, dict):
        for key, spec in attributes.items():
            size += _utf8_len(str(key))
            if isinstance(spec, dict):
                size += _utf8_len(str(spec.get("DataType", "")))
                binary = spec.get("BinaryValue")
                if isinstance(binary, str | bytes):
                    size += len(binary) * 3 // 4  # its decoded length
                else:
                    size += _utf8_len(str(spec.get("StringValue", "")))
    return size


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def check_batch_ids(ids: list[str]) -> None:
    """A batch's entry ids, checked by the SDK's rules and reported in SQS's words."""
    try:
        check_batch(ids)
    except TooManyEntries:
        raise TooManyEntries(
            f"Maximum number of entries per request are {MAX_BATCH}. You have sent {len(ids)}."
        ) from None
    except InvalidBatchEntryId:
        raise InvalidBatchEntryId(
            "A batch entry id can only contain alphanumeric characters, hyphens and"
            " underscores. It can be at most 80 letters long."
        ) from None
    except BatchEntryIdsNotDistinct:
        repeated = next(i for n, i in enumerate(ids) if i in ids[:n])
        raise BatchEntryIdsNotDistinct(f"Id {repeated} repeated.") from None


def too_long(limit: int) -> MessageTooLong:
    return MessageTooLong(
        f"One or more parameters are invalid. Reason: Message must be shorter than {limit} bytes."
    )


@contextlib.contextmanager
def receipt_words(receipt: str | None = None) -> Iterator[None]:
    """A malformed receipt handle, reported in SQS's words: DeleteMessage names the handle
    (give it), ChangeMessageVisibility does not."""
    try:
        yield
    except MalformedReceipt:
        if receipt is None:
            raise MalformedReceipt("The input receipt handle is invalid.") from None
        raise MalformedReceipt(
            f'The input receipt handle "{receipt}" is not a valid receipt handle.'
        ) from None


def batch_outcome(successful: list[Result], failed: list[Result]) -> Result:
    """A batch call's answer: SQS leaves out `Failed` when every entry succeeded."""
    if failed:
        return {"Successful": successful, "Failed": failed}
    return {"Successful": successful}


def entry_failure(entry_id: str, error: Exception, receipt: str | None = None) -> Result:
    if isinstance(error, MalformedReceipt) and receipt is not None:
        error = MalformedReceipt(
            f'The input receipt handle "{receipt}" is not a valid receipt handle.'
        )
    if isinstance(error, ConveyorError):
        code, message, sender = sqs_code(error), error.message, error.sender_fault
    else:
        code, message, sender = "InternalError", "internal error", False
    return {"Id": entry_id, "SenderFault": sender, "Code": code, "Message": message}


PLAIN_KEYS = frozenset({"Id", "MessageBody"})


def plain_bodies(entries: list[Params]) -> list[bytes] | None:
    """The bodies of a batch whose entries are an id and a body SQS accepts each, and
    nothing else, encoded; None if any entry is more than that or its body is refused."""
    texts: list[str] = []
    for entry in entries:
        body = entry.get("MessageBody")
        if type(body) is not str or not body or not entry.keys() <= PLAIN_KEYS:
            return None
        texts.append(body)
    if xml_unsafe("".join(texts)) is not None:  # the batch's characters checked at once
        return None
    return [text.encode() for text in texts]


def expired_receipt(receipt: str) -> InvalidInput:
    return InvalidInput(
        f"Value {receipt} for parameter ReceiptHandle is invalid. Reason: The receipt handle"
        " has expired."
    )


def gone_receipt(receipt: str) -> InvalidInput:
    return InvalidInput(
        f"Value {receipt} for parameter ReceiptHandle is invalid. Reason: Message does not"
        " exist or is not available for visibility timeout change."
    )
