"""SNS subscription filter policies: checking a policy, and matching a message against it.

A policy is a JSON object. On message attributes (``FilterPolicyScope`` ``MessageAttributes``,
the default) each key names an attribute; on the payload (``MessageBody``) keys follow the
JSON body's objects down to the values. Every key must match (AND); within a key's list of
conditions one must (OR); ``{"$or": [...]}`` at any level matches when one branch does.

Conditions, as AWS documents them: a string (exact), a number (numeric equality), ``null``
and booleans (payload only), ``{"prefix": s}``, ``{"suffix": s}``,
``{"equals-ignore-case": s}``, ``{"anything-but": value | [values] | {"prefix": s}}``,
``{"numeric": [op, n, (op, n)]}`` with ``= < <= > >=``, ``{"exists": bool}`` and
``{"cidr": "10.0.0.0/24"}``. Attributes of type ``String.Array`` match when one element
does; ``Binary`` attributes are never matched. Numbers compare to 5 decimal places. On the
payload a dotted key (``"a.b"``) names the path ``a`` then ``b`` as well as the key itself.
Policies are refused in SNS's words.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from typing import Any

from ...exceptions import InvalidInput
from ...validation import parse_json_text

MAX_KEYS = 5
MAX_COMBINATIONS = 150
NUMERIC_OPS = {"=", "<", "<=", ">", ">="}
ABSENT = object()


class PolicyError(InvalidInput):
    """What is wrong with a filter policy, in SNS's words (the caller says where it was)."""

    code = "InvalidParameter"


class NestedPolicy(PolicyError):
    """A nested policy on message attributes, which SNS words on its own."""


def check_policy(text: str, scope: str) -> dict[str, Any]:
    """The parsed policy; PolicyError saying what is wrong with it."""
    try:
        policy = parse_json_text(text)
    except ValueError:
        raise PolicyError("failed to parse JSON.") from None  # SNS's words
    if not isinstance(policy, dict):
        raise PolicyError("the policy must be a JSON object")
    if not policy:
        return policy
    if scope != "MessageBody" and _nested(policy):
        raise NestedPolicy(
            "Filter policy scope MessageAttributes does not support nested filter policy"
        )
    keys, combinations = _check_node(policy, depth=0)
    if combinations > MAX_COMBINATIONS:
        raise PolicyError("Filter policy is too complex")
    if keys > MAX_KEYS:
        raise PolicyError(f"Filter policy can not have more than {MAX_KEYS} keys")
    return policy


def _nested(node: dict[str, Any]) -> bool:
    """Whether a policy has a key whose value is an object of well-formed conditions (a
    nested policy), rather than a list of them."""
    for key, value in node.items():
        if key == "$or":
            if isinstance(value, list) and any(isinstance(b, dict) and _nested(b) for b in value):
                return True
        elif isinstance(value, dict) and all(isinstance(v, dict | list) for v in value.values()):
            return True
    return False


def _check_node(node: dict[str, Any], depth: int) -> tuple[int, int]:
    """(keys, combinations) of a policy object, checked."""
    keys, combinations = 0, 1
    for key, value in node.items():
        if key == "$or":
            if not isinstance(value, list) or len(value) < 2:
                raise PolicyError("$or takes a list of at least two policies")
            branch_keys, total = 0, 0
            for branch in value:
                if not isinstance(branch, dict) or not branch:
                    raise PolicyError("each $or branch must be a non-empty object")
                k, c = _check_node(branch, depth)
                branch_keys, total = max(branch_keys, k), total + c
            keys, combinations = keys + branch_keys, combinations * total
        elif isinstance(value, dict):
            _, c = _check_node(value, depth + 1)
            keys, combinations = keys + 1, combinations * c  # a nested key counts as its parent
        elif isinstance(value, list):
            if not value:
                raise PolicyError("Empty arrays are not allowed")
            for condition in value:
                _check_condition(condition)
            # as SNS counts: a key's values times its depth (1 at the top)
            keys, combinations = keys + 1, combinations * len(value) * (depth + 1)
        else:
            raise PolicyError(f'"{key}" must be an object or an array')
    return keys, combinations


def _check_condition(condition: Any) -> None:
    if condition is None or isinstance(condition, str | int | float | bool):
        return  # null and booleans: accepted in both scopes; attributes never hold them
    if not isinstance(condition, dict):
        raise PolicyError("Match value must be String, number, true, false, or null")
    if len(condition) != 1:
        raise PolicyError("Only one key allowed in match expression")
    [(op, arg)] = condition.items()
    if op in ("prefix", "suffix", "equals-ignore-case"):
        if not isinstance(arg, str):
            raise PolicyError(f"{op} match pattern must be a string")
    elif op == "anything-but":
        if isinstance(arg, dict):
            [(inner, pattern)] = arg.items() if len(arg) == 1 else [(None, None)]
            if inner != "prefix":
                raise PolicyError(f"Unsupported anything-but pattern: {inner or list(arg)}")
            if not isinstance(pattern, str):
                raise PolicyError("prefix match pattern must be a string")
        else:
            values = arg if isinstance(arg, list) else [arg]
            if not values or not all(
                isinstance(v, str | int | float) and not isinstance(v, bool) for v in values
            ):
                raise PolicyError("anything-but takes strings or numbers")
    elif op == "numeric":
        _check_numeric(arg)
    elif op == "exists":
        if not isinstance(arg, bool):
            raise PolicyError("exists match pattern must be either true or false.")
    elif op == "cidr":
        _check_cidr(arg)
    else:
        raise PolicyError(f"Unrecognized match type {op}")


def _check_cidr(arg: Any) -> None:
    if not isinstance(arg, str):
        raise PolicyError("prefix match pattern must be a string")  # SNS's own words
    if arg.count("/") != 1:
        raise PolicyError("Malformed CIDR, one '/' required")
    address, bits = arg.split("/")
    if not bits.isdigit():
        raise PolicyError("Malformed CIDR, mask bits must be an integer")
    try:
        ipaddress.ip_address(address)
    except ValueError:
        raise PolicyError(f"Nonstandard IP address: {address}") from None
    try:
        ipaddress.ip_network(arg, strict=False)
    except ValueError:
        raise PolicyError(f"Malformed CIDR, mask bits must be an integer: {bits}") from None


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_numeric(arg: Any) -> None:
    """A numeric match: [op, n] or a range [> or >=, low, < or <=, high], checked as SNS
    checks it, term by term."""
    if not isinstance(arg, list) or not arg:
        raise PolicyError("Invalid member in numeric match: ]")
    if not isinstance(arg[0], str):
        raise PolicyError(f"Invalid member in numeric match: {json.dumps(arg[0])}")
    op = arg[0]
    if op not in NUMERIC_OPS:
        raise PolicyError(f"Unrecognized numeric range operator: {op}")
    if len(arg) < 2 or not _numeric(arg[1]):
        raise PolicyError(f"Value of {'equals' if op == '=' else op} must be numeric")
    if len(arg) == 2:
        return
    if op in ("=", "<", "<="):
        raise PolicyError("Too many elements in numeric expression")
    top = arg[2]
    if not isinstance(top, str):
        raise PolicyError(f"Bad value in numeric range: {json.dumps(top)}")
    if top not in ("<", "<="):
        raise PolicyError(f"Bad numeric range operator: {top}")
    if len(arg) < 4 or not _numeric(arg[3]):
        raise PolicyError(f"Value of {top} must be numeric")
    if len(arg) > 4:
        raise PolicyError("Too many terms in numeric range expression")
    if arg[1] >= arg[3]:
        raise PolicyError("Bottom must be less than top")


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
            items = parse_json_text(value)
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
        if "." in key:  # a dotted key names the path through objects, or the key itself
            found = _at_path(body, key)
            value = ABSENT if not found else [v for f in found for v in _listed(f)]
        else:
            value = body.get(key, ABSENT)
        if isinstance(condition, dict):
            if isinstance(value, list):
                if not any(matches_body(condition, v) for v in _listed(value)):
                    return False
            elif not matches_body(condition, value if value is not ABSENT else {}):
                return False
            continue
        values = value if value is ABSENT else _listed(value)
        if not _matches(condition, values):
            return False
    return True


def _listed(value: Any) -> list[Any]:
    """A payload's value as the list of values a condition looks at: arrays, and arrays
    within arrays, flattened (as SNS reads them)."""
    if not isinstance(value, list):
        return [value]
    if not any(isinstance(v, list) for v in value):
        return value
    return [w for v in value for w in _listed(v)]


def _at_path(body: dict[str, Any], key: str) -> list[Any]:
    """The values a dotted key names in a payload: under the key as written, and down every
    way of reading its dots as steps into objects (and arrays of objects)."""
    found = [body[key]] if key in body else []
    parts = key.split(".")
    for i in range(1, len(parts)):
        head, rest = ".".join(parts[:i]), ".".join(parts[i:])
        for sub in _listed(body.get(head)):
            if isinstance(sub, dict):
                found += _at_path(sub, rest)
    return found


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
