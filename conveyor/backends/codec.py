"""How stores keep message attributes: JSON text, with bytes and typed values tagged."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from ..models import AttributeValue, TypedValue


def encode_attributes(attributes: Mapping[str, AttributeValue]) -> str | None:
    if not attributes:
        return None
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if isinstance(value, bytes):
            out[key] = {"b": base64.b64encode(value).decode()}
        elif isinstance(value, TypedValue):
            v = value.value
            out[key] = (
                {"t": value.data_type, "v": v}
                if isinstance(v, str)
                else {"t": value.data_type, "b": base64.b64encode(v).decode()}
            )
        else:
            out[key] = value
    return json.dumps(out, separators=(",", ":"))


def decode_attributes(text: str | None) -> dict[str, AttributeValue]:
    if not text:
        return {}
    out: dict[str, AttributeValue] = {}
    for key, value in json.loads(text).items():
        if not isinstance(value, dict):
            out[key] = value
        elif "t" not in value:
            out[key] = base64.b64decode(value["b"])
        else:
            v = value["v"] if "v" in value else base64.b64decode(value["b"])
            out[key] = TypedValue(value["t"], v)
    return out
