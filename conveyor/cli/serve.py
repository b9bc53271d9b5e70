"""`conveyor serve`: the HTTP server."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TypedDict

import click

from .. import logs, tuning
from ..exceptions import InvalidInput
from ..extras import missing
from ..push.config import GatewayConfig
from .app import F, State, cli, fail


@contextlib.contextmanager
def needs_server_extra(part: str) -> Iterator[None]:
    """Imports of the server's parts: a module of the server extra that is missing is said
    in one line with the command that installs it, not a traceback."""
    try:
        yield
    except ModuleNotFoundError as exc:
        fail(missing("server", part, exc.name), "MissingExtra")


def log_options(f: F) -> F:
    f = click.option(
        "--log-format",
        type=click.Choice(logs.FORMATS),
        default="text",
        show_default=True,
        help="text for people; json: one object a line, for log collectors.",
    )(f)
    return click.option(
        "--log-level", type=click.Choice(logs.LEVELS), default="info", show_default=True
    )(f)


@cli.command()
@click.option("--store", "store_url", help="Store URL (default: the global --store).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=9324, show_default=True, type=click.IntRange(0, 65535))
@click.option("--auth-token", envvar="CONVEYOR_AUTH_TOKEN", help="Bearer token for REST.")
@click.option(
    "--metrics-token",
    envvar="CONVEYOR_METRICS_TOKEN",
    help="A read-only bearer token that opens /metrics alone (for scrapers).",
)
@click.option(
    "--aws-credentials",
    envvar="CONVEYOR_AWS_CREDENTIALS",
    type=click.Path(dir_okay=False, path_type=Path),
    help="AWS credentials file: SQS requests must be SigV4-signed by one of its keys.",
)
@click.option("--insecure", is_flag=True, help="Allow a non-loopback address without auth.")
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="A host name browsers may call the server by, besides localhost and IP addresses"
    " (behind a proxy: its public name); repeatable.",
)
@click.option(
    "--sns-http-allow",
    "sns_http_allow",
    multiple=True,
    metavar="HOST|NETWORK",
    envvar="CONVEYOR_SNS_HTTP_ALLOW",
    help="A host name, address or network (10.0.0.0/8) SNS http/https subscriptions may"
    " deliver to; repeatable. None by default: Subscribe refuses every other endpoint.",
)
@click.option(
    "--queue-urls",
    type=click.Choice(["path", "host"]),
    default="path",
    show_default=True,
    envvar="CONVEYOR_QUEUE_URLS",
    help="How queue URLs name a region other than --region: in the path"
    " (BASE/queue/REGION/ACCOUNT/NAME), or in the host as SQS does"
    " (http://sqs.REGION.HOST:PORT/ACCOUNT/NAME, every region; needs DNS for those names)."
    " With host, both forms are taken.",
)
@click.option(
    "--sns-outbox",
    "sns_outbox",
    multiple=True,
    metavar="PROTOCOL",
    envvar="CONVEYOR_SNS_OUTBOX",
    help="An SNS protocol this server does not send over (email, email-json, sms,"
    " application, lambda, firehose, or all) whose subscriptions it takes, writing what it"
    " would send to a queue per subscription (sns-outbox-...) to be read; repeatable."
    " None by default: Subscribe refuses them.",
)
@click.option(
    "--sns-signing-key",
    type=click.Path(exists=True, dir_okay=False),
    help="The RSA private key (PEM) SNS messages are signed with, with --sns-signing-cert;"
    " by default one is made once and kept in the store.",
)
@click.option(
    "--sns-signing-cert",
    type=click.Path(exists=True, dir_okay=False),
    help="The certificate (PEM) of --sns-signing-key, served at each message's SigningCertURL.",
)
@click.option(
    "--trusted-proxy",
    "trusted_proxies",
    multiple=True,
    metavar="ADDRESS",
    envvar="CONVEYOR_TRUSTED_PROXIES",
    help="A reverse proxy whose Forwarded/X-Forwarded-* headers are believed: an address,"
    " a network (10.0.0.0/8) or unix (peers on --unix); repeatable (docs/deploy.md).",
)
@click.option(
    "--unix",
    metavar="PATH",
    help="Listen on this Unix socket instead of --host/--port (for a proxy on this machine).",
)
@click.option("--region", default="us-east-1", show_default=True, help="Default SQS region.")
@click.option(
    "--account", default="000000000000", show_default=True, help="Default SQS account id."
)
@click.option("--statsd", metavar="HOST:PORT", help="Send StatsD metrics there.")
@click.option("--statsd-prefix", default="", help="Prefix of every StatsD name.")
@click.option(
    "--max-body",
    default=4 * 1024 * 1024,
    show_default=True,
    type=click.IntRange(1024),
    help="Largest request body accepted, in bytes.",
)
@click.option("--access-log", is_flag=True, help="Log every request.")
@log_options
@click.option(
    "--keep-heap",
    is_flag=True,
    help="Keep freed memory in the process (glibc): faster SQLite receives; see docs/stores.md.",
)
@click.option(
    "--tls-cert",
    type=click.Path(exists=True, dir_okay=False),
    help="Serve HTTPS (and the push gateway over TLS) with this PEM certificate (chain).",
)
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), help="Its PEM key.")
@click.option(
    "--request-timeout",
    default=30.0,
    show_default=True,
    type=click.FloatRange(0.1),
    help="Seconds a request has to arrive whole; a silent or trickling connection is closed.",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Create or update the queues and topics this TOML file declares, then serve.",
)
@click.option(
    "--tcp",
    "tcp",
    metavar="HOST:PORT",
    help="Also serve the SKMQ push gateway there (e.g. 127.0.0.1:1734); see docs/push.md.",
)
@click.option(
    "--conf",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The push gateway's settings: SKMQ's conf.json (retry_times, ack_timeout, rate, ...).",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Server processes on the port (a shared store: sqlite, postgresql, mysql, redis, ...).",
)
@click.pass_obj
def serve(
    state: State,
    store_url: str | None,
    host: str,
    port: int,
    auth_token: str | None,
    metrics_token: str | None,
    aws_credentials: Path | None,
    insecure: bool,
    allowed_hosts: tuple[str, ...],
    trusted_proxies: tuple[str, ...],
    unix: str | None,
    region: str,
    account: str,
    statsd: str | None,
    statsd_prefix: str,
    max_body: int,
    access_log: bool,
    log_level: str,
    log_format: str,
    keep_heap: bool,
    tls_cert: str | None,
    tls_key: str | None,
    request_timeout: float,
    sns_http_allow: tuple[str, ...],
    queue_urls: str,
    sns_outbox: tuple[str, ...],
    sns_signing_key: str | None,
    sns_signing_cert: str | None,
    config_file: Path | None,
    tcp: str | None,
    conf: Path | None,
    workers: int,
) -> None:
    """Serve the SQS wire API, the REST API and /metrics over HTTP.

    SQS clients work unchanged with an endpoint URL: for boto3,
    boto3.client("sqs", endpoint_url="http://127.0.0.1:9324"). SIGTERM finishes the
    requests in flight, ends long polls early and exits 0.
    """
    with needs_server_extra("conveyor serve"):
        from ..server import ServerConfig
        from ..server import serve as run
        from ..server.front.auth import load_credentials
        from ..server.front.proxies import TrustedProxies
        from ..server.sns.outbox import outbox_protocols
        from ..server.sqs.names import ACCOUNT_RE, REGION_RE

    if not REGION_RE.fullmatch(region):
        raise InvalidInput(f"--region {region!r} is not a region name (like us-east-1)")
    if not ACCOUNT_RE.fullmatch(account):
        raise InvalidInput(f"--account {account!r} must be 12 digits")
    # the environment's list may be separated by commas as well as spaces
    proxies = tuple(p for spec in trusted_proxies for p in spec.replace(",", " ").split())
    TrustedProxies(proxies)  # each is an address, a network or unix, or it says so
    try:
        outbox = outbox_protocols(sns_outbox)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None
    if statsd is not None:
        h, _, p = statsd.rpartition(":")
        if not h or not p.isdigit():
            raise InvalidInput(f"--statsd {statsd!r}: give HOST:PORT, like 127.0.0.1:8125")
    config = ServerConfig(
        max_body=max_body,
        region=region,
        account=account,
        auth_token=auth_token,
        metrics_token=metrics_token,
        aws_keys=load_credentials(aws_credentials) if aws_credentials else {},
        statsd=statsd,
        statsd_prefix=statsd_prefix,
        allowed_hosts=tuple(h.strip().lower() for h in allowed_hosts),
        trusted_proxies=proxies,
        sns_http_allow=tuple(a for spec in sns_http_allow for a in spec.replace(",", " ").split()),
        sns_outbox=outbox,
        queue_urls=queue_urls,
        sns_signing_key=Path(sns_signing_key).read_bytes() if sns_signing_key else None,
        sns_signing_cert=Path(sns_signing_cert).read_bytes() if sns_signing_cert else None,
    )
    if (sns_signing_key is None) != (sns_signing_cert is None):
        raise InvalidInput("give both --sns-signing-key and --sns-signing-cert (PEM), or neither")
    if (tls_cert is None) != (tls_key is None):
        raise InvalidInput("give both --tls-cert and --tls-key (PEM files), or neither")
    if config_file is not None:
        from ..client import Client
        from ..declare import apply

        with Client(store_url or state.store) as client:
            for kind, name, result in apply(client, config_file):
                click.echo(f"{kind} {name}: {result}", err=True)
    gateway = None
    if tcp is not None or conf is not None:
        gateway = gateway_config(conf, tcp, auth_token, tls_cert, tls_key)
    run(
        store_url or state.store,
        host=host,
        port=port,
        config=config,
        insecure=insecure,
        access_log=access_log,
        log_level=log_level,
        log_format=log_format,
        keep_heap=keep_heap,
        gateway=gateway,
        tls_cert=tls_cert,
        tls_key=tls_key,
        request_timeout=request_timeout,
        workers=workers,
        unix=unix,
    )


class GatewayOverrides(TypedDict, total=False):
    """What the command line sets over the gateway's settings or its conf.json."""

    host: str
    port: int
    auth_token: str
    tls_cert: str
    tls_key: str | None


def gateway_config(
    conf: Path | None,
    listen: str | None,
    token: str | None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
) -> GatewayConfig:
    overrides: GatewayOverrides = {}
    if tls_cert is not None:
        overrides["tls_cert"] = tls_cert
        overrides["tls_key"] = tls_key
    if listen is not None:
        host, _, port = listen.rpartition(":")
        if not host or not port.isdigit():
            raise InvalidInput(f"{listen!r}: give HOST:PORT, like 127.0.0.1:1734")
        overrides["host"] = host.strip("[]")
        overrides["port"] = int(port)
    if token is not None:
        overrides["auth_token"] = token
    if conf is not None:
        return GatewayConfig.from_json(conf, **overrides)
    return GatewayConfig(**overrides)


@cli.command()
@click.option("--store", "store_url", help="Store URL (default: the global --store).")
@click.option(
    "--listen",
    metavar="HOST:PORT",
    help="Address to listen on (default: conf.json's listener_host/port, or 127.0.0.1:1734).",
)
@click.option(
    "--conf",
    type=click.Path(dir_okay=False, path_type=Path),
    help="SKMQ's conf.json: retry_times, ack_timeout (ms), rate, listener_host, listener_port.",
)
@click.option(
    "--auth-token",
    envvar="CONVEYOR_PUSH_TOKEN",
    help="Token every connection must give (an auth frame, or `token` when registering).",
)
@click.option("--insecure", is_flag=True, help="Allow a non-loopback address without a token.")
@click.option(
    "--tls-cert", type=click.Path(exists=True, dir_okay=False), help="Serve TLS: PEM certificate."
)
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), help="Its PEM key.")
@log_options
@click.pass_obj
def gateway(
    state: State,
    store_url: str | None,
    listen: str | None,
    conf: Path | None,
    auth_token: str | None,
    insecure: bool,
    tls_cert: str | None,
    tls_key: str | None,
    log_level: str,
    log_format: str,
) -> None:
    """Serve the SKMQ push gateway alone: producers send over TCP, registered consumers
    get messages pushed (docs/push.md). SIGTERM releases unanswered messages and exits 0."""
    import asyncio
    import logging
    import signal

    from ..client import Client
    from ..push.config import check_gateway_exposure
    from ..push.gateway import Gateway  # (the standard library alone: no server extra)
    from ..urls import described

    if (tls_cert is None) != (tls_key is None):
        raise InvalidInput("give both --tls-cert and --tls-key (PEM files), or neither")
    config = gateway_config(conf, listen, auth_token, tls_cert, tls_key)
    check_gateway_exposure(config, insecure)
    logs.setup(log_level, log_format)
    tuning.server_gc()
    url = store_url or state.store
    client = Client(url)
    client.list_queues()  # fail now, with the store's message, if it cannot be reached

    async def main() -> None:
        push = Gateway(client, config)
        try:
            await push.start()
        except OSError as exc:
            raise InvalidInput(
                f"cannot listen on {config.host}:{config.port}: {exc.strerror} (another server"
                " there? stop it, or choose another --listen port)"
            ) from None
        logging.getLogger("conveyor.push").info("on store %s", described(url))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await push.close()

    try:
        tuning.run(main())
    finally:
        client.close()
