"""SNS's topic and subscription attributes: which there are, their defaults, how each is
checked and kept, and a topic's access policy."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...validation import parse_json_text
from ..sqs.names import ARN_RE, Namespaces
from .filter import NestedPolicy, PolicyError, check_policy
from .wire import invalid

# what a topic has for an attribute never set (a CreateTopic asking for these matches it)
TOPIC_DEFAULTS = {"SignatureVersion": "1", "TracingConfig": "PassThrough"}
TOPIC_ATTRIBUTES = {
    "DeliveryPolicy",
    "DisplayName",
    "FifoTopic",
    "Policy",
    "SignatureVersion",
    "TracingConfig",
    "KmsMasterKeyId",
    "ContentBasedDeduplication",
    "ArchivePolicy",
    "FifoThroughputScope",
    "DataProtectionPolicy",
}
SUBSCRIPTION_ATTRIBUTES = {
    "DeliveryPolicy",
    "FilterPolicy",
    "FilterPolicyScope",
    "RawMessageDelivery",
    "RedrivePolicy",
    "SubscriptionRoleArn",
    "ReplayPolicy",
}
# what a subscription has when an attribute was never set
SUB_DEFAULTS = {"RawMessageDelivery": "false", "FilterPolicyScope": "MessageAttributes"}


def stored(key: str, value: str) -> str:
    """An attribute as SNS keeps it: RawMessageDelivery in lower case."""
    return value.lower() if key == "RawMessageDelivery" else value


DELIVERY_POLICY = {
    "http": {
        "defaultHealthyRetryPolicy": {
            "minDelayTarget": 20,
            "maxDelayTarget": 20,
            "numRetries": 3,
            "numMaxDelayRetries": 0,
            "numNoDelayRetries": 0,
            "numMinDelayRetries": 0,
            "backoffFunction": "linear",
        },
        "disableSubscriptionOverrides": False,
        "defaultRequestPolicy": {"headerContentType": "text/plain; charset=UTF-8"},
    }
}


# what AddPermission may grant (SNS's action names)
PERMISSION_ACTIONS = (
    "GetTopicAttributes",
    "SetTopicAttributes",
    "AddPermission",
    "RemovePermission",
    "DeleteTopic",
    "Subscribe",
    "ListSubscriptionsByTopic",
    "Publish",
    "Receive",
)


def topic_policy(settings: Mapping[str, str], arn: str, account: str) -> dict[str, Any]:
    """The topic's policy as a document with a list of statements (its default if unset)."""
    try:
        policy = json.loads(settings.get("Policy") or default_policy(arn, account))
    except ValueError:
        policy = None
    if not isinstance(policy, dict) or not isinstance(policy.get("Statement"), list):
        policy = json.loads(default_policy(arn, account))
    statements = [st for st in policy["Statement"] if isinstance(st, dict)]
    return {**policy, "Statement": statements}


def default_policy(arn: str, account: str) -> str:
    actions = [f"SNS:{a}" for a in PERMISSION_ACTIONS if a != "Receive"]
    policy = {
        "Version": "2008-10-17",
        "Id": "__default_policy_ID",
        "Statement": [
            {
                "Sid": "__default_statement_ID",
                "Effect": "Allow",
                "Principal": {"AWS": "*"},
                "Action": actions,
                "Resource": arn,
                "Condition": {"StringEquals": {"AWS:SourceOwner": account}},
            }
        ],
    }
    return json.dumps(policy, separators=(",", ":"))


def check_topic_attribute(key: str, value: str, fifo: bool) -> None:
    if not isinstance(value, str):
        raise invalid(f"AttributeValue of {key} must be a string")
    if key == "ContentBasedDeduplication":
        if value.lower() not in ("true", "false"):
            raise invalid("ContentBasedDeduplication: true or false")
        if not fifo and value.lower() == "true":
            raise invalid("ContentBasedDeduplication Reason: only FIFO topics de-duplicate")
    elif key == "FifoTopic" and value.lower() not in ("true", "false"):
        raise invalid("FifoTopic: true or false")
    elif key in ("Policy", "DeliveryPolicy", "DataProtectionPolicy", "ArchivePolicy") and value:
        try:
            parse_json_text(value)
        except ValueError:
            raise invalid(f"{key}: not valid JSON") from None
    elif key == "DisplayName" and len(value) > 100:
        raise invalid("DisplayName: at most 100 characters")
    elif key == "SignatureVersion" and value not in ("1", "2"):
        raise invalid("SignatureVersion: 1 or 2")
    elif key == "TracingConfig" and value not in ("PassThrough", "Active"):
        raise invalid("TracingConfig: PassThrough or Active")


def check_subscription_attribute(
    key: Any,
    value: str,
    all_attributes: Mapping[str, str],
    ns: Namespaces,
    where: str = "",
) -> None:
    """One subscription attribute checked (`where`: what SNS says the error is in before the
    attribute's name: "Attributes Reason: " in Subscribe)."""
    if not isinstance(key, str) or key not in SUBSCRIPTION_ATTRIBUTES:
        raise invalid("AttributeName")  # SNS's word for an attribute it does not know
    if key == "RawMessageDelivery" and value.lower() not in ("true", "false"):
        raise invalid(f"{where}RawMessageDelivery: Invalid value [{value}]. Must be true or false.")
    if key == "FilterPolicyScope" and value not in ("MessageAttributes", "MessageBody"):
        raise invalid(
            f"FilterPolicyScope: Invalid value [{value}]. Please use either MessageBody or"
            " MessageAttributes"
        )
    if key in ("FilterPolicy", "FilterPolicyScope"):
        policy = all_attributes.get("FilterPolicy")
        if policy:
            scope = all_attributes.get("FilterPolicyScope", "MessageAttributes")
            try:
                check_policy(policy, scope)
            except NestedPolicy as exc:
                raise invalid(exc.message) from None
            except PolicyError as exc:  # SNS names where: Subscribe's Attributes, or the one
                raise invalid(f"{where}FilterPolicy: {exc.message}") from None
    if key == "RedrivePolicy" and value:
        redrive_target(value, ns, where)
    if key == "DeliveryPolicy" and value:
        try:
            parse_json_text(value)
        except ValueError:
            raise invalid("DeliveryPolicy: not valid JSON") from None


def redrive_target(value: str, ns: Namespaces, where: str = "") -> str:
    """The stored name of the dead-letter queue a subscription's RedrivePolicy names."""
    try:
        policy = parse_json_text(value)
    except ValueError:
        raise invalid(f"{where}RedrivePolicy: failed to parse JSON.") from None
    target = policy.get("deadLetterTargetArn") if isinstance(policy, dict) else None
    if not isinstance(target, str) or not ARN_RE.fullmatch(target):
        raise invalid(f"{where}RedrivePolicy: deadLetterTargetArn is an invalid arn")
    return ns.from_arn(target, "deadLetterTargetArn")


def check_fifo_redrive(value: str, ns: Namespaces, where: str = "") -> None:
    """A FIFO queue's subscription to a FIFO topic needs a FIFO dead-letter queue."""
    if not redrive_target(value, ns, where).endswith(".fifo"):
        raise invalid(
            f"{where}RedrivePolicy: must use a FIFO queue as DLQ for a FIFO Subscription to a"
            " FIFO Topic."
        )
