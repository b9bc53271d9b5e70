"""`conveyor serve --trusted-proxy`: who may say where a request really came from.

Behind a reverse proxy the server sees the proxy's address, and the scheme and Host the
proxy used to reach it. The proxy says what the client used in `Forwarded` (RFC 7239) or
`X-Forwarded-For`/`-Proto`/`-Host`/`-Port`; the server believes those headers only from the
addresses given with `--trusted-proxy`, and then takes them as the request's own: queue URLs
are built from the client's scheme and host, SigV4 signatures are checked against the host
the client signed, and the dashboard sees the client's address. From anyone else they are
ignored: a client cannot make the server build its URLs on a name of the client's choosing.

Each proxy appends the address it received the request from. Reading from the right, every
hop added by a trusted address is believed, and the first untrusted address is the client.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from starlette.types import Scope

from ...exceptions import InvalidInput

__all__ = ["UNIX", "Forwarded", "TrustedProxies"]

UNIX = "unix"  # the --trusted-proxy that trusts peers on the server's Unix socket
FORWARDED_HEADERS = ("forwarded", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host")

# a host as a URL may carry it: a name or an IPv4 address, or a bracketed IPv6 address, with
# an optional port; nothing that could end the authority part of a URL or add to it
_HOST = re.compile(r"(?:[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")
_SCHEMES = ("http", "https")
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Hop:
    """One proxy's word about the request it passed on."""

    client: str | None  # the address it received the request from (`for`)
    scheme: str | None  # `proto`
    host: str | None  # `host`: the Host the request had when it arrived there


@dataclass(frozen=True)
class Forwarded:
    """The request as the client made it."""

    scheme: str
    host: str | None  # None: the Host header the server received is the client's
    client: str | None  # the client's address, None where a hop hid it


class TrustedProxies:
    """The addresses (`--trusted-proxy`: an IP address, a network like 10.0.0.0/8, or
    `unix` for the server's Unix socket) whose forwarding headers are believed."""

    def __init__(self, specs: Iterable[str] = ()) -> None:
        self.networks: list[Network] = []
        self.unix = False
        for spec in specs:
            spec = spec.strip()
            if spec == UNIX:
                self.unix = True
                continue
            try:
                self.networks.append(ipaddress.ip_network(spec, strict=False))
            except ValueError:
                raise InvalidInput(
                    f"--trusted-proxy {spec!r} is not an IP address or network: give the"
                    " proxy's address (127.0.0.1), a network (10.0.0.0/8), or unix for peers"
                    " on --unix's socket"
                ) from None

    def __bool__(self) -> bool:
        return self.unix or bool(self.networks)

    def trusts(self, peer: str | None) -> bool:
        """Whether `peer` (an address; None for a Unix socket's peer) is a trusted proxy."""
        if peer is None:
            return self.unix
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False  # "unknown", an obfuscated name: not an address this trusts
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.networks)

    def resolve(
        self, scheme: str, headers: Mapping[str, str], peer: str | None
    ) -> Forwarded | None:
        """The request as its client made it, from a trusted peer's forwarding headers;
        None when the peer is not trusted or said nothing."""
        if not self.trusts(peer):
            return None
        hops = _hops(headers)
        if not hops:
            return None
        host: str | None = None
        client = peer
        for hop in reversed(hops):
            if hop.scheme is not None:
                scheme = hop.scheme
            if hop.host is not None:
                host = hop.host
            client = hop.client
            if not self.trusts(client):
                break
        return Forwarded(scheme=scheme, host=host, client=client)


def has_forwarding(headers: Mapping[str, str]) -> bool:
    return any(name in headers for name in FORWARDED_HEADERS)


def _hops(headers: Mapping[str, str]) -> list[Hop]:
    """The hops, the client's side first: from `Forwarded` when present, else from the
    X-Forwarded-* headers (whose lists line up from the right: the nearest proxy's last)."""
    forwarded = headers.get("forwarded")
    if forwarded is not None:
        return [_hop(element) for element in _split(forwarded, ",")]
    fors = _list(headers.get("x-forwarded-for"))
    protos = _list(headers.get("x-forwarded-proto"))
    hosts = _list(headers.get("x-forwarded-host"))
    ports = _list(headers.get("x-forwarded-port"))
    count = max(len(fors), len(protos), len(hosts))
    hops: list[Hop] = []
    for i in range(count):  # i-th from the right
        scheme = _scheme(_at(protos, i))
        host = _host(_at(hosts, i))
        port = _at(ports, i)
        if (
            host is not None
            and port is not None
            and port.isdigit()
            and not _has_port(host)
            and (scheme, port) not in (("http", "80"), ("https", "443"))
        ):
            host = f"{host}:{port}"
        hops.append(Hop(client=_node(_at(fors, i)), scheme=scheme, host=host))
    hops.reverse()
    return hops


def _hop(element: str) -> Hop:
    pairs: dict[str, str] = {}
    for pair in _split(element, ";"):
        key, eq, value = pair.partition("=")
        if eq:
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = re.sub(r"\\(.)", r"\1", value[1:-1])
            pairs.setdefault(key.strip().lower(), value)
    return Hop(
        client=_node(pairs.get("for")),
        scheme=_scheme(pairs.get("proto")),
        host=_host(pairs.get("host")),
    )


def _split(value: str, sep: str) -> list[str]:
    """`value` split at `sep` outside quoted strings."""
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for ch in value:
        if escaped:
            escaped = False
        elif quoted and ch == "\\":
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == sep and not quoted:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    parts.append("".join(current).strip())
    return [p for p in parts if p]


def _list(value: str | None) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()] if value else []


def _at(values: list[str], from_right: int) -> str | None:
    return values[-1 - from_right] if from_right < len(values) else None


def _node(value: str | None) -> str | None:
    """The address of a `for` node: without its port or brackets."""
    if not value:
        return None
    if value.startswith("["):
        end = value.find("]")
        return value[1:end] if end > 0 else None
    if value.count(":") == 1:  # IPv4 with a port (a bare IPv6 address has several)
        value = value.partition(":")[0]
    return value


def _scheme(value: str | None) -> str | None:
    value = value.lower() if value else None
    return value if value in _SCHEMES else None


def _host(value: str | None) -> str | None:
    return value if value and len(value) <= 261 and _HOST.fullmatch(value) else None


def _has_port(host: str) -> bool:
    return host.rpartition("]")[2].count(":") == 1 if host.startswith("[") else ":" in host


def peer_of(scope: Scope) -> str | None:
    """The address of the connection's other end; None on a Unix socket."""
    client = scope.get("client")
    return str(client[0]) if client else None


def scope_with(scope: Scope, view: Forwarded) -> Scope:
    """An ASGI scope as the client's request: its scheme, Host and address."""
    scope = dict(scope)
    scope["scheme"] = view.scheme
    if view.client is not None:
        scope["client"] = (view.client, 0)
    if view.host is not None:
        raw: list[tuple[bytes, bytes]] = [
            (k, v) for k, v in scope.get("headers", ()) if k.lower() != b"host"
        ]
        raw.append((b"host", view.host.encode("latin-1")))
        scope["headers"] = raw
    return scope
