"""SQS queue attributes to and from Conveyor's `QueueAttributes`."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ...client import Client
from ...exceptions import InvalidAttribute, InvalidAttributeName, InvalidInput, QueueDoesNotExist
from ...models import DeadLetterPolicy, QueueAttributes, QueueInfo, QueueStats
from ...validation import parse_json_text
from .names import Namespaces
from .policy import allows
from .wire import xml_unsafe

INT_ATTRIBUTES = {
    "VisibilityTimeout": ("visibility_timeout", 0, 43200),
    "DelaySeconds": ("delay", 0, 900),
    "MaximumMessageSize": ("max_message_bytes", 1024, 1048576),
    "MessageRetentionPeriod": ("retention", 60, 1209600),
    "ReceiveMessageWaitTimeSeconds": ("receive_wait", 0, 20),
}
# Kept verbatim in QueueAttributes.settings (validated here).
SETTINGS = (
    "Policy",
    "RedriveAllowPolicy",
    "FifoThroughputLimit",
    "KmsMasterKeyId",
    "KmsDataKeyReusePeriodSeconds",
    "SqsManagedSseEnabled",
)
COUNTS = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
)
READ_ONLY = (*COUNTS, "CreatedTimestamp", "LastModifiedTimestamp", "QueueArn")
WRITABLE = (
    *INT_ATTRIBUTES,
    "RedrivePolicy",
    "FifoQueue",
    "ContentBasedDeduplication",
    "DeduplicationScope",
    *SETTINGS,
)
ALL_NAMES = frozenset((*READ_ONLY, *WRITABLE))
FIFO_ONLY = ("ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit")
STANDARD_NAME = (
    "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length"
)
FIFO_NAME = (
    "The name of a FIFO queue can only include alphanumeric characters, hyphens, or"
    " underscores, must end with .fifo suffix and be 1 to 80 in length."
)


def _bool(name: str, value: Any) -> bool:
    text = str(value).lower()
    if text not in ("true", "false"):
        raise InvalidAttribute(f"Invalid value for the parameter {name}.")
    return text == "true"


INTEGER_RE = re.compile(r"[+-]?[0-9]{1,19}")  # what SQS's own parser takes, in ASCII


def int_in(value: Any, low: int, high: int) -> int | None:
    """`value` (an int or its text, as the two protocols send it) if within low..high.

    Text is a sign and ASCII digits alone: Python's `int` would also take spaces around
    them, underscores between them and other scripts' digits, which SQS refuses."""
    if isinstance(value, str) and INTEGER_RE.fullmatch(value):
        number = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        return None
    return number if low <= number <= high else None


def dead_letter_sources(client: Client, dlq: str, candidates: Iterable[str]) -> list[str]:
    """The queues among `candidates` whose RedrivePolicy names `dlq`."""
    sources = []
    for name in candidates:
        try:
            dl = client.queue_info(name, fresh=True).attributes.dead_letter
        except QueueDoesNotExist:
            continue  # deleted while we looked
        if dl is not None and dl.queue == dlq:
            sources.append(name)
    return sources


def _int(name: str, value: Any, low: int, high: int) -> int:
    number = int_in(value, low, high)
    if number is None:
        raise InvalidAttribute(f"Invalid value for the parameter {name}.")
    return number


def _json(name: str, value: Any) -> Any:
    try:
        return parse_json_text(value) if isinstance(value, str) else None
    except ValueError:
        return None


def attribute_changes(
    values: Mapping[str, Any],
    *,
    name: str,
    current: QueueAttributes | None,
    ns: Namespaces,
    lookup: Callable[[str], QueueInfo],
) -> dict[str, Any]:
    """QueueAttributes fields for SQS attribute values (CreateQueue when `current` is None)."""
    if not isinstance(values, Mapping):
        raise InvalidAttribute("Attributes must be a map of attribute names to values")
    values = {str(k).strip(): v for k, v in values.items()}  # SQS ignores spaces around names
    base = current or QueueAttributes()
    changes: dict[str, Any] = {}
    settings = dict(base.settings)
    fifo = base.fifo if current is not None else name.endswith(".fifo")
    if "FifoQueue" in values:
        wanted = _bool("FifoQueue", values["FifoQueue"])
        if not fifo and (current is not None or not wanted):
            # SQS knows FifoQueue on FIFO queues only: a standard queue refuses it outright
            raise InvalidAttributeName("Unknown Attribute FifoQueue.")
        if current is not None and wanted != base.fifo:
            raise InvalidAttribute(
                "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not"
                " supported."
            )
        if wanted and not name.endswith(".fifo"):
            raise InvalidInput(FIFO_NAME)
        if not wanted and name.endswith(".fifo"):
            raise InvalidInput(STANDARD_NAME)
        changes["fifo"] = fifo = wanted
    elif current is None and fifo:
        raise InvalidInput(STANDARD_NAME)  # without FifoQueue=true the name is a standard one
    for key, value in values.items():
        if key in READ_ONLY or key not in ALL_NAMES:
            raise InvalidAttributeName(f"Unknown Attribute {key}.")
        if key in FIFO_ONLY and not fifo:
            if key == "ContentBasedDeduplication":
                raise InvalidAttributeName(f"Unknown Attribute {key}.")
            raise InvalidAttributeName(
                f"You can specify the {key} only when FifoQueue is set to true."
            )
        if key in INT_ATTRIBUTES:
            field, low, high = INT_ATTRIBUTES[key]
            changes[field] = float(_int(key, value, low, high))
            if field == "max_message_bytes":
                changes[field] = int(changes[field])
        elif key == "ContentBasedDeduplication":
            changes["content_based_dedup"] = _bool(key, value)
        elif key == "DeduplicationScope":
            if str(value) not in ("messageGroup", "queue"):
                raise InvalidAttribute("Invalid value for the parameter DeduplicationScope.")
            settings.pop(key, None)
            if current is not None and str(value) == "messageGroup" and not base.dedup_per_group:
                # as on SQS: a queue made with queue-wide de-duplication shows the new scope
                # and goes on de-duplicating queue-wide, for the ids it has and new ones
                settings[key] = "messageGroup"
            else:
                changes["dedup_per_group"] = str(value) == "messageGroup"
        elif key == "RedrivePolicy":
            policy = _redrive_policy(value, name, ns, lookup)
            settings.pop(key, None)
            if policy is not None and policy.queue == name:
                # SQS takes a queue as its own dead-letter queue: kept and shown, it moves
                # nothing (a message would only go back where it is)
                settings[key] = _policy_text(policy, ns)
                policy = None
            changes["dead_letter"] = policy
        elif key in SETTINGS:
            text = _setting(key, value)
            if text:
                settings[key] = text
            else:
                settings.pop(key, None)
    if settings.get("KmsMasterKeyId") and "SqsManagedSseEnabled" not in values:
        # a KMS key replaces SQS-managed encryption (which stays off once the key goes)
        settings["SqsManagedSseEnabled"] = "false"
    per_group = changes.get("dedup_per_group", base.dedup_per_group)
    per_group = per_group or settings.get("DeduplicationScope") == "messageGroup"
    if settings.get("FifoThroughputLimit") == "perMessageGroupId" and not per_group:
        raise InvalidAttribute(
            "The perMessageGroupId value is allowed only when the value for DeduplicationScope"
            " is messageGroup."
        )
    if settings != dict(base.settings):
        changes["settings"] = settings
    return changes


def _setting(key: str, value: Any) -> str:
    text = str(value)
    if key == "FifoThroughputLimit" and text not in ("perQueue", "perMessageGroupId"):
        raise InvalidAttribute("Invalid value for the parameter FifoThroughputLimit.")
    if key == "KmsDataKeyReusePeriodSeconds":
        return str(_int(key, text, 60, 86400))
    if key == "SqsManagedSseEnabled":
        return "true" if _bool(key, text) else "false"
    if key == "Policy" and text and not isinstance(_json(key, text), dict):
        raise InvalidAttribute("Invalid value for the parameter Policy.")
    if key == "RedriveAllowPolicy" and text:
        policy = _json(key, text)
        permission = policy.get("redrivePermission") if isinstance(policy, dict) else None
        if permission not in ("allowAll", "denyAll", "byQueue"):
            raise InvalidAttribute(
                "RedriveAllowPolicy needs redrivePermission allowAll, denyAll or byQueue"
            )
        sources = policy.get("sourceQueueArns")
        if permission == "byQueue" and not (isinstance(sources, list) and 1 <= len(sources) <= 10):
            raise InvalidAttribute("RedriveAllowPolicy byQueue needs 1 to 10 sourceQueueArns")
        if permission != "byQueue" and sources:
            raise InvalidAttribute("sourceQueueArns are only for redrivePermission byQueue")
    return text


def _redrive_policy(
    value: Any, name: str, ns: Namespaces, lookup: Callable[[str], QueueInfo]
) -> DeadLetterPolicy | None:
    if value in ("", None):
        return None
    policy = _json("RedrivePolicy", value)
    if not isinstance(policy, dict):
        raise InvalidAttribute(
            "Invalid value for the parameter RedrivePolicy. Reason: Redrive policy is not a valid"
            " JSON map."
        )
    if "deadLetterTargetArn" not in policy or "maxReceiveCount" not in policy:
        raise InvalidAttribute(
            f"Value {value} for parameter RedrivePolicy is invalid. Reason: Redrive policy"
            " must contain deadLetterTargetArn and maxReceiveCount."
        )
    target = ns.from_arn(policy["deadLetterTargetArn"], "deadLetterTargetArn")
    count = int_in(policy["maxReceiveCount"], 1, 1000)
    if count is None:
        raise InvalidAttribute(
            f"Value {value} for parameter RedrivePolicy is invalid. Reason: Invalid value for"
            f" maxReceiveCount: {policy['maxReceiveCount']}, valid values are from 1 to 1000"
            " both inclusive."
        )
    missing = InvalidAttribute(
        f"Value {value} for parameter RedrivePolicy is invalid. Reason: Dead letter target"
        " does not exist."
    )
    try:
        dlq = lookup(target)
    except QueueDoesNotExist:
        raise missing from None
    # another region's queue never; another account's where its Policy lets the source's
    # account send to it; and the answer to a queue it may not use is the one to a queue
    # that is not there, so that nothing says which names exist in another account
    source_region, source_account, _ = ns.split(name)
    target_region, target_account, _ = ns.split(target)
    if target_region != source_region:
        raise missing
    policy_text = dlq.attributes.settings.get("Policy")
    if target_account != source_account and not allows(
        policy_text, source_account, "SendMessage", ns.arn(target)
    ):
        raise missing
    allow = _json("RedriveAllowPolicy", dlq.attributes.settings.get("RedriveAllowPolicy"))
    if isinstance(allow, dict):
        permission = allow.get("redrivePermission")
        sources = allow.get("sourceQueueArns") or []
        if permission == "denyAll" or (permission == "byQueue" and ns.arn(name) not in sources):
            raise InvalidAttribute(
                f"Value {value} for parameter RedrivePolicy is invalid. Reason: the dead-letter"
                " queue's RedriveAllowPolicy does not allow this source queue."
            )
    return DeadLetterPolicy(queue=target, max_receive_count=count)


def _policy_text(policy: DeadLetterPolicy, ns: Namespaces) -> str:
    """A RedrivePolicy as SQS shows it: compact JSON, maxReceiveCount a number."""
    return json.dumps(
        {"deadLetterTargetArn": ns.arn(policy.queue), "maxReceiveCount": policy.max_receive_count},
        separators=(",", ":"),
    )


# QueueAttributes fields by the SQS attribute that sets them (settings: by their own names)
FIELD_NAMES = {field: name for name, (field, _, _) in INT_ATTRIBUTES.items()} | {
    "fifo": "FifoQueue",
    "content_based_dedup": "ContentBasedDeduplication",
    "dedup_per_group": "DeduplicationScope",
    "dead_letter": "RedrivePolicy",
}


def mismatch(current: QueueAttributes, changes: Mapping[str, Any]) -> str | None:
    """The SQS name of the first attribute a CreateQueue for an existing queue asks to
    differ from what it has (None when it asks for what it has)."""
    for key, value in changes.items():
        have = getattr(current, key)
        if have == value:
            continue
        if key == "settings":
            return next(str(k) for k in sorted({*value, *have}) if value.get(k) != have.get(k))
        return FIELD_NAMES.get(key, key)
    return None


def render(
    info: QueueInfo, stats: QueueStats | None, names: list[str], ns: Namespaces
) -> dict[str, str]:
    """The SQS attributes `names` asks for ("All" for every one)."""
    wanted = set(names)
    every = "All" in wanted
    unknown = wanted - ALL_NAMES - {"All"}
    if unknown:
        raise InvalidAttributeName(f"Unknown Attribute {sorted(unknown)[0]}.")
    a = info.attributes
    out: dict[str, str] = {}
    values: dict[str, Any] = {
        "VisibilityTimeout": int(a.visibility_timeout),
        "DelaySeconds": int(a.delay),
        "MaximumMessageSize": a.max_message_bytes,
        "MessageRetentionPeriod": int(a.retention),
        "ReceiveMessageWaitTimeSeconds": int(a.receive_wait),
        "CreatedTimestamp": int(info.created_at),
        "LastModifiedTimestamp": int(info.updated_at),
        "QueueArn": ns.arn(info.name),
        "SqsManagedSseEnabled": "true",
    }
    if stats is not None:
        values["ApproximateNumberOfMessages"] = stats.ready
        values["ApproximateNumberOfMessagesNotVisible"] = stats.in_flight
        values["ApproximateNumberOfMessagesDelayed"] = stats.delayed
    if a.dead_letter is not None:
        values["RedrivePolicy"] = _policy_text(a.dead_letter, ns)
    if a.fifo:
        values["FifoQueue"] = True
        values["ContentBasedDeduplication"] = a.content_based_dedup
        values["FifoThroughputLimit"] = "perQueue"
    values.update(a.settings)
    if "KmsMasterKeyId" not in a.settings:
        values.pop("KmsDataKeyReusePeriodSeconds", None)  # SQS shows it with a KMS key only
    if a.fifo:  # the scope set, where de-duplication stays queue-wide as it was made
        shown = a.settings.get("DeduplicationScope")
        values["DeduplicationScope"] = shown or ("messageGroup" if a.dedup_per_group else "queue")
    for key, value in values.items():
        if every or key in wanted:
            out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


def needs_stats(names: list[str]) -> bool:
    return "All" in names or any(n in COUNTS for n in names)


def tags(tags: Any) -> dict[str, str]:
    if not isinstance(tags, Mapping):
        raise InvalidInput("Tags must be a map of keys to values")
    out = {}
    for key, value in tags.items():
        if not isinstance(key, str) or not 1 <= len(key) <= 128:
            raise InvalidInput(f"Tag key {key!r} must be 1 to 128 characters")
        if not isinstance(value, str):
            raise InvalidInput(f"Tag value for {key!r} must be a string")
        if len(value) > 256:
            raise InvalidInput(f"Tag value for {key!r} must be at most 256 characters")
        bad = xml_unsafe(key) or xml_unsafe(value)
        if bad is not None:
            raise InvalidInput(
                f"Tag {key!r} holds the character U+{ord(bad):04X}, which a tag may not:"
                " use text that XML 1.0 allows"
            )
        out[key] = value
    return out


def policy(text: str | None, arn: str) -> dict[str, Any]:
    if text:
        try:
            policy = parse_json_text(text)
        except ValueError:
            policy = None
        if isinstance(policy, dict) and isinstance(policy.get("Statement"), list):
            return policy
    # the policy AddPermission makes: SQS writes it with the 2008 policy language version
    return {"Version": "2008-10-17", "Id": f"{arn}/SQSDefaultPolicy", "Statement": []}
