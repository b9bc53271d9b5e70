"""Cross-account access: the part of SQS policy evaluation that `AddPermission` produces.

A signed caller reaches the queues of its own account. A queue of another account answers
`AccessDenied` unless the queue's `Policy` has a statement that applies to the call:

- `Principal`: `*`, `{"AWS": "*"}`, or the caller's account as `ACCOUNT` or
  `arn:aws:iam::ACCOUNT:root` (one or a list);
- `Action`: `*`, `sqs:*`, or the action's name with the `sqs:` prefix, in any case, with `*`
  and `?` wildcards (`SQS:Send*`); a batch action is its single action's permission;
- `Resource`: absent, `*`, or a pattern matching the queue's ARN.

An `Allow` grants; a `Deny` that applies wins over every `Allow`. Not evaluated: `Condition`
(an `Allow` with conditions grants nothing; a `Deny` with conditions applies as if they held),
`NotPrincipal`, `NotAction`, `NotResource` (such statements are skipped), principals naming
users or roles (only whole accounts), and IAM policies of the caller's own account (a key in
the credentials file may do anything in its account). As on AWS, some actions are for the
queue's owner only, whatever the policy says.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from ..exceptions import AccessDenied
from ..validation import parse_json_text

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


def allows(policy_text: str | None, account: str, action: str, arn: str) -> bool:
    try:
        policy = parse_json_text(policy_text) if policy_text else None
    except ValueError:
        return False
    statements = policy.get("Statement") if isinstance(policy, dict) else None
    if isinstance(statements, dict):
        statements = [statements]
    if not isinstance(statements, list):
        return False
    wanted = f"sqs:{BATCH.get(action, action)}".lower()
    allowed = False
    for st in statements:
        if not isinstance(st, dict) or any(k in st for k in ("NotPrincipal", "NotAction",
                                                                "NotResource")):  # fmt: skip
            continue
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
