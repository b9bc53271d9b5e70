"""The two wire protocols of the SQS API: AWS JSON 1.0 and Query (form in, XML out).

Actions work on JSON-shaped parameters and results (the shapes of botocore's model); this
module turns a Query request into that shape and a result into Query's XML, and renders
errors the way each protocol does (with the ``x-amzn-query-error`` header JSON clients use
to recover the Query error code).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import re
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl

import orjson

from ...exceptions import ConveyorError, MalformedRequest
from ...validation import parse_json_text
from ..front.query_xml import XML_DECLARATION, QueryXml
from ..front.query_xml import XML_UNSAFE as XML_UNSAFE

_small_md5: Callable[[bytes], hashlib._Hash] | None
try:  # CPython's built-in MD5, absent from builds made without it
    _small_md5 = importlib.import_module("_md5").md5
except ImportError:  # pragma: no cover - CPython's builds on PyPI and Debian have it
    _small_md5 = None

XMLNS = "http://queue.amazonaws.com/doc/2012-11-05/"
JSON_CONTENT_TYPE = "application/x-amz-json-1.0"

# Query names of list members and map entries, and the JSON names they stand for.
QUERY_LISTS = {
    "AttributeName": "AttributeNames",
    "MessageAttributeName": "MessageAttributeNames",
    "MessageSystemAttributeName": "MessageSystemAttributeNames",
    "TagKey": "TagKeys",
    "AWSAccountId": "AWSAccountIds",
    "ActionName": "Actions",
    "SendMessageBatchRequestEntry": "Entries",
    "DeleteMessageBatchRequestEntry": "Entries",
    "ChangeMessageVisibilityBatchRequestEntry": "Entries",
    "StringListValue": "StringListValues",
    "BinaryListValue": "BinaryListValues",
}
QUERY_MAPS = {
    "Attribute": ("Attributes", "Name", "Value"),
    "Tag": ("Tags", "Key", "Value"),
    "MessageAttribute": ("MessageAttributes", "Name", "Value"),
    "MessageSystemAttribute": ("MessageSystemAttributes", "Name", "Value"),
}

# JSON names of results and the element each member of them gets in Query's XML.
XML_LISTS = {
    "QueueUrls": "QueueUrl",
    "queueUrls": "QueueUrl",
    "Messages": "Message",
    "Failed": "BatchResultErrorEntry",
    "Results": "Result",
}
XML_MAPS = {
    "Attributes": ("Attribute", "Name", "Value"),
    "Tags": ("Tag", "Key", "Value"),
    "MessageAttributes": ("MessageAttribute", "Name", "Value"),
}

# Query error codes whose JSON protocol error type has another name (botocore's model).
JSON_ERROR_TYPES = {
    "AWS.SimpleQueueService.NonExistentQueue": "QueueDoesNotExist",
    "QueueAlreadyExists": "QueueNameExists",
    "AWS.SimpleQueueService.MessageNotInflight": "MessageNotInflight",
    "AWS.SimpleQueueService.EmptyBatchRequest": "EmptyBatchRequest",
    "AWS.SimpleQueueService.TooManyEntriesInBatchRequest": "TooManyEntriesInBatchRequest",
    "AWS.SimpleQueueService.BatchEntryIdsNotDistinct": "BatchEntryIdsNotDistinct",
    "AWS.SimpleQueueService.InvalidBatchEntryId": "InvalidBatchEntryId",
    "AWS.SimpleQueueService.BatchRequestTooLong": "BatchRequestTooLong",
    "AWS.SimpleQueueService.UnsupportedOperation": "UnsupportedOperation",
    "AWS.SimpleQueueService.PurgeQueueInProgress": "PurgeQueueInProgress",
    "InvalidParameterValue": "InvalidParameterValueException",
    "MissingParameter": "MissingRequiredParameterException",
    "InvalidAction": "UnknownOperationException",
    "MalformedQueryString": "SerializationException",
}
# the ASCII characters XML 1.0 allows, deleted by bytes.translate to find any other
_XML_ASCII = bytes([0x9, 0xA, 0xD, *range(0x20, 0x80)])


def xml_unsafe(text: str, encoded: bytes | None = None) -> str | None:
    """The first character of `text` that XML 1.0 does not allow (SQS refuses it in a body
    or an attribute), or None. ASCII text is checked in C by `bytes.translate`, four times
    faster than the regular expression at 100 characters and eight at 1,000 (on `encoded`,
    the text's UTF-8, when the caller has it already)."""
    if text.isascii():
        rest = (text.encode() if encoded is None else encoded).translate(None, _XML_ASCII)
        return chr(rest[0]) if rest else None
    bad = XML_UNSAFE.search(text)
    return bad.group(0) if bad else None


# Our codes that SQS spells differently.
SQS_CODES = {"UnsupportedOperation": "AWS.SimpleQueueService.UnsupportedOperation"}


def sqs_code(error: ConveyorError) -> str:
    return SQS_CODES.get(error.code, error.code)


# SQS's own words for errors whose text clients match on, by code: (Query, JSON) protocol
AWS_MESSAGES = {
    "AWS.SimpleQueueService.NonExistentQueue": (
        "The specified queue does not exist for this wsdl version.",
        "The specified queue does not exist.",
    ),
}


def sqs_message(error: ConveyorError, protocol: str) -> str:
    """The error's message as SQS words it where clients depend on the text, else ours."""
    words = AWS_MESSAGES.get(sqs_code(error))
    if words is None:
        return error.message
    return words[1] if protocol == "json" else words[0]


# -- Query requests -----------------------------------------------------------------------


# parameters that are one value, never a structure (they choose what the rest means)
SCALAR_PARAMS = ("Action", "Version")
_INDEX = re.compile(r"[1-9][0-9]{0,8}")  # a list's place: 1 to 999,999,999


def parse_query(body: bytes, query_string: str) -> dict[str, Any]:
    """Form body and query string of a Query request as JSON-shaped parameters."""
    return query_params(query_tree(body, query_string))


def query_params(tree: dict[str, Any]) -> dict[str, Any]:
    """SQS's JSON-shaped parameters from a Query request's tree of names."""
    return _convert(tree, "")


def query_tree(body: bytes, query_string: str) -> dict[str, Any]:
    """Form body and query string of a Query request as a tree: ``A.b.1=x`` becomes
    ``{"A": {"b": {"1": "x"}}}``."""
    try:
        pairs = parse_qsl(
            query_string, keep_blank_values=True, strict_parsing=False, errors="strict"
        )
        pairs += parse_qsl(
            body.decode("utf-8"), keep_blank_values=True, strict_parsing=False, errors="strict"
        )
    except UnicodeDecodeError as exc:
        raise MalformedRequest(
            f"the request's parameters are not UTF-8 once percent-decoded ({exc.reason}):"
            " percent-encode text as UTF-8"
        ) from None
    except ValueError as exc:
        raise MalformedRequest(f"the form body cannot be parsed: {exc}") from None
    tree: dict[str, Any] = {}
    for key, value in pairs:
        node = tree
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise _conflict(key)
            node = child
        last = parts[-1]
        held = node.get(last)
        if held is not None and held != value:
            # the same name twice (or a name and its members): no reading of it is safe
            if isinstance(held, dict):
                raise _conflict(key)
            raise MalformedRequest(
                f"parameter {key!r} is given twice, with different values: pass it once"
            )
        node[last] = value
    for name in SCALAR_PARAMS:
        if isinstance(tree.get(name), dict):
            raise MalformedRequest(
                f"{name} is a single value ({name}=...): parameters named {name}.* are not allowed"
            )
    return tree


def _conflict(key: str) -> MalformedRequest:
    return MalformedRequest(
        f"parameter {key!r} conflicts with another of that name: a name carries either a"
        " value or members (NAME.N...), not both"
    )


def _convert(node: dict[str, Any], path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in QUERY_LISTS:
            out[QUERY_LISTS[key]] = [_member(v, f"{path}{key}") for v in _numbered(key, value)]
        elif key in QUERY_MAPS:
            name, k_name, v_name = QUERY_MAPS[key]
            entries: dict[str, Any] = {}
            if isinstance(value, dict) and k_name in value and set(value) <= {k_name, v_name}:
                # one entry without its number: ``Attribute.Name=...&Attribute.Value=...``,
                # as AWS's API reference samples and older SDKs send it
                value = {"1": value}
            for item in _numbered(key, value):
                if not isinstance(item, dict) or k_name not in item:
                    raise MalformedRequest(f"{path}{key}.N needs a .{k_name} and a .{v_name}")
                entries[str(item[k_name])] = _member(item.get(v_name, ""), f"{path}{key}")
            out[name] = entries
        elif isinstance(value, dict):
            out[key] = _convert(value, f"{path}{key}.")
        else:
            out[key] = value
    return out


def _member(value: Any, path: str) -> Any:
    return _convert(value, f"{path}.N.") if isinstance(value, dict) else value


def _numbered(key: str, value: Any) -> list[Any]:
    if value == "":
        return []  # an empty list, as clients send it (``X=``)
    if not isinstance(value, dict):
        return [value]
    members = in_order(value)
    if members is None:
        raise MalformedRequest(
            f"{key}.N: N must be a number from 1 to 999999999, without leading zeros"
        )
    return members


def in_order(node: dict[str, Any]) -> list[Any] | None:
    """The members of a Query list (``X.1``, ``X.2``, ...) in the order of their numbers;
    None if a number is not 1 to 999,999,999 written without leading zeros (so no two
    spellings, such as ``X.1`` and ``X.01``, name one place)."""
    if not all(_INDEX.fullmatch(index) for index in node):
        return None
    return [v for _, v in sorted((int(index), v) for index, v in node.items())]


# -- Query responses ----------------------------------------------------------------------


WRITER = QueryXml(
    XMLNS, wrapped=False, escape=False, lists=XML_LISTS, maps=XML_MAPS, result_entries="Successful"
)


def query_response(action: str, result: Mapping[str, Any], request_id: str) -> bytes:
    return WRITER.answer(action, result, request_id)


def query_error(error: ConveyorError, request_id: str) -> bytes:
    if sqs_code(error) == "UnknownOperationException":
        return XML_DECLARATION + b"<UnknownOperationException/>"  # SQS's whole answer
    message = sqs_message(error, "query")
    return WRITER.error(error.sender_fault, sqs_code(error), message, request_id, detail=True)


# -- JSON ---------------------------------------------------------------------------------


def parse_json(body: bytes) -> dict[str, Any]:
    """A JSON 1.0 request's parameters (orjson; the standard parser for what only it takes:
    lone surrogates, which SQS then refuses as characters, and numbers past 64 bits)."""
    if not body.strip():
        return {}
    try:
        params = orjson.loads(body)
    except orjson.JSONDecodeError:
        try:
            params = parse_json_text(body)
        except ValueError as exc:  # undecodable text and JSON nested too deeply, too
            raise MalformedRequest(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(params, dict):
        raise MalformedRequest("the request body must be a JSON object")
    return params


def dump_json(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:  # what orjson refuses: lone surrogates, numbers past 64 bits
        return json.dumps(value, separators=(",", ":")).encode()


def json_error(error: ConveyorError) -> tuple[bytes, dict[str, str]]:
    code = sqs_code(error)
    body = dump_json(
        {
            "__type": f"com.amazonaws.sqs#{JSON_ERROR_TYPES.get(code, code)}",
            "message": sqs_message(error, "json"),
        }
    )
    fault = "Sender" if error.sender_fault else "Receiver"
    return body, {"x-amzn-query-error": f"{code};{fault}"}


# -- digests ------------------------------------------------------------------------------


def md5_hex(data: bytes) -> str:
    """The hex MD5 of a body or attribute. Python's own MD5 (`_md5`), where the build has
    it, for up to 1 KiB: a third faster than OpenSSL's at 100 bytes, where the cost is the
    call (OpenSSL's is faster from a few KiB on)."""
    if len(data) <= 1024 and _small_md5 is not None:
        return _small_md5(data).hexdigest()
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def md5_hexes(bodies: Sequence[bytes]) -> list[str]:
    """`md5_hex` of each of a batch's bodies."""
    small = _small_md5
    if small is not None and max(map(len, bodies), default=0) <= 1024:
        return [small(body).hexdigest() for body in bodies]
    return [md5_hex(body) for body in bodies]


def md5_of_attributes(attributes: Iterable[tuple[str, str, str | bytes]]) -> str:
    """The digest SQS computes over (name, data type, value) attributes, sorted by name."""
    parts: list[bytes] = []
    for name, data_type, value in sorted(attributes, key=lambda a: a[0]):
        for text in (name, data_type):
            raw = text.encode()
            parts.append(struct.pack(">I", len(raw)) + raw)
        if isinstance(value, bytes):
            parts.append(b"\x02" + struct.pack(">I", len(value)) + value)
        else:
            raw = value.encode()
            parts.append(b"\x01" + struct.pack(">I", len(raw)) + raw)
    return md5_hex(b"".join(parts))
