"""The ASGI application: SQS and SNS wire APIs, REST API, metrics and health on one port.

FastAPI (on Starlette) serves the REST API and writes its OpenAPI document. The SQS
endpoint (`/` and queue URLs) is a plain ASGI handler that no framework code precedes
(`front/endpoint.py`); the other routes pass a pure ASGI layer that enforces the body limit
before a body is read and times every request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.routing import Match

from .. import __version__, tracing
from ..aio import AsyncClient
from ..client import Client
from ..exceptions import (
    ConveyorError,
    InvalidInput,
    RequestTooLarge,
)
from ..notify import HUB
from ..validation import check_queue_name, check_topic_name
from .counts import SharedCounts
from .dashboard.routes import History, build_ui
from .front.auth import Auth, Key
from .front.conns import open_connections
from .front.endpoint import (
    Endpoint,
    by_another_name,
    declared_too_large,
    from_another_site,
    header_map,
    sqs_path,
    too_large,
)
from .front.proxies import TrustedProxies, peer_of, scope_with
from .metrics import Metrics
from .rest.bodies import ErrorBody, error_body, json_response
from .rest.routes import Rest, router
from .sns.api import SnsApi
from .sns.signing import CERT_PATH, Signer
from .sns.webhooks import EndpointRules, Webhooks
from .sqs.api import SqsApi
from .sqs.names import Namespaces

if TYPE_CHECKING:
    from ..push.gateway import Gateway

log = logging.getLogger("conveyor.server")

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
    # host names browsers may call the server by, besides localhost and IP addresses
    allowed_hosts: tuple[str, ...] = ()
    # proxies whose Forwarded/X-Forwarded-* headers are believed (--trusted-proxy)
    trusted_proxies: tuple[str, ...] = ()
    # hosts and networks SNS's http/https subscriptions may reach (--sns-http-allow)
    sns_http_allow: tuple[str, ...] = ()
    # queue URLs: "path" (BASE/ACCOUNT/NAME, BASE/queue/REGION/...) or "host" (sqs.REGION.HOST)
    queue_urls: str = "path"
    # SNS protocols whose messages are kept in outbox queues (--sns-outbox)
    sns_outbox: frozenset[str] = frozenset()
    # SNS's signing key and certificate (PEM); else made once and kept in the store
    sns_signing_key: bytes | None = None
    sns_signing_cert: bytes | None = None


class ConveyorServer:
    """The state behind one server process: the client, the APIs and shutdown."""

    def __init__(self, client: Client, config: ServerConfig | None = None) -> None:
        self.client = client
        self.config = config or ServerConfig()
        self.namespaces = Namespaces(
            self.config.region, self.config.account, host_urls=self.config.queue_urls == "host"
        )
        self.auth = Auth(self.namespaces, self.config.auth_token, self.config.aws_keys)
        self.aio = AsyncClient(client=client)
        self.counts = SharedCounts()  # what the dashboard, /metrics and StatsD read
        self.metrics = Metrics(
            client,
            statsd=self.config.statsd,
            prefix=self.config.statsd_prefix,
            waits=self.aio.waits,
            counts=self.counts,
        )
        self.proxies = TrustedProxies(self.config.trusted_proxies)
        self.readiness = Readiness(client)
        self.draining = False
        self.push: Gateway | None = None  # the push gateway serving beside it, if any
        self.sqs = SqsApi(
            client,
            namespaces=self.namespaces,
            metrics=self.metrics,
            draining=self.is_draining,
            aio=self.aio,
        )
        self.history = History(counts=self.counts)
        self.signer = Signer(client, self.config.sns_signing_key, self.config.sns_signing_cert)
        endpoints = EndpointRules(self.config.sns_http_allow)
        self.sns = SnsApi(
            client,
            self.namespaces,
            signer=self.signer,
            endpoints=endpoints,
            outbox=self.config.sns_outbox,
        )
        self.webhooks = Webhooks(self.aio, endpoints)
        self.app = BodyLimit(self._build(), self)

    def is_draining(self) -> bool:
        return self.draining

    def connections(self) -> dict[str, int]:
        """Connections open now: HTTP in this process, and the push gateway's beside it."""
        open_now = {"http": open_connections()}
        if self.push is not None:
            open_now["push"] = len(self.push.connections)
        return open_now

    def drain(self) -> None:
        """Stop holding long polls: every waiting receive returns what it has now; stop the
        message move tasks."""
        self.draining = True
        HUB.wake_all()
        self.webhooks.close()
        self.sqs.moves.close()  # redrives at a rate stop after the batch they are moving

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

        app.state.rest = Rest(self.client, self.aio, self.metrics, self.is_draining, self.sqs.moves)
        app.include_router(router, dependencies=[Depends(check_token)])
        app.include_router(
            build_ui(self.client, self.history, check_token, self.auth, self.connections)
        )

        self._operations(app)
        answer_errors(app)
        return app

    def _operations(self, app: FastAPI) -> None:
        """The operator's routes: readiness, liveness, metrics, the SNS signing certificate."""

        @app.get(
            "/healthz",
            tags=["operations"],
            summary="Readiness: the store is reachable and the server is not stopping",
            responses={503: {"model": ErrorBody, "description": "not ready: the reason"}},
        )
        async def healthz() -> Response:
            if self.draining:  # a balancer sends no more; requests in flight still finish
                return JSONResponse({"status": "draining", "draining": True}, status_code=503)
            trouble = await self.readiness.check()
            if trouble is not None:
                body = {"status": "unavailable", "draining": False, "error": trouble}
                return JSONResponse(body, status_code=503)
            return JSONResponse({"status": "ok", "draining": False})

        @app.get(
            CERT_PATH,
            tags=["operations"],
            summary="The certificate SNS messages are signed with (their SigningCertURL)",
            response_class=Response,
            responses={
                200: {
                    "content": {"application/x-pem-file": {}},
                    "description": "the X.509 certificate, PEM",
                }
            },
        )
        async def signing_certificate() -> Response:
            pem = await asyncio.to_thread(self.signer.certificate)
            return Response(pem, media_type="application/x-pem-file")

        @app.get("/livez", tags=["operations"], summary="Liveness: the server answers")
        async def livez() -> dict[str, str]:
            return {"status": "ok"}  # asks no store: a store outage is no reason to restart

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


def answer_errors(app: FastAPI) -> None:
    """Every error the REST API and the operator's routes meet, answered in the one error
    shape ({"error", "code"}): Conveyor's own, invalid requests, routing's, a client gone
    mid-request, and a crash (logged)."""

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


def allowed_methods(app: FastAPI, scope: Scope) -> list[str]:
    """The methods some route serves at this request's path."""
    methods: set[str] = set()
    for route in app.routes:
        match, _ = route.matches({**scope, "method": "\x00"})
        if match is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods)


SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
READY_WITHIN = 2.0  # seconds /healthz waits for the store before it says it is not ready


class Readiness:
    """/healthz's question to the store, answered within READY_WITHIN seconds however long
    the store takes (a lost Redis is waited out for a minute): one question at a time, which
    every probe that comes while it is out waits on."""

    def __init__(self, client: Client, within: float = READY_WITHIN) -> None:
        self.client = client
        self.within = within
        self.pending: asyncio.Future[None] | None = None

    def ask(self) -> None:
        self.client.list_queues("\x7f")  # a cheap round trip to the store

    async def check(self) -> str | None:
        """None when the store answered; else what is wrong."""
        if self.pending is None or self.pending.done():
            self.pending = asyncio.ensure_future(asyncio.to_thread(self.ask))
            # its outcome is read here, or, when it comes after every probe gave up, dropped
            self.pending.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            await asyncio.wait_for(asyncio.shield(self.pending), self.within)
        except TimeoutError:
            return f"the store did not answer within {self.within:g} s"
        except ConveyorError as exc:
            return str(exc)
        except Exception as exc:  # whatever the store's driver raised: not ready either
            log.warning("/healthz: the store failed: %r", exc)
            return f"the store failed: {exc!r}"
        return None


class BodyLimit:
    """The SQS endpoint (`/` and queue URLs, which reads its body itself), or the REST API
    with bodies refused over the limit before they are read (Content-Length) or as soon as a
    streamed body passes it."""

    def __init__(self, app: ASGIApp, server: ConveyorServer) -> None:
        self.inner = app
        self.server = server
        self.endpoint = Endpoint(server)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        proxies = self.server.proxies
        if proxies:
            view = proxies.resolve(
                scope.get("scheme", "http"), header_map(scope["headers"]), peer_of(scope)
            )
            if view is not None:
                scope = scope_with(scope, view)
        path_params = sqs_path(scope)
        if path_params is not None:
            await self.endpoint(scope, receive, send, path_params)
            return
        if tracing.active() is None:
            await self._rest(scope, receive, send)
            return
        with tracing.span(
            f"{scope['method']} {scope['path']}",
            "server",
            parent=tracing.http_context(header_map(scope["headers"])),
            attributes={"http.request.method": scope["method"], "url.path": scope["path"]},
        ):
            await self._rest(scope, receive, send)

    async def _rest(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The REST API and the dashboard, with their refusals, limits and metrics."""
        headers = header_map(scope["headers"])
        refused = None
        if scope["method"] not in SAFE_METHODS:  # reads are no harm: no page sees them
            refused = from_another_site(headers)
        config = self.server.config
        if refused is None and config.auth_token is None:  # a page could read them here
            refused = by_another_name(headers, config.allowed_hosts, "--auth-token")
        if refused is not None:
            await self._reject(refused, scope, receive, send)
            return
        limit = config.max_body
        if declared_too_large(headers.get("content-length"), limit):
            await self._reject(too_large(limit), scope, receive, send)
            return
        seen = 0
        started = False
        status = 500
        over: RequestTooLarge | None = None  # the body passed the limit: the answer is ours
        began = time.perf_counter()

        async def limited() -> Message:
            nonlocal seen, over
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    over = too_large(limit)
                    raise over
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started, status
            if over is not None:
                return  # FastAPI's answer to the error raised reading the body (a 400)
            if message["type"] == "http.response.start":
                started, status = True, message["status"]
            await send(message)

        try:
            # raised by `limited` where nothing caught it; where FastAPI did, `over` says so
            with contextlib.suppress(RequestTooLarge):
                await self.inner(scope, limited, tracking_send)
            if over is not None and not started:
                status = over.status
                await self._reject(over, scope, receive, send)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None)
            if path is not None:
                self.server.metrics.observe(
                    "rest", f"{scope['method']} {path}", status, time.perf_counter() - began
                )
                tracing.answered(f"{scope['method']} {path}", status)

    async def _reject(
        self, error: ConveyorError, scope: Scope, receive: Receive, send: Send
    ) -> None:
        response = JSONResponse(error_body(error), status_code=error.status)
        response.headers["connection"] = "close"
        await response(scope, receive, send)
