"""What one publish carries to a topic's subscribers: the message checked (its text per
protocol, its attributes, its FIFO ids), whether a subscription's filter policy lets it
through, and the JSON envelope a subscriber receives unless it asked for raw delivery."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import threading
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from ...exceptions import SnsError
from ...models import AttributeValue, TypedValue
from ...validation import GROUP_ID_RE, MESSAGE_ID_RE, is_sqs_number, parse_json_text
from ..sqs.names import Caller
from .filter import matches_attributes, matches_body
from .wire import invalid, numbered

MAX_MESSAGE = 262_144


# a UUID's version and variant bits, which a copy's id keeps from its publish's
_UUID_FIXED = (0xF << 76) | (0x3 << 62)


def copy_id(publish_id: str, queue: str) -> str:
    """The SQS message id of a publish's copy in `queue`: one of its own per queue, as SNS
    gives each queue's copy, from which `publish_id` is found again (`copy_id` of a copy's
    id and its queue): the publish's UUID with the bits of a digest of the queue's name
    flipped, its version and variant kept."""
    try:
        value = uuid.UUID(publish_id).int
    except ValueError:  # a message of the queue's own, sent with an id of the sender's
        return publish_id
    digest = hashlib.sha256(queue.encode()).digest()[:16]
    flip = int.from_bytes(digest, "big") & ~_UUID_FIXED
    return str(uuid.UUID(int=value ^ flip))


class Publication:
    """One message to publish, checked: the text per protocol, attributes, FIFO ids."""

    def __init__(
        self,
        message: str,
        structure: dict[str, str] | None,
        subject: str | None,
        attributes: dict[str, AttributeValue],
        wire: dict[str, dict[str, str]],
        group_id: str | None,
        dedup_id: str | None,
        size: int,
    ) -> None:
        self.message = message
        self.structure = structure
        self.subject = subject
        self.attributes = attributes
        self.wire = wire  # the attributes as SNS shows them: name: {"DataType", "StringValue"}
        self.group_id = group_id
        self.dedup_id = dedup_id
        self.size = size  # bytes of the message and its attributes, as SNS counts them

    def body_for(self, protocol: str) -> str:
        if self.structure is None:
            return self.message
        return self.structure.get(protocol, self.structure["default"])


def read_publication(
    params: Mapping[str, Any], topic: str, settings: Mapping[str, str], place: int = 0
) -> Publication:
    """A Publish's message, or with `place` (from 1) that entry of a PublishBatch: SNS
    refuses the whole batch for an entry it refuses."""
    at = f"PublishBatchRequestEntries.{place}." if place else ""
    message = params.get("Message")
    if not isinstance(message, str) or message == "":
        raise invalid(f"{at}Empty message")
    structure = None
    if params.get("MessageStructure") is not None:
        if params.get("MessageStructure") != "json":
            raise invalid(f"{at}MessageStructure: only 'json' is accepted")
        try:
            parsed = parse_json_text(message)
        except ValueError:
            raise invalid("Message Structure - JSON message body failed to parse") from None
        # as on SNS, an entry that is not a string is ignored: `default` must be one
        entries = parsed.items() if isinstance(parsed, dict) else ()
        structure = {str(k): v for k, v in entries if isinstance(v, str)}
        if "default" not in structure:
            raise invalid("Message Structure - No default entry in JSON message body")
    subject = params.get("Subject")
    if subject is not None and (
        not isinstance(subject, str)
        or not 0 < len(subject) <= 100
        or any(c in subject for c in "\r\n")
        or not subject.isprintable()
    ):
        raise invalid(f"{at}Subject")  # SNS's word: 1-100 printable characters, one line
    path = (f"publishBatchRequestEntries.{place}.member." if place else "") + "messageAttributes"
    attributes, wire = message_attributes(params.get("MessageAttributes"), at, path)
    size = len(message.encode()) + sum(
        len(k.encode())
        + len(v["DataType"].encode())
        + len(v.get("StringValue", v.get("BinaryValue", "")).encode())
        for k, v in wire.items()
    )
    if size > MAX_MESSAGE:
        raise invalid(f"{at}Message too long")  # over MAX_MESSAGE bytes with its attributes
    group_id, dedup_id = params.get("MessageGroupId"), params.get("MessageDeduplicationId")
    if topic.endswith(".fifo"):
        if group_id is None:
            raise invalid("The MessageGroupId parameter is required for FIFO topics")
        if not isinstance(group_id, str) or not GROUP_ID_RE.fullmatch(group_id):
            raise invalid(f"{at}MessageGroupId: 1-128 printable ASCII characters")
        if dedup_id is None:
            if settings.get("ContentBasedDeduplication", "false").lower() != "true":
                raise invalid(
                    "The topic should either have ContentBasedDeduplication enabled"
                    " or MessageDeduplicationId provided explicitly"
                )
            dedup_id = hashlib.sha256(message.encode()).hexdigest()
        elif not isinstance(dedup_id, str) or not MESSAGE_ID_RE.fullmatch(dedup_id):
            raise invalid(f"{at}MessageDeduplicationId: 1-128 printable ASCII characters")
    else:
        # a standard topic passes a group on to its queues (SQS fair queues), as SNS does
        if group_id is not None and (
            not isinstance(group_id, str) or not GROUP_ID_RE.fullmatch(group_id)
        ):
            raise invalid(f"{at}MessageGroupId: 1-128 printable ASCII characters")
        if dedup_id is not None:
            raise invalid(
                f"{at}MessageDeduplicationId Reason: The request includes"
                " MessageDeduplicationId parameter that is not valid for this topic type"
            )
    return Publication(message, structure, subject, attributes, wire, group_id, dedup_id, size)


def message_attributes(
    raw: Any, at: str, path: str = "messageAttributes"
) -> tuple[dict[str, AttributeValue], dict[str, dict[str, str]]]:
    """A publish's message attributes, checked as SNS checks them (in its codes and words);
    `path` names them in a ValidationError (SNS's request path)."""
    attributes: dict[str, AttributeValue] = {}
    wire: dict[str, dict[str, str]] = {}
    for item in numbered(raw.get("entry") if isinstance(raw, dict) else raw):
        if not isinstance(item, dict) or not isinstance(item.get("Name"), str):
            raise invalid(f"{at}MessageAttributes: each entry needs a Name and a Value")
        name, value = item["Name"], item.get("Value")
        _check_attribute_name(name)
        if not isinstance(value, dict) or not isinstance(value.get("DataType"), str):
            raise SnsError(
                "ValidationError",
                f"1 validation error detected: Value null at '{path}.{name}.member.dataType'"
                " failed to satisfy constraint: Member must not be null",
            )
        kind = value["DataType"]
        base, dot, label = kind.partition(".")
        if base not in ("String", "Number", "Binary") or (dot and not label):
            raise _bad_value(
                f"The message attribute '{name}' has an invalid message attribute type, the"
                " set of supported type prefixes is Binary, Number, and String."
            )
        field = "Binary" if base == "Binary" else "String"
        text = value.get(f"{field}Value")
        if text is None and value.get("BinaryValue" if field == "String" else "StringValue"):
            raise _bad_value(
                f"The message attribute '{name}' with type '{base}' must use field '{field}'."
            )
        data: str | bytes | None = text
        if base == "Binary" and isinstance(text, str):
            try:
                data = base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                raise _bad_value(
                    f"The message attribute '{name}' has a Binary value that is not base64."
                ) from None
        if not isinstance(text, str) or not data:
            raise _bad_value(
                f"The message attribute '{name}' must contain non-empty message attribute"
                f" value for message attribute type '{base}'."
            )
        if base == "Number" and not is_sqs_number(text):  # what subscribed queues take
            raise _bad_value(f"Could not cast message attribute '{name}' value to number.")
        attributes[name] = TypedValue(kind, data)
        wire[name] = {"DataType": kind, f"{field}Value": text}
    if len(attributes) > 10:
        raise invalid(f"{at}MessageAttributes: at most 10 attributes")
    return attributes, wire


def _bad_value(message: str) -> SnsError:
    return SnsError("ParameterValueInvalid", message)


def _check_attribute_name(name: str) -> None:
    """A message attribute's name, as SNS checks it: at most 255 bytes of letters, digits,
    `-`, `_` and `.`, not starting or ending with `.` nor having two in a row, and not
    starting with `AWS.` or `Amazon.`."""
    if len(name.encode()) > 255:
        raise _bad_value("Length of message attribute name must be less than 256 bytes.")
    wrong = next((c for c in name if not (c.isascii() and (c.isalnum() or c in "-_."))), None)
    if wrong is not None:
        raise _bad_value(
            f"Invalid non-alphanumeric character '#x{ord(wrong):X}' was found in the message"
            " attribute name. Can only include alphanumeric characters, hyphens, underscores,"
            " or dots."
        )
    if not name:
        raise _bad_value("The message attribute name must not be empty.")
    if name.startswith("."):
        raise _bad_value("Invalid message attribute name starting with character '.' was found.")
    if name.endswith("."):
        raise _bad_value("Invalid message attribute name ending with character '.' was found.")
    if ".." in name:
        raise _bad_value("Message attribute name can not have successive '.' character.")
    if name.lower().startswith(("aws.", "amazon.")):
        raise _bad_value(f"The message attribute name '{name}' is reserved for use by AWS.")


def passes(attributes: Mapping[str, str], p: Publication) -> bool:
    policy_text = attributes.get("FilterPolicy")
    if not policy_text:
        return True
    scope = attributes.get("FilterPolicyScope", "MessageAttributes")
    policy = json.loads(policy_text)
    if not policy:
        return True
    if scope == "MessageBody":
        try:
            body = parse_json_text(p.body_for("sqs"))
        except ValueError:
            return False
        return matches_body(policy, body)
    return matches_attributes(policy, p.wire)


def timestamp(now: datetime) -> str:
    """SNS's time of a message: ISO 8601 in UTC, to the millisecond."""
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


_sequence_lock = threading.Lock()
_last_sequence = 0


def topic_sequence(now: datetime) -> int:
    """A FIFO topic's sequence number for a publication at `now`: its microseconds since the
    epoch, made larger than the last one this process gave (so strictly increasing)."""
    global _last_sequence
    with _sequence_lock:
        _last_sequence = max(int(now.timestamp() * 1_000_000), _last_sequence + 1)
        return _last_sequence


Sign = Callable[[dict[str, Any]], dict[str, Any]]
"""Adds SignatureVersion, Signature and SigningCertURL to a message (signing.py)."""


def envelope(
    mid: str,
    arn: str,
    p: Publication,
    body: str,
    caller: Caller,
    topic: str,
    subscription: str,
    now: datetime,
    sign: Sign | None = None,
    sequence: int | None = None,
) -> str:
    """The JSON a subscribed queue or endpoint gets for a publication (unless raw delivery
    is on): `subscription` (its ARN) in the UnsubscribeURL, `now` the publication's time,
    signed by `sign` (the same signature for every subscription: the UnsubscribeURL is not
    in what is signed); a FIFO topic's copies carry its `sequence` number."""
    unsubscribe = f"{caller.base_url}/?Action=Unsubscribe&SubscriptionArn={subscription}"
    envelope: dict[str, Any] = {"Type": "Notification", "MessageId": mid}
    if topic.endswith(".fifo"):
        envelope["SequenceNumber"] = str(sequence or topic_sequence(now)).rjust(20, "0")
    envelope["TopicArn"] = arn
    if p.subject is not None:
        envelope["Subject"] = p.subject
    envelope["Message"] = body
    envelope["Timestamp"] = timestamp(now)
    if topic.endswith(".fifo"):
        envelope["UnsubscribeURL"] = unsubscribe
    else:
        if sign is not None:
            sign(envelope)
        envelope["UnsubscribeURL"] = unsubscribe
    if p.wire:
        envelope["MessageAttributes"] = {
            k: {"Type": v["DataType"], "Value": v.get("StringValue", v.get("BinaryValue", ""))}
            for k, v in p.wire.items()
        }
    return json.dumps(envelope, indent=2)
