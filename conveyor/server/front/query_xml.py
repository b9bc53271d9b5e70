"""The XML of the AWS Query protocol's answers and errors, one writer for SQS and SNS alike.

Each API tells it how its model writes lists and maps (`QueryXml`): SNS wraps a list's
members in ``<member>`` and a map's in ``<entry><key/><value/></entry>`` (`Entries`); SQS
repeats an element per member, under the names its model gives (``Messages`` as
``<Message>``, ``Attributes`` as ``<Attribute><Name/><Value/></Attribute>``). Results are
the JSON-shaped values the actions return.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from xml.etree import ElementTree as ET

XML_DECLARATION = b'<?xml version="1.0" encoding="UTF-8"?>\n'
# characters SQS does not take in bodies and attribute values (XML 1.0's, minus surrogates)
XML_UNSAFE = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def escaped(text: str) -> str:
    """`text` with each character XML 1.0 cannot carry written as ``\\uXXXX`` (names and
    values echoed in a message may hold NUL or U+FFFF)."""
    return XML_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class Entries(dict[str, str]):
    """A map written as ``<entry><key/><value/></entry>`` (SNS's Attributes)."""


@dataclass(frozen=True)
class QueryXml:
    """How one API writes its answers: its namespace, and its model's lists and maps."""

    xmlns: str
    # a list's members as <member> children of the list's element (SNS), or the element
    # repeated, one per member (SQS)
    wrapped: bool
    # text written with what XML cannot carry as \uXXXX (SNS), or as it is (SQS refuses
    # such characters on the way in)
    escape: bool
    # unwrapped: the element of each member, by the list's name (else the list's name)
    lists: Mapping[str, str] = field(default_factory=dict)
    # unwrapped: the (entry, key, value) elements of a map, by its name
    maps: Mapping[str, tuple[str, str, str]] = field(default_factory=dict)
    # unwrapped: the list whose members are written as <{Action}ResultEntry>
    result_entries: str | None = None

    def answer(
        self,
        action: str,
        result: Mapping[str, Any],
        request_id: str,
        *,
        xmlns: str | None = None,
        with_result: bool = True,
    ) -> bytes:
        """``<{Action}Response>``: the result in ``<{Action}Result>`` (left out where
        `with_result` is False), then the request id."""
        root = ET.Element(f"{action}Response", xmlns=xmlns or self.xmlns)
        if with_result:
            body = ET.SubElement(root, f"{action}Result")
            for key, value in result.items():
                self._member(body, key, value, action)
        meta = ET.SubElement(root, "ResponseMetadata")
        ET.SubElement(meta, "RequestId").text = request_id
        # a raw CR would reach the client as LF (XML parsers normalise line ends): AWS
        # writes &#xD;, which comes back as the CR it was
        return XML_DECLARATION + ET.tostring(root).replace(b"\r", b"&#xD;")

    def error(
        self,
        sender_fault: bool,
        code: str,
        message: str,
        request_id: str,
        *,
        detail: bool = False,
    ) -> bytes:
        """``<ErrorResponse>``: the error's type, code and message (and an empty
        ``<Detail/>`` where the API writes one), then the request id."""
        root = ET.Element("ErrorResponse", xmlns=self.xmlns)
        err = ET.SubElement(root, "Error")
        ET.SubElement(err, "Type").text = "Sender" if sender_fault else "Receiver"
        ET.SubElement(err, "Code").text = code
        ET.SubElement(err, "Message").text = escaped(message)
        if detail:
            ET.SubElement(err, "Detail")
        ET.SubElement(root, "RequestId").text = request_id
        return XML_DECLARATION + ET.tostring(root)

    def _member(self, parent: ET.Element, key: str, value: Any, action: str) -> None:
        """`value`, the result's member `key`, under `parent`."""
        if self.wrapped:
            self._value(ET.SubElement(parent, key), value, action)
        elif key == self.result_entries:
            for item in value:
                self._value(ET.SubElement(parent, f"{action}ResultEntry"), item, action)
        elif key in self.maps and isinstance(value, Mapping):
            tag, key_name, value_name = self.maps[key]
            for name, item in value.items():
                entry = ET.SubElement(parent, tag)
                ET.SubElement(entry, key_name).text = name
                self._value(ET.SubElement(entry, value_name), item, action)
        elif isinstance(value, list):
            tag = self.lists.get(key, key)
            for item in value:
                self._value(ET.SubElement(parent, tag), item, action)
        else:
            self._value(ET.SubElement(parent, key), value, action)

    def _value(self, el: ET.Element, value: Any, action: str) -> None:
        """`value` as the content of `el`."""
        if isinstance(value, Entries):
            for k, v in value.items():
                entry = ET.SubElement(el, "entry")
                ET.SubElement(entry, "key").text = k
                ET.SubElement(entry, "value").text = self._text(v)
        elif isinstance(value, Mapping):
            for k, v in value.items():
                self._member(el, k, v, action)
        elif isinstance(value, list):  # wrapped: a list inside a list's member
            for item in value:
                self._value(ET.SubElement(el, "member"), item, action)
        elif isinstance(value, bool):
            el.text = "true" if value else "false"
        else:
            el.text = self._text(value)

    def _text(self, value: Any) -> str:
        return escaped(str(value)) if self.escape else str(value)
