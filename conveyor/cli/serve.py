"""`conveyor serve`: the HTTP server."""

from __future__ import annotations

from pathlib import Path

import click

from ..exceptions import InvalidInput
from .app import State, cli


@cli.command()
@click.option("--store", "store_url", help="Store URL (default: the global --store).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=9324, show_default=True, type=click.IntRange(0, 65535))
@click.option("--auth-token", envvar="CONVEYOR_AUTH_TOKEN", help="Bearer token for REST.")
@click.option(
    "--aws-credentials",
    type=click.Path(dir_okay=False, path_type=Path),
    help="AWS credentials file: SQS requests must be SigV4-signed by one of its keys.",
)
@click.option("--insecure", is_flag=True, help="Allow a non-loopback address without auth.")
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
@click.option(
    "--keep-heap",
    is_flag=True,
    help="Keep freed memory in the process (glibc): faster SQLite receives; see docs/stores.md.",
)
@click.pass_obj
def serve(
    state: State,
    store_url: str | None,
    host: str,
    port: int,
    auth_token: str | None,
    aws_credentials: Path | None,
    insecure: bool,
    region: str,
    account: str,
    statsd: str | None,
    statsd_prefix: str,
    max_body: int,
    access_log: bool,
    keep_heap: bool,
) -> None:
    """Serve the SQS wire API, the REST API and /metrics over HTTP.

    SQS clients work unchanged with an endpoint URL: for boto3,
    boto3.client("sqs", endpoint_url="http://127.0.0.1:9324"). SIGTERM finishes the
    requests in flight, ends long polls early and exits 0.
    """
    from ..server import ServerConfig
    from ..server import serve as run
    from ..server.auth import load_credentials
    from ..server.sqs_names import ACCOUNT_RE, REGION_RE

    if not REGION_RE.fullmatch(region):
        raise InvalidInput(f"--region {region!r} is not a region name (like us-east-1)")
    if not ACCOUNT_RE.fullmatch(account):
        raise InvalidInput(f"--account {account!r} must be 12 digits")
    if statsd is not None:
        h, _, p = statsd.rpartition(":")
        if not h or not p.isdigit():
            raise InvalidInput(f"--statsd {statsd!r}: give HOST:PORT, like 127.0.0.1:8125")
    config = ServerConfig(
        max_body=max_body,
        region=region,
        account=account,
        auth_token=auth_token,
        aws_keys=load_credentials(aws_credentials) if aws_credentials else {},
        statsd=statsd,
        statsd_prefix=statsd_prefix,
    )
    run(
        store_url or state.store,
        host=host,
        port=port,
        config=config,
        insecure=insecure,
        access_log=access_log,
        keep_heap=keep_heap,
    )
