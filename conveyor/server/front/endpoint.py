"""The SQS and SNS wire endpoint on `/` and on queue URLs.

Every SQS request passes here, so nothing of a framework sits on this path: `answer` takes
a request that has arrived whole, tells the protocol (AWS JSON 1.0 by its X-Amz-Target
header, else Query) and SNS from SQS, calls the action and gives the answer as bytes
(orjson for JSON). The server's HTTP protocol calls it directly for most requests
(`protocol.py`); `Endpoint.__call__` serves the rest as an ASGI handler, reading the body
once and refusing it as soon as it passes the limit.
"""

from __future__ import annotations

import ipaddress
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ... import __version__, tracing
from ...exceptions import (
    AccessDenied,
    ConveyorError,
    MissingParameter,
    RequestTooLarge,
    UnknownAction,
    UnknownOperation,
)
from ..sns.api import ACTIONS as SNS_ACTIONS
from ..sns.arns import TOPIC_ARN_RE
from ..sns.wire import sns_error, sns_error_body, sns_response
from ..sqs.names import Caller
from ..sqs.params import TRACE_PARAM
from ..sqs.wire import (
    JSON_CONTENT_TYPE,
    dump_json,
    json_error,
    parse_json,
    query_error,
    query_params,
    query_response,
    query_tree,
)
from .auth import signed_service
from .conns import Gone, client_gone

if TYPE_CHECKING:
    from ..app import ConveyorServer

log = logging.getLogger("conveyor.server")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Header = tuple[bytes, bytes]
Reply = tuple[int, bytes, bytes, list[Header]]  # status, content type, body, more headers

# actions SQS refuses at a queue's URL (they act on no queue)
QUEUELESS_ACTIONS = frozenset({"CreateQueue", "ListQueues"})
XML = b"text/xml"
JSON_TYPE = JSON_CONTENT_TYPE.encode()


def request_uuid() -> str:
    """A random (version 4) UUID for a request's id, without `uuid.UUID`'s object."""
    r = random.getrandbits(122)
    return "%08x-%04x-4%03x-%04x-%012x" % (  # noqa: UP031 - the fastest of the formats
        r >> 90,
        (r >> 74) & 0xFFFF,
        (r >> 62) & 0xFFF,
        0x8000 | ((r >> 48) & 0x3FFF),
        r & 0xFFFFFFFFFFFF,
    )


class ClientGone(Exception):
    """The client closed the connection before its request had arrived."""


@dataclass(slots=True)
class Incoming:
    """What the endpoint needs of a request (the server's protocol sets `body` once it has
    arrived)."""

    method: str
    path: str
    raw_path: str
    query: str
    headers: dict[str, str]  # lower-case names; the first of repeated headers
    base_url: str  # scheme://host:port as the client addressed the server
    body: bytes
    account: str | None  # a queue URL's path
    queue: str | None
    # whether the client has closed its connection meanwhile (the server's protocol tells)
    gone: Callable[[], bool] = field(default_factory=Gone)


SNS_SCOPES = ("sns", "sts")  # STS: GetCallerIdentity, which the SNS endpoint answers


def from_another_site(headers: Mapping[str, str]) -> AccessDenied | None:
    """The refusal of a request a browser sends for a page of another site (its Origin is
    not the host it is sent to, or it says so in Sec-Fetch-Site), or None.

    Such requests are how a page elsewhere would act on a server that takes unsigned
    requests (a form posted to it, an image's URL naming a query action): programs send no
    Origin, and the dashboard's requests come from its own origin."""
    site = headers.get("sec-fetch-site")
    origin = headers.get("origin")
    if site in ("cross-site", "same-site"):
        why = f"Sec-Fetch-Site: {site}"
    elif origin is not None and (
        origin == "null" or urlsplit(origin).netloc.lower() != headers.get("host", "").lower()
    ):
        why = f"Origin: {origin}"
    else:
        return None
    return AccessDenied(
        f"a request a browser sends for another site's page is refused ({why}): pages"
        " elsewhere may not act on this server's queues; call it from a program, or from the"
        " dashboard it serves at /ui"
    )


def by_another_name(
    headers: Mapping[str, str], allowed: Iterable[str], credentials: str
) -> AccessDenied | None:
    """The refusal of a browser's request (it carries Origin or Sec-Fetch-Site) that names
    this server by a host name that is not one of its own: localhost, an IP address, or
    one of `allowed` (--allowed-host). A page at a name made to resolve to this machine
    (DNS rebinding) is the same origin as the server to the browser, and could otherwise
    read and change queues on a server that takes no credentials (`credentials`: the flag
    that would make it ask for them)."""
    if "sec-fetch-site" not in headers and "origin" not in headers:
        return None  # a program's request (or a proxy's on its behalf)
    host = headers.get("host", "").strip().lower()
    if host.startswith("["):
        name = host[1 : host.find("]")] if "]" in host else host
    else:
        left, _, port = host.rpartition(":")
        name = left if left and port.isdigit() else host
    if not name or name == "localhost" or name.endswith(".localhost"):
        return None
    if name in allowed:
        return None
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return AccessDenied(
            f"a browser addressed this server as {host!r}, a name it does not know as its own:"
            " a page at a name made to resolve to this machine could otherwise use its"
            " queues. Open it as localhost or by IP address, start it with --allowed-host"
            f" {name}, or give it {credentials}"
        )
    return None


def sqs_path(scope: Scope) -> dict[str, str] | None:
    """Path parameters if the request is for the SQS endpoint (`/` or a queue URL)."""
    if scope.get("method") not in ("POST", "GET"):
        return None
    return sqs_path_of(scope.get("path", "/"))


def sqs_path_of(path: str) -> dict[str, str] | None:
    """Path parameters if `path` is the SQS endpoint's (`/` or a queue URL)."""
    if path == "/":
        return {}
    if path[-1] == "/":  # a queue URL ending in a slash, as AWS's samples write some
        path = path[:-1]
    parts = path.split("/")
    if len(parts) == 5 and parts[1] == "queue" and parts[2]:  # /queue/REGION/ACCOUNT/NAME
        parts = parts[2:]
    if len(parts) == 3 and len(parts[1]) == 12 and parts[1].isdigit() and parts[2]:
        return {"account": parts[1], "queue": parts[2]}
    return None


def header_map(pairs: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """A request's headers by lower-case name (the first of repeated ones)."""
    headers: dict[str, str] = {}
    for key, value in pairs:
        name = key.decode("latin-1").lower()
        if name not in headers:
            headers[name] = value.decode("latin-1")
    return headers


def base_url(scheme: str, headers: dict[str, str], server: tuple[str, int | None] | None) -> str:
    """scheme://host:port as the client addressed the server (its Host header, else the
    address it reached)."""
    host = headers.get("host")
    if not host:
        local = server or ("127.0.0.1", 80)
        host = f"{local[0]}:{local[1]}"
    return f"{scheme}://{host}"


def too_large(limit: int) -> RequestTooLarge:
    return RequestTooLarge(
        f"the request body is over this server's limit of {limit} bytes (--max-body)"
    )


def declared_too_large(length: str | None, limit: int) -> bool:
    """Whether a Content-Length header announces a body over `limit` bytes."""
    return length is not None and length.isascii() and length.isdigit() and int(length) > limit


async def read_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    seen = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        if chunk:
            seen += len(chunk)
            if seen > limit:
                raise too_large(limit)
            chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class Endpoint:
    """`/` and queue URLs: SQS's two protocols, and SNS's Query protocol on `/`."""

    def __init__(self, server: ConveyorServer) -> None:
        self.server = server
        self.sqs = server.sqs
        self.sns = server.sns
        self.metrics = server.metrics

    async def __call__(
        self, scope: Scope, receive: Receive, send: Send, path: dict[str, str]
    ) -> None:
        """The endpoint as an ASGI application."""
        started = time.perf_counter()
        headers = header_map(scope["headers"])
        limit = self.server.config.max_body
        refusal: RequestTooLarge | None = None
        body = b""
        try:
            if declared_too_large(headers.get("content-length"), limit):
                raise too_large(limit)
            body = await read_body(receive, limit)
        except RequestTooLarge as exc:
            refusal = exc
        except ClientGone:
            self.gone(started)
            await _send(send, 499, b"text/plain", b"", [])
            return
        request = Incoming(
            method=scope["method"],
            path=scope["path"],
            raw_path=scope.get("raw_path", b"/").decode("latin-1") or "/",
            query=scope.get("query_string", b"").decode("latin-1"),
            headers=headers,
            base_url=base_url(scope.get("scheme", "http"), headers, scope.get("server")),
            body=body,
            account=path.get("account"),
            queue=path.get("queue"),
            gone=client_gone(scope),
        )
        await _send(send, *await self.answer(request, started, refusal))

    def gone(self, started: float) -> None:
        """The client closed the connection before its request had arrived."""
        log.debug("SQS request: the client went away mid-request")
        # nginx's code for it: neither the server's fault nor an answer
        self.metrics.observe("sqs", "unknown", 499, time.perf_counter() - started)

    async def answer(
        self, request: Incoming, started: float, refusal: ConveyorError | None = None
    ) -> Reply:
        """The reply to a request that has arrived whole (or to one refused while it
        arrived: `refusal`), timed from `started` (`time.perf_counter()`) in the metrics.
        Where nothing waits (the memory store, SQLite with the lock free), the coroutine
        ends at its first step. Where traces are made, in a span of its own that continues
        the trace its `traceparent` header names."""
        if tracing.active() is None:
            return await self._answer(request, started, refusal)
        with tracing.span(
            f"{request.method} {request.path}",
            "server",
            parent=tracing.http_context(request.headers),
            attributes={"http.request.method": request.method, "url.path": request.path},
        ):
            return await self._answer(request, started, refusal)

    async def _answer(
        self, request: Incoming, started: float, refusal: ConveyorError | None
    ) -> Reply:
        request_id = request_uuid()
        headers = request.headers
        target = headers.get("x-amz-target")
        protocol = "json" if target is not None else "query"
        api, action, status = "sqs", "unknown", 200
        try:
            if refusal is not None:
                raise refusal
            refused = from_another_site(headers)
            if refused is None and not self.server.auth.verifies:  # no credentials to steal
                refused = by_another_name(
                    headers, self.server.config.allowed_hosts, "--aws-credentials"
                )
            if refused is not None:
                raise refused
            body = request.body
            if request.method == "GET" and not request.query and request.path == "/":
                reply = dump_json({"service": "conveyor", "version": __version__})
                return 200, b"application/json", reply, []
            if target is not None:
                service, _, name = target.partition(".")
                if service != "AmazonSQS" or not name:
                    raise UnknownAction(f"X-Amz-Target {target!r} is not an SQS action")
                params = parse_json(body)
            else:
                tree = query_tree(body, request.query)
                if self._is_sns(tree.get("Action"), request):
                    api = "sns"
                    action, sns_reply = await self._sns(tree, request, request_id)
                    status = sns_reply[0]
                    return sns_reply
                params = query_params(tree)
                name = params.pop("Action", "")
                if not name and request.queue is not None:
                    raise UnknownOperation(
                        "An unknown operation was requested: a request to a queue URL needs an"
                        " Action"
                    )
                if not name:
                    raise MissingParameter(
                        "The request must contain the parameter Action (Query protocol), or an"
                        " X-Amz-Target header (JSON protocol)."
                    )
                for key in [k for k in params if k.startswith("X-Amz-")]:
                    params.pop(key)
                params.pop("Version", None)
            if name in self.sqs.actions:
                action = name
            _carry_trace(params, headers, name, ("SendMessage", "SendMessageBatch"))
            if request.account is not None:
                if name in QUEUELESS_ACTIONS:
                    raise UnknownAction(f"The action {name} is not valid for this endpoint.")
                if not params.get("QueueUrl"):
                    params["QueueUrl"] = request.path
            caller = self.caller(request, name)
            result = await self.sqs.call(name, params, caller)
            extra = [(b"x-amzn-requestid", request_id.encode())]
            if protocol == "json":
                return 200, JSON_TYPE, dump_json(result), extra
            if "application/json" in headers.get("accept", ""):
                return 200, b"application/json", _wrapped(name, result, request_id), extra
            return 200, XML, query_response(name, result, request_id), extra
        except ConveyorError as exc:
            status = exc.status
            return self._error(exc, protocol, request_id)
        except Exception:
            log.exception("%s %s failed", api.upper(), action)
            status = 500
            error = ConveyorError("internal error (the server log has the details)")
            return self._error(error, protocol, request_id)
        finally:
            self.metrics.observe(api, action, status, time.perf_counter() - started)
            tracing.answered(f"{api.upper()} {action}", status)

    def caller(
        self, request: Incoming, action: str = "", services: tuple[str, ...] = ("sqs",)
    ) -> Caller:
        return self.server.auth.caller(
            method=request.method,
            raw_path=request.raw_path,
            query=request.query,
            headers=request.headers,
            body=request.body,
            base_url=request.base_url,
            now=time.time(),
            action=action,
            services=services,
            gone=request.gone,
        )

    def _sns_caller(self, action: str, params: dict[str, Any], request: Incoming) -> Caller:
        """The caller of an SNS request. A confirmation by a webhook's endpoint (a GET of
        its SubscribeURL) is unsigned wherever the server checks signatures, as on SNS: its
        token is the secret, and it acts in the topic's own region and account. So is a GET
        of a message's UnsubscribeURL (refused for a subscription confirmed with
        AuthenticateOnUnsubscribe)."""
        if (
            action in ("ConfirmSubscription", "Unsubscribe")
            and self.server.auth.verifies
            and "authorization" not in request.headers
            and "X-Amz-Credential=" not in request.query
        ):
            named = params.get("TopicArn" if action == "ConfirmSubscription" else "SubscriptionArn")
            match = TOPIC_ARN_RE.match(str(named or ""))
            if match is not None:
                return Caller(match.group(1), match.group(2), request.base_url, action=action)
        return self.caller(request, action, services=SNS_SCOPES)

    def _error(self, error: ConveyorError, protocol: str, request_id: str) -> Reply:
        extra = [(b"x-amzn-requestid", request_id.encode())]
        if isinstance(error, RequestTooLarge):
            extra.append((b"connection", b"close"))
        if protocol == "json":
            body, more = json_error(error)
            extra += [(k.lower().encode(), v.encode()) for k, v in more.items()]
            return error.status, JSON_TYPE, body, extra
        return error.status, XML, query_error(error, request_id), extra

    # -- SNS ------------------------------------------------------------------------------

    def _is_sns(self, action: object, request: Incoming) -> bool:
        """An SNS request: signed for SNS, or unsigned and calling an action only SNS has
        (and STS's GetCallerIdentity, which the SNS endpoint answers too)."""
        if not isinstance(action, str) or request.path != "/":
            return False
        service = signed_service(request.headers, request.query)
        if service == "sns" or (service == "sts" and action == "GetCallerIdentity"):
            return True
        return service != "sqs" and action in SNS_ACTIONS and action not in self.sqs.actions

    async def _sns(
        self, tree: dict[str, Any], request: Incoming, request_id: str
    ) -> tuple[str, Reply]:
        """Answer an SNS request; the action (for metrics) and the reply."""
        params = {k: v for k, v in tree.items() if not k.startswith("X-Amz-")}
        name = str(params.pop("Action", ""))
        params.pop("Version", None)
        # SNS's own switch to JSON answers (`ContentType=JSON`), or an Accept header asking
        as_json = str(params.pop("ContentType", "")).upper() == "JSON" or (
            "application/json" in request.headers.get("accept", "")
        )
        _carry_trace(params, request.headers, name, ("Publish", "PublishBatch"))
        action = name if name in SNS_ACTIONS else "unknown"
        extra = [(b"x-amzn-requestid", request_id.encode())]
        try:
            result = await self.sns.call(name, params, self._sns_caller(name, params, request))
            if as_json:
                return action, (200, b"application/json", _wrapped(name, result, request_id), extra)
            return action, (200, XML, sns_response(name, result, request_id), extra)
        except ConveyorError as exc:
            error = sns_error(exc)
        except Exception:
            log.exception("SNS %s failed", action)
            error = sns_error(ConveyorError("internal error (the server log has the details)"))
        if as_json:
            return action, (
                error.status,
                b"application/json",
                _json_error(error, request_id),
                extra,
            )
        return action, (error.status, XML, sns_error_body(error, request_id), extra)


def _carry_trace(
    params: dict[str, Any], headers: dict[str, str], action: str, actions: tuple[str, ...]
) -> None:
    """The request's X-Ray header (`X-Amzn-Trace-Id`) under TRACE_PARAM for the actions that
    pass it on as AWSTraceHeader (SQS's sends, SNS's publishes); never taken from the
    request's own parameters."""
    params.pop(TRACE_PARAM, None)
    trace = headers.get("x-amzn-trace-id")
    if trace and action in actions:
        params[TRACE_PARAM] = trace


def _json_error(error: ConveyorError, request_id: str) -> bytes:
    """A Query error as JSON (for a request that asks for JSON), shaped as its XML is."""
    kind = "Sender" if error.sender_fault else "Receiver"
    return dump_json(
        {
            "Error": {"Type": kind, "Code": error.code, "Message": error.message},
            "RequestId": request_id,
        }
    )


def _wrapped(action: str, result: Any, request_id: str) -> bytes:
    """A Query request's answer as JSON (when it asks for JSON), wrapped as its XML is.
    SQS names ReceiveMessage's list `messages` there."""
    if action == "ReceiveMessage" and "Messages" in result:
        result = {"messages": result["Messages"]}
    return dump_json(
        {
            f"{action}Response": {
                f"{action}Result": result,
                "ResponseMetadata": {"RequestId": request_id},
            }
        }
    )


async def _send(
    send: Send, status: int, content_type: bytes, body: bytes, extra: list[Header]
) -> None:
    headers = [
        (b"content-type", content_type),
        (b"content-length", str(len(body)).encode()),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
