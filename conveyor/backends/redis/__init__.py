"""Redis store: ``redis://[:password@]host:6379/0`` (``rediss://`` for TLS), on one Redis or a
Redis Cluster (found out on connecting).

Options (URL query): ``prefix`` (key prefix, default ``conveyor``, so deployments can share
a Redis), ``reconnect_timeout`` (seconds an operation waits out a lost server before it fails,
default 60), ``poll_interval`` (the long polls' safety net, default 1 s); anything else goes
to redis-py (``socket_timeout``, ``ssl_cert_reqs``, ...).

Implements the core, editing, topics and consumers, with every feature; no pipeline (Spark
jobs read a SQL store). Every operation that touches more than one key is one Lua script;
the keys of one queue share a hash tag (one cluster slot). Long polls wait in the process
and are woken by the sends' PUBLISH on one channel, or when the next invisible message
becomes visible.
"""

from __future__ import annotations

from urllib.parse import urlencode

from ...clock import Clock
from ...exceptions import InvalidInput
from ...urls import redact
from .store import RedisStore
from .values import check_prefix

__all__ = ["RedisStore", "from_url"]


def from_url(rest: str, params: dict[str, str], *, clock: Clock, tls: bool = False) -> RedisStore:
    params = dict(params)
    try:
        prefix = check_prefix(params.pop("prefix", "conveyor"))
        reconnect_timeout = float(params.pop("reconnect_timeout", 60))
        poll_interval = float(params.pop("poll_interval", 1.0))
    except ValueError as exc:
        raise InvalidInput(f"bad redis store option: {exc}") from None
    if not 0 < poll_interval <= 600:
        raise InvalidInput(f"poll_interval must be from 0 to 600 seconds, got {poll_interval}")
    scheme = "rediss" if tls else "redis"
    host = rest.split("/", 1)[0]
    if not host.rsplit("@", 1)[-1]:
        raise InvalidInput("redis URL needs a host: redis://127.0.0.1:6379/0")
    query = f"?{urlencode(params)}" if params else ""
    url = f"{scheme}://{rest}{query}"
    return RedisStore(
        url,
        display=redact(f"{scheme}://{rest}"),
        prefix=prefix,
        clock=clock,
        reconnect_timeout=reconnect_timeout,
        poll_interval=poll_interval,
    )


def from_tls_url(rest: str, params: dict[str, str], *, clock: Clock) -> RedisStore:
    return from_url(rest, params, clock=clock, tls=True)
