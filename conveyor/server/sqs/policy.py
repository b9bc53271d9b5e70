"""Cross-account access: the part of SQS policy evaluation that `AddPermission` produces
(SQS's and SNS's, whose topic policies are read the same way with `sns:` actions).

A signed caller reaches the queues of its own account. A queue of another account answers
`AccessDenied` unless the queue's `Policy` has a statement that applies to the call:

- `Principal`: `*`, `{"AWS": "*"}`, or the caller's account as `ACCOUNT` or
  `arn:aws:iam::ACCOUNT:root` (one or a list);
- `Action`: `*`, `sqs:*`, or the action's name with the `sqs:` prefix, in any case, with `*`
  and `?` wildcards (`SQS:Send*`); a batch action is its single action's permission;
- `Resource`: absent, `*`, or a pattern matching the queue's ARN.

An `Allow` grants; a `Deny` that applies wins over every `Allow`. Not evaluated: `Condition`
(an `Allow` with conditions grants nothing; a `Deny` with conditions applies as if they held;
but see `allows_topic`),
`NotPrincipal`, `NotAction`, `NotResource` (such statements are skipped), principals naming
users or roles (only whole accounts), and IAM policies of the caller's own account (a key in
the credentials file may do anything in its account). As on AWS, some actions are for the
queue's owner only, whatever the policy says.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from ...exceptions import AccessDenied
from ...validation import parse_json_text

OWNER_ONLY = frozenset(
    {
        "AddPermission",
        "RemovePermission",
        "SetQueueAttributes",
        "DeleteQueue",
        "CreateQueue",
        "ListQueues",
        "ListQueueTags",
        "TagQueue",
        "UntagQueue",
        "StartMessageMoveTask",
        "CancelMessageMoveTask",
        "ListMessageMoveTasks",
    }
)
BATCH = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
    "PublishBatch": "Publish",
}
ROOT_RE = re.compile(r"arn:aws:iam::(\d{12}):root")


def check_access(policy_text: str | None, *, account: str, action: str, arn: str) -> None:
    """AccessDenied unless `account` may call `action` on the queue `arn` of another
    account, by the queue's policy."""
    if action in OWNER_ONLY or not allows(policy_text, account, action, arn):
        raise AccessDenied(
            f"Access to the resource {arn} is denied: account {account} may not call"
            f" {action} on another account's queue (its Policy does not allow it)"
        )


def statements(policy_text: str | None) -> list[dict[str, Any]]:
    """The statements of a policy that are evaluated: those without `NotPrincipal`,
    `NotAction` or `NotResource`; none of a policy that does not parse."""
    try:
        policy = parse_json_text(policy_text) if policy_text else None
    except ValueError:
        return []
    found = policy.get("Statement") if isinstance(policy, dict) else None
    if isinstance(found, dict):
        found = [found]
    if not isinstance(found, list):
        return []
    skipped = ("NotPrincipal", "NotAction", "NotResource")
    return [st for st in found if isinstance(st, dict) and not any(k in st for k in skipped)]


def allows(
    policy_text: str | None, account: str, action: str, arn: str, service: str = "sqs"
) -> bool:
    """Whether the policy lets `account` call `action` of `service` (`sqs`, `sns`) on the
    resource `arn` (a queue's, a topic's)."""
    wanted = f"{service}:{BATCH.get(action, action)}".lower()
    allowed = False
    for st in statements(policy_text):
        if not (
            _principal(st.get("Principal"), account)
            and _action(st.get("Action"), wanted)
            and _resource(st.get("Resource"), arn)
        ):
            continue
        if st.get("Effect") == "Deny":
            return False
        if st.get("Effect") == "Allow" and "Condition" not in st:
            allowed = True
    return allowed


SOURCE_CONDITIONS = frozenset({"arnequals", "arnlike", "stringequals", "stringlike"})
SOURCE_KEYS = frozenset({"aws:sourcearn", "aws:sourceaccount"})


def allows_topic(policy_text: str | None, topic_arn: str, arn: str) -> bool:
    """Whether the queue `arn`'s policy lets the SNS topic `topic_arn` (of another account)
    send to it, as SNS's documented queue policy does: `Principal` the SNS service
    (`{"Service": "sns.amazonaws.com"}`), anyone, or the topic's account; `Action`
    `sqs:SendMessage`; and a `Condition`, if any, only on `aws:SourceArn` or
    `aws:SourceAccount` (`ArnEquals`, `ArnLike`, `StringEquals`, `StringLike`), which must
    hold. A `Deny` that applies wins."""
    account = topic_arn.split(":")[4]
    facts = {"aws:sourcearn": topic_arn, "aws:sourceaccount": account}
    allowed = False
    for st in statements(policy_text):
        principal = st.get("Principal")
        service = isinstance(principal, dict) and "sns.amazonaws.com" in _items(
            principal.get("Service")
        )
        if not (
            (service or _principal(principal, account))
            and _action(st.get("Action"), "sqs:sendmessage")
            and _resource(st.get("Resource"), arn)
        ):
            continue
        holds = _source_condition(st.get("Condition"), facts)
        if st.get("Effect") == "Deny" and holds is not False:
            return False
        if st.get("Effect") == "Allow" and holds:
            allowed = True
    return allowed


def _source_condition(condition: Any, facts: dict[str, str]) -> bool | None:
    """Whether a statement's conditions on the source hold (True without any); None when it
    has conditions that are not evaluated."""
    if condition is None:
        return True
    if not isinstance(condition, dict):
        return None
    for operator, tests in condition.items():
        if not isinstance(operator, str) or operator.lower() not in SOURCE_CONDITIONS:
            return None
        if not isinstance(tests, dict):
            return None
        for key, wanted in tests.items():
            if not isinstance(key, str) or key.lower() not in SOURCE_KEYS:
                return None
            value = facts[key.lower()]
            like = operator.lower().endswith("like")
            if not any(
                isinstance(w, str) and (fnmatch.fnmatchcase(value, w) if like else value == w)
                for w in _items(wanted)
            ):
                return False
    return True


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _principal(value: Any, account: str) -> bool:
    if value == "*":
        return True
    if not isinstance(value, dict) or "AWS" not in value:
        return False
    for p in _items(value["AWS"]):
        if not isinstance(p, str):
            continue
        if p in ("*", account):
            return True
        match = ROOT_RE.fullmatch(p)
        if match is not None and match.group(1) == account:
            return True
    return False


def _action(value: Any, wanted: str) -> bool:
    for a in _items(value):
        if isinstance(a, str) and (a == "*" or fnmatch.fnmatchcase(wanted, a.lower())):
            return True
    return False


def _resource(value: Any, arn: str) -> bool:
    if value is None:
        return True
    return any(isinstance(r, str) and fnmatch.fnmatchcase(arn, r) for r in _items(value))
