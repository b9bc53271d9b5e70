"""The ASGI application: SQS wire API, REST API, metrics and health on one port.

FastAPI (on Starlette) serves the REST API and writes its OpenAPI document; the SQS
endpoint is a plain Starlette route (it has its own two protocols and no schema to
validate against). A pure ASGI middleware enforces the body limit before a body is read
and times every request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.routing import Match

from .. import __version__
from ..aio import AsyncClient
from ..client import Client
from ..exceptions import (
    ConveyorError,
    InvalidInput,
    MissingParameter,
    RequestTooLarge,
    UnknownAction,
    UnknownOperation,
)
from ..notify import HUB
from ..validation import check_queue_name, check_topic_name
from .auth import Auth, Key, signed_service
from .metrics import Metrics
from .rest import ErrorBody, build_router, error_body, json_response
from .sns_api import ACTIONS as SNS_ACTIONS
from .sns_api import SnsApi, sns_error, sns_error_body, sns_response
from .sqs_api import TRACE_PARAM, SqsApi
from .sqs_names import Caller, Namespaces
from .sqs_wire import (
    JSON_CONTENT_TYPE,
    json_error,
    parse_json,
    query_error,
    query_params,
    query_response,
    query_tree,
)
from .ui import History, build_ui

log = logging.getLogger("conveyor.server")

# actions SQS refuses at a queue's URL (they act on no queue)
QUEUELESS_ACTIONS = frozenset({"CreateQueue", "ListQueues"})

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass
class ServerConfig:
    max_body: int = 4 * 1024 * 1024
    region: str = "us-east-1"
    account: str = "000000000000"
    auth_token: str | None = None
    metrics_token: str | None = None  # a read-only token for /metrics alone
    aws_keys: dict[str, Key] = field(default_factory=dict)
    statsd: str | None = None
    statsd_prefix: str = ""
    statsd_interval: float = 10.0


class ConveyorServer:
    """The state behind one server process: the client, the APIs and shutdown."""

    def __init__(self, client: Client, config: ServerConfig | None = None) -> None:
        self.client = client
        self.config = config or ServerConfig()
        self.namespaces = Namespaces(self.config.region, self.config.account)
        self.auth = Auth(self.namespaces, self.config.auth_token, self.config.aws_keys)
        self.aio = AsyncClient(client=client)
        self.metrics = Metrics(
            client,
            statsd=self.config.statsd,
            prefix=self.config.statsd_prefix,
            waits=self.aio.waits,
        )
        self.draining = False
        self.sqs = SqsApi(
            client,
            namespaces=self.namespaces,
            metrics=self.metrics,
            draining=self.is_draining,
            aio=self.aio,
        )
        self.history = History()
        self.sns = SnsApi(client, self.namespaces)
        self.app = BodyLimit(self._build(), self)

    def is_draining(self) -> bool:
        return self.draining

    def drain(self) -> None:
        """Stop holding long polls: every waiting receive returns what it has now."""
        self.draining = True
        HUB.wake_all()

    # -- the application ------------------------------------------------------------------

    def _build(self) -> FastAPI:
        app = FastAPI(
            title="Conveyor",
            version=__version__,
            description=(
                "Conveyor's REST API. The SQS wire API (AWS JSON 1.0 and Query) is served on"
                " POST / and on queue URLs; point any SQS client's endpoint URL here."
            ),
            docs_url=None,
            redoc_url=None,
        )

        async def check_token(request: Request) -> None:
            self.auth.check_bearer(request.headers.get("authorization"))

        app.include_router(
            build_router(self.client, self.aio, self.metrics, self.is_draining),
            dependencies=[Depends(check_token)],
        )
        app.include_router(build_ui(self.client, self.history, check_token, self.auth))

        @app.get("/healthz", tags=["operations"], summary="Liveness and store reachability")
        def healthz() -> dict[str, Any]:
            self.client.list_queues("\x7f")  # a cheap round trip to the store
            return {"status": "ok", "draining": self.draining}

        @app.get(
            "/metrics",
            tags=["operations"],
            summary="Prometheus metrics",
            response_class=PlainTextResponse,
            responses={
                200: {"content": {"text/plain": {}}, "description": "the exposition format"},
                401: {"model": ErrorBody, "description": "the bearer token is missing or wrong"},
            },
        )
        async def metrics(request: Request) -> Response:
            self.auth.check_bearer(
                request.headers.get("authorization"), also=self.config.metrics_token
            )
            body = await asyncio.to_thread(self.metrics.exposition)
            return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

        @app.exception_handler(ConveyorError)
        async def on_error(request: Request, exc: ConveyorError) -> Response:
            return json_response(exc)

        @app.exception_handler(RequestValidationError)
        async def on_invalid(request: Request, exc: RequestValidationError) -> Response:
            for e in exc.errors():  # a bad name is said as the SDK says it
                loc = tuple(e["loc"])
                if loc in (("path", "queue"), ("path", "topic")):
                    check = check_queue_name if loc[1] == "queue" else check_topic_name
                    try:
                        check(str(e.get("input", "")))
                    except InvalidInput as bad:
                        return json_response(bad)
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            return JSONResponse(
                {"error": f"invalid request: {problems}", "code": InvalidInput.code},
                status_code=400,
            )

        @app.exception_handler(StarletteHTTPException)
        async def on_http(request: Request, exc: StarletteHTTPException) -> Response:
            # routing's own answers (404, 405 with its Allow header) in the one error shape
            try:
                code = HTTPStatus(exc.status_code).phrase.replace(" ", "").replace("-", "")
            except ValueError:
                code = f"HTTP{exc.status_code}"
            headers = dict(exc.headers or {})
            if exc.status_code == 405:  # every method of the path, not the first route's
                headers["Allow"] = ", ".join(allowed_methods(app, request.scope))
            return JSONResponse(
                {"error": str(exc.detail), "code": code},
                status_code=exc.status_code,
                headers=headers,
            )

        @app.exception_handler(ClientDisconnect)
        async def on_gone(request: Request, exc: ClientDisconnect) -> Response:
            log.debug("%s %s: the client went away mid-request", request.method, request.url.path)
            return Response(status_code=499)

        @app.exception_handler(Exception)
        async def on_crash(request: Request, exc: Exception) -> Response:
            log.exception("%s %s failed", request.method, request.url.path)
            return JSONResponse(
                {
                    "error": "internal error (the server log has the details)",
                    "code": "InternalError",
                },
                status_code=500,
            )

        return app

    # -- the SQS endpoint -----------------------------------------------------------------

    async def sqs_endpoint(self, request: Request) -> Response:
        started = time.perf_counter()
        request_id = str(uuid.uuid4())
        target = request.headers.get("x-amz-target")
        protocol = "json" if target is not None else "query"
        action = "unknown"
        status = 200
        try:
            if request.method == "GET" and not request.url.query and request.url.path == "/":
                return JSONResponse({"service": "conveyor", "version": __version__})
            body = await request.body()
            if target is not None:
                service, _, name = target.partition(".")
                if service != "AmazonSQS" or not name:
                    raise UnknownAction(f"X-Amz-Target {target!r} is not an SQS action")
                params = parse_json(body)
            else:
                tree = query_tree(body, request.url.query)
                if self._is_sns(tree.get("Action"), request):
                    return await self.sns_endpoint(request, tree, body, request_id)
                params = query_params(tree)
                name = params.pop("Action", "")
                if not name and request.path_params.get("queue") is not None:
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
            params.pop(TRACE_PARAM, None)
            trace = request.headers.get("x-amzn-trace-id")
            if trace and name in ("SendMessage", "SendMessageBatch"):
                params[TRACE_PARAM] = trace  # becomes AWSTraceHeader, as on SQS
            account = request.path_params.get("account")
            if account is not None and name in QUEUELESS_ACTIONS:
                raise UnknownAction(f"The action {name} is not valid for this endpoint.")
            if account is not None and not params.get("QueueUrl"):
                params["QueueUrl"] = request.url.path
            caller = self._caller(request, body)
            result = await self.sqs.call(name, params, caller)
            if protocol == "json":
                return Response(
                    json.dumps(result, separators=(",", ":")),
                    media_type=JSON_CONTENT_TYPE,
                    headers={"x-amzn-RequestId": request_id},
                )
            if "application/json" in request.headers.get("accept", ""):
                # the Query protocol answers JSON when asked to, wrapped as its XML is
                wrapped = {
                    f"{name}Response": {
                        f"{name}Result": result,
                        "ResponseMetadata": {"RequestId": request_id},
                    }
                }
                return JSONResponse(wrapped, headers={"x-amzn-RequestId": request_id})
            return Response(
                query_response(name, result, request_id),
                media_type="text/xml",
                headers={"x-amzn-RequestId": request_id},
            )
        except ConveyorError as exc:
            status = exc.status
            return sqs_error(exc, protocol, request_id)
        except ClientDisconnect:
            log.debug("SQS %s: the client went away mid-request", action)
            status = 499  # nginx's code for it: neither the server's fault nor an answer
            return Response(status_code=499)
        except Exception:
            log.exception("SQS %s failed", action)
            status = 500
            return sqs_error(
                ConveyorError("internal error (the server log has the details)"),
                protocol,
                request_id,
            )
        finally:
            self.metrics.observe("sqs", action, status, time.perf_counter() - started)

    def _caller(self, request: Request, body: bytes) -> Caller:
        host = request.headers.get("host") or f"{request.url.hostname}:{request.url.port}"
        return self.auth.caller(
            method=request.method,
            raw_path=request.scope.get("raw_path", b"/").decode("latin-1") or "/",
            query=request.url.query,
            headers=request.headers,
            body=body,
            base_url=f"{request.url.scheme}://{host}",
            now=time.time(),
        )

    # -- the SNS endpoint -----------------------------------------------------------------

    def _is_sns(self, action: object, request: Request) -> bool:
        """An SNS request: signed for SNS, or unsigned and calling an action only SNS has
        (and STS's GetCallerIdentity, which the SNS endpoint answers too)."""
        if not isinstance(action, str) or request.url.path != "/":
            return False
        service = signed_service(request.headers, request.url.query)
        if service == "sns" or (service == "sts" and action == "GetCallerIdentity"):
            return True
        return service != "sqs" and action in SNS_ACTIONS and action not in self.sqs.actions

    async def sns_endpoint(
        self, request: Request, tree: dict[str, Any], body: bytes, request_id: str
    ) -> Response:
        started = time.perf_counter()
        params = {k: v for k, v in tree.items() if not k.startswith("X-Amz-")}
        name = str(params.pop("Action", ""))
        params.pop("Version", None)
        action = name if name in SNS_ACTIONS else "unknown"
        status = 200
        headers = {"x-amzn-RequestId": request_id}
        try:
            caller = self._caller(request, body)
            result = await self.sns.call(name, params, caller)
            if "application/json" in request.headers.get("accept", ""):
                wrapped = {
                    f"{name}Response": {
                        f"{name}Result": result,
                        "ResponseMetadata": {"RequestId": request_id},
                    }
                }
                return JSONResponse(wrapped, headers=headers)
            return Response(
                sns_response(name, result, request_id), media_type="text/xml", headers=headers
            )
        except ConveyorError as exc:
            error = sns_error(exc)
            status = error.status
            return Response(
                sns_error_body(error, request_id),
                status_code=status,
                media_type="text/xml",
                headers=headers,
            )
        except Exception:
            log.exception("SNS %s failed", action)
            status = 500
            error = sns_error(ConveyorError("internal error (the server log has the details)"))
            return Response(
                sns_error_body(error, request_id),
                status_code=500,
                media_type="text/xml",
                headers=headers,
            )
        finally:
            self.metrics.observe("sns", action, status, time.perf_counter() - started)


def allowed_methods(app: FastAPI, scope: Scope) -> list[str]:
    """The methods some route serves at this request's path."""
    methods: set[str] = set()
    for route in app.routes:
        match, _ = route.matches({**scope, "method": "\x00"})
        if match is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods)


def sqs_error(error: ConveyorError, protocol: str, request_id: str) -> Response:
    if protocol == "json":
        body, headers = json_error(error)
        headers["x-amzn-RequestId"] = request_id
        return Response(
            body, status_code=error.status, media_type=JSON_CONTENT_TYPE, headers=headers
        )
    return Response(
        query_error(error, request_id),
        status_code=error.status,
        media_type="text/xml",
        headers={"x-amzn-RequestId": request_id},
    )


def sqs_path(scope: Scope) -> dict[str, str] | None:
    """Path parameters if the request is for the SQS endpoint (`/` or a queue URL)."""
    if scope.get("method") not in ("POST", "GET"):
        return None
    path: str = scope.get("path", "/")
    if path == "/":
        return {}
    parts = path.split("/")
    if len(parts) == 5 and parts[1] == "queue" and parts[2]:  # /queue/REGION/ACCOUNT/NAME
        parts = parts[2:]
    if len(parts) == 3 and len(parts[1]) == 12 and parts[1].isdigit() and parts[2]:
        return {"account": parts[1], "queue": parts[2]}
    return None


class BodyLimit:
    """Refuses bodies over the limit before reading them (Content-Length), or as soon as a
    streamed body passes it; the error has the shape of the API the request was for."""

    def __init__(self, app: ASGIApp, server: ConveyorServer) -> None:
        self.inner = app
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        limit = self.server.config.max_body
        length = next(
            (v.decode("latin-1") for k, v in scope["headers"] if k.lower() == b"content-length"),
            None,
        )
        too_large = RequestTooLarge(
            f"the request body is over this server's limit of {limit} bytes (--max-body)"
        )
        if length is not None and length.isdigit() and int(length) > limit:
            await self._reject(scope, too_large, receive, send)
            return
        seen = 0
        started = False
        status = 500
        began = time.perf_counter()

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise too_large
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started, status
            if message["type"] == "http.response.start":
                started, status = True, message["status"]
            await send(message)

        try:
            path_params = sqs_path(scope)
            if path_params is not None:
                # the SQS endpoint needs no routing, validation or OpenAPI: call it directly
                scope["path_params"] = path_params
                response = await self.server.sqs_endpoint(Request(scope, limited))
                await response(scope, receive, tracking_send)
            else:
                await self.inner(scope, limited, tracking_send)
        except RequestTooLarge:
            if not started:
                await self._reject(scope, too_large, receive, send)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None)
            if path is not None and getattr(route, "endpoint", None) != self.server.sqs_endpoint:
                self.server.metrics.observe(
                    "rest", f"{scope['method']} {path}", status, time.perf_counter() - began
                )

    async def _reject(
        self,
        scope: Scope,
        error: ConveyorError,
        receive: Receive,
        send: Send,
    ) -> None:
        if sqs_path(scope) is not None:
            json_protocol = any(k.lower() == b"x-amz-target" for k, _ in scope["headers"])
            protocol = "json" if json_protocol else "query"
            response = sqs_error(error, protocol, str(uuid.uuid4()))
        else:
            response = JSONResponse(error_body(error), status_code=error.status)
        response.headers["connection"] = "close"
        await response(scope, receive, send)
