"""The push gateway's settings, and SKMQ's `conf.json` read into them."""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..exceptions import InvalidInput
from .codec import MAX_FRAME

if TYPE_CHECKING:
    import ssl

DEFAULT_PORT = 1734

# conf.json keys: SKMQ's (times in milliseconds, as SKMQ reads them) and Conveyor's additions
MS_KEYS = {
    "ack_timeout": "ack_timeout",
    "heartbeat_interval": "heartbeat_interval",
    "heartbeat_timeout": "heartbeat_timeout",
    "idle_timeout": "idle_timeout",
    "read_timeout": "read_timeout",
    "retry_delay": "retry_delay",
    "stall_timeout": "stall_timeout",
    "auth_timeout": "auth_timeout",
    "flow_wait": "flow_wait",
}
PLAIN_KEYS = {
    "retry_times": "retry_times",
    "rate": "rate",
    "listener_host": "host",
    "listener_port": "port",
    "auth_token": "auth_token",
    "tls_cert": "tls_cert",
    "tls_key": "tls_key",
    "prefetch": "prefetch",
    "max_frame": "max_frame",
    "max_connections": "max_connections",
    "flow_backlog": "flow_backlog",
}
IGNORED_KEYS = {"log_level"}  # SKMQ's; `conveyor --log-level` sets it


@dataclass(frozen=True)
class GatewayConfig:
    """How the gateway delivers. Times are in seconds (conf.json gives milliseconds)."""

    retry_times: int = 5
    """Rejections a message survives; the next one sends it to the app's dead-letter queue."""
    ack_timeout: float = 60.0
    """A pushed message not acknowledged within this is delivered again (its visibility)."""
    rate: float = 1000.0
    """Messages a second each app accepts (token bucket, a second's worth of burst); 0: no
    limit."""
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    auth_token: str | None = None
    """When set, every connection authenticates first (an `auth` frame, or `token` in the
    register frame's JSON)."""
    prefetch: int = 16
    """Messages pushed to one consumer and not yet answered, at most (a register frame can
    ask for another number)."""
    heartbeat_interval: float = 10.0
    """A consumer silent this long is pinged."""
    heartbeat_timeout: float = 10.0
    """A pinged consumer that does not answer within this is dropped."""
    idle_timeout: float = 300.0
    """A connection without a frame for this long is closed."""
    read_timeout: float = 30.0
    """A frame begun and not finished within this closes its connection."""
    dial_timeout: float = 5.0
    """Connecting to a consumer's own port (SKMQ's delivery mode) gives up after this."""
    retry_delay: float = 0.0
    """A rejected message is delivered again after this."""
    stall_timeout: float = 0.5
    """A consumer whose turn it is and who has had no room for this long is passed over (its
    share goes to the others) until it answers again; until then the others wait for it, so
    that shares follow the weights (shares.py)."""
    rate_wait: float = 5.0
    """A send waits this long at most for the rate limit; past it, it is rejected."""
    max_frame: int = MAX_FRAME
    max_connections: int = 10_000
    auth_timeout: float = 5.0
    """With `auth_token`, a connection that has not authenticated within this is closed;
    and at most a tenth of `max_connections` (at least one) wait to authenticate at once
    (a new one closes the one waiting longest), so connections that never authenticate
    cannot keep a producer with the token out."""
    tls_cert: str | None = None
    """Serve TLS with this PEM certificate (chain) and `tls_key`."""
    tls_key: str | None = None
    flow_backlog: int = 1000
    """Flow control: while the gateway's process is busy (half a core or more) and more than
    this many of the messages it stored for an app wait to be pushed, a producer's next
    frames are read once the pushes have caught up (`flow_wait` at most at a time), so that
    its time goes to the consumers before it takes more. Slow consumers leave the process
    idle and never hold producers back. 0: no flow control."""
    flow_wait: float = 0.5
    """Flow control holds a producer's next frames this long at most at a time."""

    def __post_init__(self) -> None:
        checks = (
            ("retry_times", self.retry_times >= 0),
            ("ack_timeout", 0 < self.ack_timeout <= 12 * 3600),
            ("rate", self.rate >= 0),
            ("port", 0 <= self.port <= 65535),
            ("prefetch", 1 <= self.prefetch <= 10_000),
            ("heartbeat_interval", self.heartbeat_interval > 0),
            ("heartbeat_timeout", self.heartbeat_timeout > 0),
            ("idle_timeout", self.idle_timeout > 0),
            ("read_timeout", self.read_timeout > 0),
            ("retry_delay", 0 <= self.retry_delay <= 12 * 3600),
            ("stall_timeout", 0 < self.stall_timeout <= 3600),
            ("max_frame", self.max_frame >= 1024),
            ("max_connections", self.max_connections >= 1),
            ("auth_timeout", 0 < self.auth_timeout <= 3600),
            ("flow_backlog", self.flow_backlog >= 0),
            ("flow_wait", 0 < self.flow_wait <= 60),
        )
        bad = [name for name, ok in checks if not ok]
        if bad:
            raise InvalidInput(
                "gateway settings out of range: "
                + ", ".join(f"{name}={getattr(self, name)!r}" for name in bad)
                + " (ack_timeout up to 12 h, prefetch 1..10000, flow_wait up to 60 s,"
                " times above 0, counts not negative)"
            )

    @classmethod
    def from_json(cls, path: Path | str, **overrides: Any) -> GatewayConfig:
        """Read SKMQ's conf.json: `retry_times`, `ack_timeout` (ms), `rate`,
        `listener_host`, `listener_port`, `log_level`, and Conveyor's own keys (times in ms).
        """
        try:
            data = json.loads(Path(path).read_text())
        except OSError as exc:
            raise InvalidInput(f"cannot read {path}: {exc.strerror}") from exc
        except ValueError as exc:
            raise InvalidInput(f"{path} is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise InvalidInput(f"{path} must hold a JSON object of settings")
        values: dict[str, Any] = {}
        for key, value in data.items():
            try:
                if key in MS_KEYS:
                    values[MS_KEYS[key]] = float(value) / 1000
                elif key in ("listener_port", "retry_times", "prefetch", "max_frame",
                             "max_connections", "flow_backlog"):  # fmt: skip
                    values[PLAIN_KEYS[key]] = int(value)  # SKMQ writes the port as a string
                elif key == "rate":
                    values["rate"] = float(value)
                elif key in PLAIN_KEYS:
                    values[PLAIN_KEYS[key]] = None if value is None else str(value)
                elif key not in IGNORED_KEYS:
                    known = sorted([*MS_KEYS, *PLAIN_KEYS, *IGNORED_KEYS])
                    raise InvalidInput(
                        f"{path}: unknown setting {key!r}; known: {', '.join(known)}"
                    )
            except (TypeError, ValueError) as exc:
                raise InvalidInput(f"{path}: {key}={value!r} is not a number") from exc
        config = cls(**values)
        known_fields = {f.name for f in fields(cls)}
        return replace(config, **{k: v for k, v in overrides.items() if k in known_fields})


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_gateway_exposure(config: GatewayConfig, insecure: bool) -> None:
    """Beyond loopback the push gateway needs an auth token, unless --insecure."""
    if is_loopback(config.host) or insecure or config.auth_token:
        return
    raise InvalidInput(
        f"the push gateway on {config.host} would be reachable beyond this machine: give"
        " --auth-token TOKEN (consumers send it when they register, producers in an auth"
        " frame), or --insecure to serve it without authentication"
    )


def server_tls(config: GatewayConfig) -> ssl.SSLContext | None:
    """The gateway's TLS context, or None to serve plain TCP."""
    if config.tls_cert is None:
        return None
    import ssl

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(config.tls_cert, config.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidInput(f"cannot load the TLS certificate {config.tls_cert}: {exc}") from exc
    return context
