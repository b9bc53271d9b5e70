"""SNS subscription filter policies: checking a policy, and matching a message against it.

A policy is a JSON object. On message attributes (``FilterPolicyScope`` ``MessageAttributes``,
the default) each key names an attribute; on the payload (``MessageBody``) keys follow the
JSON body's objects down to the values. Every key must match (AND); within a key's list of
conditions one must (OR); ``{"$or": [...]}`` at any level matches when one branch does.

Conditions, as AWS documents them: a string (exact), a number (numeric equality), ``null``
and booleans (payload only), ``{"prefix": s}``, ``{"suffix": s}``,
``{"equals-ignore-case": s}``, ``{"anything-but": value | [values] | {"prefix": s} |
{"suffix": s}}``, ``{"numeric": [op, n, (op, n)]}`` with ``= < <= > >=``,
``{"exists": bool}`` and ``{"cidr": "10.0.0.0/24"}``. Attributes of type ``String.Array``
match when one element does; ``Binary`` attributes are never matched. Numbers compare to 5
decimal places.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from typing import Any

from ..exceptions import InvalidInput

MAX_KEYS = 5
MAX_COMBINATIONS = 150
NUMERIC_OPS = {"=", "<", "<=", ">", ">="}
ABSENT = object()


class PolicyError(InvalidInput):
    code = "InvalidParameter"


def check_policy(text: str, scope: str) -> dict[str, Any]:
    """The parsed policy; PolicyError saying what is wrong with it."""
    try:
        policy = json.loads(text)
    except ValueError:
        raise _bad("the policy is not JSON") from None
    if not isinstance(policy, dict):
        raise _bad("the policy must be a JSON object")
    if not policy:
        return policy
    keys, combinations = _check_node(policy, scope, depth=0)
    if keys > MAX_KEYS:
        raise _bad(f"Filter policy can not have more than {MAX_KEYS} keys")
    if combinations > MAX_COMBINATIONS:
        raise _bad("Filter policy is too complex")
    return policy


def _bad(reason: str) -> PolicyError:
    return PolicyError(f"Invalid parameter: FilterPolicy: {reason}")


def _check_node(node: dict[str, Any], scope: str, depth: int) -> tuple[int, int]:
    """(keys, combinations) of a policy object, checked."""
    keys, combinations = 0, 1
    for key, value in node.items():
        if key == "$or":
            if not isinstance(value, list) or len(value) < 2:
                raise _bad("$or takes a list of at least two policies")
            branch_keys, total = 0, 0
            for branch in value:
                if not isinstance(branch, dict) or not branch:
                    raise _bad("each $or branch must be a non-empty object")
                k, c = _check_node(branch, scope, depth)
                branch_keys, total = max(branch_keys, k), total + c
            keys, combinations = keys + branch_keys, combinations * total
        elif isinstance(value, dict):
            if scope != "MessageBody":
                raise _bad(f"{key!r}: nested keys need FilterPolicyScope MessageBody")
            k, c = _check_node(value, scope, depth + 1)
            keys, combinations = keys + k, combinations * c
        elif isinstance(value, list):
            if not value:
                raise _bad(f"{key!r}: the list of conditions is empty")
            for condition in value:
                _check_condition(key, condition, scope)
            keys, combinations = keys + 1, combinations * len(value)
        else:
            raise _bad(f"{key!r}: conditions must be in a list, like [{json.dumps(value)}]")
    return keys, combinations


def _check_condition(key: str, condition: Any, scope: str) -> None:
    if isinstance(condition, str | int | float) and not isinstance(condition, bool):
        return
    if condition is None or isinstance(condition, bool):
        return  # accepted in both scopes; message attributes never hold them
    if not isinstance(condition, dict) or len(condition) != 1:
        raise _bad(f"{key!r}: a condition is a value or an object with one operator")
    [(op, arg)] = condition.items()
    if op in ("prefix", "suffix", "equals-ignore-case"):
        if not isinstance(arg, str):
            raise _bad(f"{key!r}: {op} takes a string")
    elif op == "anything-but":
        if isinstance(arg, dict):
            if len(arg) != 1 or next(iter(arg)) not in ("prefix", "suffix"):
                raise _bad(f"{key!r}: anything-but takes a value, a list, prefix or suffix")
            if not isinstance(next(iter(arg.values())), str):
                raise _bad(f"{key!r}: anything-but's prefix or suffix takes a string")
        else:
            values = arg if isinstance(arg, list) else [arg]
            if not values or not all(
                isinstance(v, str | int | float) and not isinstance(v, bool) for v in values
            ):
                raise _bad(f"{key!r}: anything-but takes strings or numbers")
    elif op == "numeric":
        _check_numeric(key, arg)
    elif op == "exists":
        if not isinstance(arg, bool):
            raise _bad(f"{key!r}: exists takes true or false")
    elif op == "cidr":
        try:
            ipaddress.ip_network(arg, strict=False)
        except (TypeError, ValueError):
            raise _bad(f"{key!r}: cidr takes a network like 10.0.0.0/24") from None
    else:
        raise _bad(f"{key!r}: unrecognized match type {op}")


def _check_numeric(key: str, arg: Any) -> None:
    if not isinstance(arg, list) or len(arg) not in (2, 4):
        raise _bad(f"{key!r}: numeric takes [op, number] or [op, number, op, number]")
    for i in range(0, len(arg), 2):
        op, value = arg[i], arg[i + 1]
        if op not in NUMERIC_OPS:
            raise _bad(f"{key!r}: unrecognized numeric operator {op!r}")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _bad(f"{key!r}: numeric takes numbers")
    if len(arg) == 4:
        (low_op, low), (high_op, high) = arg[:2], arg[2:]
        if low_op not in (">", ">=") or high_op not in ("<", "<=") or low >= high:
            raise _bad(f"{key!r}: a numeric range is [> or >=, low, < or <=, high]")


# -- matching -----------------------------------------------------------------------------


def matches_attributes(policy: Mapping[str, Any], attributes: Mapping[str, Any]) -> bool:
    """Whether message attributes (name: {"DataType", "StringValue"|"BinaryValue"}) pass."""
    for key, conditions in policy.items():
        if key == "$or":
            if not any(matches_attributes(branch, attributes) for branch in conditions):
                return False
            continue
        values = _attribute_values(attributes.get(key))
        if not _matches(conditions, values):
            return False
    return True


def _attribute_values(attribute: Any) -> Any:
    """The values a condition is tried against: ABSENT, or a list of str/float."""
    if not isinstance(attribute, Mapping):
        return ABSENT
    kind = str(attribute.get("DataType", ""))
    value = attribute.get("StringValue")
    if kind.startswith("Binary") or value is None:
        return [] if kind.startswith("Binary") else ABSENT  # present, never matched
    if kind.startswith("Number"):
        try:
            return [float(value)]
        except ValueError:
            return [value]
    if kind.startswith("String.Array"):
        try:
            items = json.loads(value)
        except ValueError:
            return [value]
        return [
            float(v) if isinstance(v, int | float) and not isinstance(v, bool) else v
            for v in (items if isinstance(items, list) else [items])
        ]
    return [value]


def matches_body(policy: Mapping[str, Any], body: Any) -> bool:
    """Whether a parsed JSON payload passes (a payload that is no JSON object never does)."""
    if not isinstance(body, dict):
        return False
    for key, condition in policy.items():
        if key == "$or":
            if not any(matches_body(branch, body) for branch in condition):
                return False
            continue
        value = body.get(key, ABSENT)
        if isinstance(condition, dict):
            if isinstance(value, list):
                if not any(matches_body(condition, v) for v in value):
                    return False
            elif not matches_body(condition, value if value is not ABSENT else {}):
                return False
            continue
        values = value if value is ABSENT else (value if isinstance(value, list) else [value])
        if not _matches(condition, values):
            return False
    return True


def _matches(conditions: list[Any], values: Any) -> bool:
    return any(_one(condition, values) for condition in conditions)


def _one(condition: Any, values: Any) -> bool:
    if isinstance(condition, dict):
        [(op, arg)] = condition.items()
        if op == "exists":
            return (values is not ABSENT) is bool(arg)
        if values is ABSENT:
            return False
        if op == "anything-but":
            return bool(values) and not any(_anything_but_hits(arg, v) for v in values)
        return any(_operator(op, arg, v) for v in values)
    if values is ABSENT:
        return False
    return any(_equal(condition, v) for v in values)


def _equal(condition: Any, value: Any) -> bool:
    if condition is None or isinstance(condition, bool):
        return value is condition or (isinstance(value, bool) and value == condition)
    if isinstance(condition, str):
        return isinstance(value, str) and value == condition
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return _number(value) == _number(condition)


def _anything_but_hits(arg: Any, value: Any) -> bool:
    if isinstance(arg, dict):
        [(op, text)] = arg.items()
        return _operator(op, text, value)
    return any(_equal(v, value) for v in (arg if isinstance(arg, list) else [arg]))


def _operator(op: str, arg: Any, value: Any) -> bool:
    if op == "prefix":
        return isinstance(value, str) and value.startswith(arg)
    if op == "suffix":
        return isinstance(value, str) and value.endswith(arg)
    if op == "equals-ignore-case":
        return isinstance(value, str) and value.casefold() == arg.casefold()
    if op == "numeric":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        return all(
            _compare(arg[i], _number(value), _number(arg[i + 1])) for i in range(0, len(arg), 2)
        )
    if op == "cidr":
        try:
            return ipaddress.ip_address(value) in ipaddress.ip_network(arg, strict=False)
        except (TypeError, ValueError):
            return False
    return False


def _number(value: float) -> float:
    """Numbers compare to 5 decimal places, as SNS documents."""
    return round(float(value), 5)


def _compare(op: str, value: float, bound: float) -> bool:
    return {
        "=": value == bound,
        "<": value < bound,
        "<=": value <= bound,
        ">": value > bound,
        ">=": value >= bound,
    }[op]
