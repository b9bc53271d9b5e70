"""SNS's Query wire format: the errors it answers with, list and map parameters as the Query
protocol numbers them, and the XML of answers and errors (as `sqs.wire` is for SQS)."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from ...exceptions import ConveyorError, InvalidInput, SnsError
from ..front.query_xml import Entries as Entries
from ..front.query_xml import QueryXml
from ..sqs.wire import in_order

XMLNS = "http://sns.amazonaws.com/doc/2010-03-31/"
STS_XMLNS = "https://sts.amazonaws.com/doc/2011-06-15/"
PAGE = 100  # the members of one page of a List action

Params = dict[str, Any]  # a request's parameters, as the Query protocol nests them
Result = dict[str, Any]  # an action's answer, rendered by `sns_response`


def invalid(message: str) -> SnsError:
    return SnsError("InvalidParameter", f"Invalid parameter: {message}")


def not_found(message: str) -> SnsError:
    return SnsError("NotFound", message, 404)


def numbered(node: Any) -> list[Any]:
    """The members of a Query list (``X.member.N`` or ``X.N``), in order."""
    if node is None or node == "":  # an empty list is sent as ``X=``
        return []
    if isinstance(node, dict) and set(node) == {"member"}:
        node = node["member"]
    if not isinstance(node, dict):
        raise invalid("a list parameter must be numbered from 1 (X.member.1, X.member.2, ...)")
    members = in_order(node)
    if members is None:
        raise invalid(
            "a list parameter must be numbered from 1 (X.member.1, ...), without leading zeros"
        )
    return members


def query_map(node: Any, key: str, value: str) -> dict[str, str]:
    """A Query map (``X.entry.N.key`` / ``.value``) as a dict."""
    if node is None:
        return {}
    if isinstance(node, dict) and "entry" in node:
        node = node["entry"]
    out: dict[str, str] = {}
    for item in numbered(node):
        if not isinstance(item, dict) or not isinstance(item.get(key), str):
            raise invalid(f"a map entry needs a {key} and a {value}")
        v = item.get(value, "")
        out[item[key]] = v if isinstance(v, str) else ""
    return out


# actions SNS answers without a result element (botocore's model gives them no output)
NO_RESULT = frozenset(
    {
        "AddPermission",
        "DeleteTopic",
        "PutDataProtectionPolicy",
        "RemovePermission",
        "SetSubscriptionAttributes",
        "SetTopicAttributes",
        "Unsubscribe",
    }
)


WRITER = QueryXml(XMLNS, wrapped=True, escape=True)


def sns_response(action: str, result: Mapping[str, Any], request_id: str) -> bytes:
    xmlns = STS_XMLNS if action == "GetCallerIdentity" else XMLNS
    with_result = action not in NO_RESULT or bool(result)
    return WRITER.answer(action, result, request_id, xmlns=xmlns, with_result=with_result)


def sns_error_body(error: ConveyorError, request_id: str) -> bytes:
    return WRITER.error(error.sender_fault, error.code, error.message, request_id)


def sns_error(exc: ConveyorError) -> ConveyorError:
    """An error of the server's other layers (auth, request parsing) in SNS's terms."""
    if isinstance(exc, SnsError):
        return exc
    if exc.status == 403:  # SNS says AuthorizationError where SQS says AccessDenied
        code = "AuthorizationError" if exc.code == "AccessDenied" else exc.code
        return SnsError(code, exc.message, 403)
    if isinstance(exc, InvalidInput):
        return invalid(exc.message)
    if exc.status >= 500:
        return SnsError("InternalError", exc.message, exc.status)
    return SnsError(exc.code, exc.message, exc.status)


def paged(key: str, items: list[Any], token: Any) -> Result:
    """`PAGE` of `items` under `key`, from where `token` says, with the next token if more
    (opaque, base64 as SNS's are)."""
    start = 0
    if token is not None:
        try:
            start = int(base64.b64decode(str(token), validate=True).decode())
        except (ValueError, UnicodeDecodeError):
            raise invalid("NextToken: not a token this server gave") from None
        if start < 0:
            raise invalid("NextToken: not a token this server gave")
    result: Result = {key: items[start : start + PAGE]}
    if start + PAGE < len(items):
        result["NextToken"] = base64.b64encode(str(start + PAGE).encode()).decode()
    return result
