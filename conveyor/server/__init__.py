"""`conveyor serve`: the HTTP server (SQS wire API, REST API, metrics) on uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

from .. import logs, tuning
from ..client import Client
from ..exceptions import InvalidInput
from ..push.config import GatewayConfig, check_gateway_exposure, is_loopback
from ..push.gateway import Gateway
from ..urls import described
from .app import ConveyorServer, ServerConfig
from .dashboard.routes import run_sampler
from .front.protocol import REQUEST_TIMEOUT, guarded
from .workers import supervise

__all__ = [
    "ConveyorServer",
    "ServerConfig",
    "check_exposure",
    "check_gateway_exposure",
    "serve",
]

log = logging.getLogger("conveyor.server")


def check_exposure(host: str, config: ServerConfig, insecure: bool) -> None:
    """Beyond loopback (or behind a proxy that serves beyond it: --trusted-proxy) both APIs
    need auth, unless the operator says --insecure."""
    if insecure or (is_loopback(host) and not config.trusted_proxies):
        return
    missing = []
    if config.auth_token is None:
        missing.append("--auth-token TOKEN (REST and /metrics)")
    if not config.aws_keys:
        missing.append("--aws-credentials FILE (SQS API)")
    if missing:
        exposes = (
            f"binding to {host} exposes"
            if not is_loopback(host)
            else "a trusted proxy (--trusted-proxy) serves"
        )
        raise InvalidInput(
            f"{exposes} the server beyond this machine: give "
            + " and ".join(missing)
            + ", or --insecure to serve without authentication"
        )


def listen(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A socket bound to host:port, or InvalidInput saying the port is taken. With
    `reuse_port`, other sockets of the same user may bind the port too (SO_REUSEPORT), and
    the kernel spreads connections over those that listen."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as exc:
        raise InvalidInput(f"cannot listen on {host}: {exc.strerror}") from None
    # proto IPPROTO_TCP, as asyncio's own listeners have it: asyncio turns Nagle's algorithm
    # off (TCP_NODELAY) only on connections of such sockets; without it every answer written
    # in two parts waits for the client's delayed ACK (40 ms)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise InvalidInput(
            f"cannot listen on {host}:{port}: {exc.strerror} (another server there? stop it,"
            " or choose another --port)"
        ) from None
    sock.set_inheritable(True)
    return sock


def listen_unix(path: str) -> socket.socket:
    """A Unix socket bound at `path` (mode 0660: the server's user and group may connect),
    replacing a socket file no server listens on; InvalidInput if one does."""
    where = Path(path)
    if where.is_socket():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError:
            where.unlink()  # left by a server that is gone
        else:
            raise InvalidInput(
                f"cannot listen on {path}: a server is listening there (stop it, or choose"
                " another --unix path)"
            )
        finally:
            probe.close()
    elif where.exists():
        raise InvalidInput(f"cannot listen on {path}: it exists and is not a socket")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old = os.umask(0o117)
        try:
            sock.bind(path)
        finally:
            os.umask(old)
    except OSError as exc:
        sock.close()
        raise InvalidInput(f"cannot listen on {path}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    def __init__(
        self, config: uvicorn.Config, app: ConveyorServer, handshake_timeout: float
    ) -> None:
        super().__init__(config)
        self.conveyor = app
        self.handshake_timeout = handshake_timeout

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's startup, its listeners given a TLS handshake deadline: a connection
        that has not finished its handshake within `handshake_timeout` (the request
        timeout) is closed, where the event loop's default waits 60 s."""
        loop = asyncio.get_running_loop()
        create_server = loop.create_server

        async def with_deadline(*args: Any, **kwargs: Any) -> asyncio.Server:
            if kwargs.get("ssl") is not None:
                kwargs["ssl_handshake_timeout"] = self.handshake_timeout
            return await create_server(*args, **kwargs)

        loop.create_server = with_deadline  # type: ignore[method-assign]
        try:
            await super().startup(sockets)
        finally:
            del loop.create_server  # the loop's own method again

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.conveyor.draining:
            log.info("shutting down: finishing requests in flight, ending long polls")
        self.conveyor.drain()
        # uvicorn would re-raise the signal after shutting down; a drained server exits 0
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True


def serve(
    store: str,
    *,
    host: str = "127.0.0.1",
    port: int = 9324,
    config: ServerConfig | None = None,
    insecure: bool = False,
    access_log: bool = False,
    log_level: str = "info",
    log_format: str = "text",
    keep_heap: bool = False,
    gateway: GatewayConfig | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    request_timeout: float = REQUEST_TIMEOUT,
    workers: int = 1,
    unix: str | None = None,
) -> None:
    """Run the server until SIGTERM/SIGINT; returns once requests in flight are done.

    With `gateway`, the SKMQ push gateway serves beside HTTP in the same event loop. With
    `workers` above 1, that many processes serve the port (`workers.py`). With `unix`,
    the server listens on that Unix socket instead of host:port (behind a local proxy).
    """
    config = config or ServerConfig()
    check_exposure(host, config, insecure)
    if gateway is not None:
        check_gateway_exposure(gateway, insecure)
    if workers < 1:
        raise InvalidInput(f"--workers must be 1 or more, got {workers}")
    if workers > 1:
        if store.startswith("memory:"):
            raise InvalidInput(
                "--workers needs a store the processes share (sqlite, postgresql, mysql,"
                " redis, dynamodb): each would have a memory:// store of its own"
            )
        if gateway is not None:
            raise InvalidInput(
                "--tcp serves from one process: with --workers, run `conveyor gateway` beside"
            )
    logs.setup(log_level, log_format)
    tuning.server_gc()
    if keep_heap:
        tuning.keep_heap()
    options = _Options(
        store=store,
        host=host,
        config=config,
        access_log=access_log,
        log_level=log_level,
        tls_cert=tls_cert,
        tls_key=tls_key,
        request_timeout=request_timeout,
        unix=unix,
    )
    if unix is not None:
        sock = listen_unix(unix)
        try:
            if workers == 1:
                _serve(sock, options, gateway=gateway, announce=True)
                return
            with Client(store) as client:
                client.list_queues()
            _announce(options, 0, f"; {workers} workers")
            # the workers are forked: they accept on the one socket the kernel shares
            status = supervise(workers, lambda index: _serve(sock, options))
        finally:
            sock.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(unix)
        log.info("conveyor stopped")
        if status:
            raise SystemExit(status)
        return
    if workers == 1:
        sock = listen(host, port)  # a port in use is said before anything else happens
        _serve(sock, options, gateway=gateway, announce=True)
        return
    reserved = listen(host, port, reuse_port=True)  # bound, not listening: no connections
    port = reserved.getsockname()[1]
    with Client(store) as client:
        client.list_queues()  # fail now, with the store's message, if it cannot be reached
    _announce(options, port, f"; {workers} workers")
    try:
        status = supervise(
            workers, lambda index: _serve(listen(host, port, reuse_port=True), options)
        )
    finally:
        reserved.close()
    log.info("conveyor stopped")
    if status:
        raise SystemExit(status)


@dataclass(frozen=True)
class _Options:
    store: str
    host: str
    config: ServerConfig
    access_log: bool
    log_level: str
    tls_cert: str | None
    tls_key: str | None
    request_timeout: float
    unix: str | None = None


def _announce(options: _Options, port: int, more: str = "") -> None:
    config = options.config
    scheme = "https" if options.tls_cert else "http"
    where = (
        f"{scheme} on unix:{options.unix}" if options.unix else f"{scheme}://{options.host}:{port}"
    )
    if config.trusted_proxies:
        more += "; forwarding headers believed from " + ", ".join(config.trusted_proxies)
    log.info(
        "conveyor serving %s (SQS and SNS APIs, REST API, /ui, /metrics) on store %s;"
        " SQS region %s, account %s%s%s",
        where,
        described(options.store),
        config.region,
        config.account,
        "; auth on" if config.auth_token or config.aws_keys else "",
        more,
    )


def _serve(
    sock: socket.socket,
    options: _Options,
    *,
    gateway: GatewayConfig | None = None,
    announce: bool = False,
) -> None:
    """Serve on `sock` in this process until SIGTERM/SIGINT."""
    config = options.config
    port = 0 if options.unix else sock.getsockname()[1]
    client = Client(options.store)
    client.list_queues()  # fail now, with the store's message, if it cannot be reached
    server = ConveyorServer(client, config)
    uv_config = uvicorn.Config(
        server.app,
        host=options.host,
        port=port,
        log_level=options.log_level,
        log_config=None,  # uvicorn's lines go through the one format set above
        access_log=options.access_log,
        timeout_graceful_shutdown=30,
        lifespan="off",
        http=guarded(options.request_timeout),
        ssl_certfile=options.tls_cert,
        ssl_keyfile=options.tls_key,
        proxy_headers=False,  # forwarding headers: ConveyorServer.proxies (--trusted-proxy)
    )
    uv = _Server(uv_config, server, options.request_timeout)

    async def main() -> None:
        push = None
        if gateway is not None:
            push = Gateway(client, gateway)
            server.push = push
            try:
                await push.start()
            except OSError as exc:
                raise InvalidInput(
                    f"cannot listen on {gateway.host}:{gateway.port} for the push gateway:"
                    f" {exc.strerror} (another server there? choose another --tcp port)"
                ) from None
        if announce:
            _announce(options, port)
        flusher = None
        if config.statsd:
            flusher = asyncio.create_task(server.metrics.run_flusher(config.statsd_interval))
        sampler = asyncio.create_task(run_sampler(client, server.history))
        webhooks = asyncio.create_task(server.webhooks.run())
        try:
            await uv.serve(sockets=[sock])
        finally:
            server.webhooks.close()
            await webhooks
            if push is not None:
                await push.close()
            if flusher is not None:
                flusher.cancel()
            sampler.cancel()

    try:
        tuning.run(main())
    finally:
        client.close()
        if announce:
            log.info("conveyor stopped")
