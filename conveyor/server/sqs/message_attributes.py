"""Message attributes on the SQS wire: typed values in, typed values out, with SQS's digests."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from ...exceptions import InvalidInput
from ...models import AttributeValue, TypedValue
from ...validation import (
    ATTRIBUTE_NAME_RE,
    MAX_MESSAGE_ATTRIBUTES,
    check_message_attributes,
    is_sqs_number,
)
from .wire import XML_UNSAFE, md5_of_attributes

TRACE_TYPE = "String.AWSTraceHeader"  # how a message's AWSTraceHeader is stored


def parse_message_attributes(raw: Any) -> tuple[dict[str, AttributeValue], str]:
    if not isinstance(raw, Mapping):
        raise InvalidInput("MessageAttributes must be a map of names to values")
    if len(raw) > MAX_MESSAGE_ATTRIBUTES:
        raise InvalidInput(
            f"Number of message attributes [{len(raw)}] exceeds the allowed maximum"
            f" [{MAX_MESSAGE_ATTRIBUTES}]."
        )
    out: dict[str, AttributeValue] = {}
    digest: list[tuple[str, str, str | bytes]] = []
    for name, spec in raw.items():
        if (
            not isinstance(name, str)
            or not ATTRIBUTE_NAME_RE.fullmatch(name)
            or name.startswith(".")
            or name.endswith(".")
            or ".." in name
            or name.lower().startswith(("aws.", "amazon."))
        ):
            raise InvalidInput(
                f"The message attribute name '{name}' is invalid. Attribute name can contain"
                " A-Z, a-z, 0-9, underscore (_), hyphen (-), and period (.) characters."
            )
        if not isinstance(spec, Mapping):
            raise InvalidInput(f"Message attribute {name!r} must have a DataType and a value")
        data_type = spec.get("DataType")
        if not isinstance(data_type, str) or not data_type:
            raise InvalidInput(f"The message attribute '{name}' must contain a non-empty DataType.")
        if data_type.partition(".")[0] not in ("String", "Number", "Binary"):
            raise InvalidInput(
                f"The message attribute '{name}' has an invalid message attribute type, the set"
                " of supported type prefixes is Binary, Number, and String."
            )
        value: str | bytes
        if data_type.startswith("Binary"):
            encoded = spec.get("BinaryValue")
            if not isinstance(encoded, str | bytes) or not encoded:
                raise InvalidInput(
                    f"The message attribute '{name}' with type 'Binary' must use field 'Binary'."
                )
            try:
                value = base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                raise InvalidInput(
                    f"Message attribute {name!r}: BinaryValue is not base64"
                ) from None
        else:
            text = spec.get("StringValue")
            if not isinstance(text, str) or text == "":
                raise InvalidInput(
                    f"Message (user) attribute '{name}' must contain a non-empty value of type"
                    f" '{data_type.partition('.')[0]}'."
                )
            bad = XML_UNSAFE.search(text)
            if bad:  # SQS: an invalid value (a body with these is InvalidMessageContents)
                raise InvalidInput(
                    f"Invalid characters found in the value of message attribute '{name}':"
                    f" {bad.group(0)!r} at {bad.start()} (SQS takes #x9, #xA, #xD, #x20 and"
                    " above, no surrogates)"
                )
            value = text
            if data_type.startswith("Number") and not is_sqs_number(text):
                raise InvalidInput(
                    f"Can't cast the value of message (user) attribute '{name}' to a number."
                )
        out[name] = value if data_type in ("String", "Binary") else TypedValue(data_type, value)
        digest.append((name, data_type, value))
    check_message_attributes(out)
    return out, md5_of_attributes(digest) if digest else ""


def parse_system_attributes(raw: Any) -> tuple[str, str]:
    if not isinstance(raw, Mapping) or set(raw) != {"AWSTraceHeader"}:
        raise InvalidInput("MessageSystemAttributes supports only AWSTraceHeader")
    spec = raw["AWSTraceHeader"]
    if not isinstance(spec, Mapping) or spec.get("DataType") != "String":
        raise InvalidInput("AWSTraceHeader must have DataType String")
    value = spec.get("StringValue")
    if not isinstance(value, str) or not value:
        raise InvalidInput("AWSTraceHeader needs a StringValue")
    return value, md5_of_attributes([("AWSTraceHeader", "String", value)])


def wanted(name: str, wanted: list[str]) -> bool:
    for w in wanted:
        if w in ("All", ".*", "*") or w == name or (w.endswith(".*") and name.startswith(w[:-2])):
            return True
    return False


def render_attribute(value: AttributeValue) -> dict[str, Any]:
    if isinstance(value, TypedValue):
        if isinstance(value.value, bytes):
            return {
                "DataType": value.data_type,
                "BinaryValue": base64.b64encode(value.value).decode(),
            }
        return {"DataType": value.data_type, "StringValue": value.value}
    if isinstance(value, bytes):
        return {"DataType": "Binary", "BinaryValue": base64.b64encode(value).decode()}
    if isinstance(value, str):
        return {"DataType": "String", "StringValue": value}
    return {"DataType": "Number", "StringValue": str(value)}


def raw_value(value: AttributeValue) -> str | bytes:
    if isinstance(value, TypedValue):
        return value.value
    if isinstance(value, bytes):
        return value
    return str(value)
