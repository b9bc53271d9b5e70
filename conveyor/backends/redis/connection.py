"""The Redis store's connection: the client (made on first use; a `RedisCluster` where the
server is a cluster; the master that Redis Sentinel names with ``sentinel=SERVICE``), its
scripts, retries while the server is away, and the channel that wakes this process's long
polls when another client sends."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import hiredis  # redis-py's C reply parser and command packer (the [redis] extra)
import redis
from redis.cluster import RedisCluster
from redis.sentinel import Sentinel

from ...exceptions import StoreUnavailable
from ...forks import renew_after_fork, renewed
from ...notify import HUB
from .layout import ensure_layout
from .scripts import Scripts

log = logging.getLogger("conveyor.store")

T = TypeVar("T")

# what a lost connection, a restarting server, a resharding cluster or a failover raise (all
# retried; a replica refuses a write before running any of it: READONLY)
RETRIED = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.BusyLoadingError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ReadOnlyError,
)


SENTINEL_PORT = 26379


class InDoubt(redis.exceptions.ConnectionError):
    """A request was written and its connection then failed: it may have run."""


def _lost(exc: BaseException) -> bool:
    return isinstance(exc, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError))


def open_client(url: str) -> Any:
    """A client of the Redis the URL names; with ``sentinel=SERVICE`` in its query, the
    URL's hosts (``host:port,host:port``) are Redis Sentinels, and the client is of the
    master they say serves SERVICE: each new connection asks them, so that after a failover
    the store's connections (replaced as they fail) reach the promoted replica."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    service = next((v for k, v in query if k == "sentinel"), None)
    if service is None:
        return redis.Redis.from_url(url)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    sentinels = []
    for spec in hosts.split(","):
        host, colon, port = spec.rpartition(":")
        if not colon or host.endswith(":"):  # no port, or a bare IPv6 address
            host, port = spec, str(SENTINEL_PORT)
        sentinels.append((host.strip("[]"), int(port)))
    rest = urlencode([(k, v) for k, v in query if k != "sentinel"])
    # the master's settings (password, database, timeouts), read by redis-py's own parser
    netloc = f"{userinfo}@sentinel" if userinfo else "sentinel"
    parse: Any = redis.connection.parse_url  # redis-py's functions here are untyped
    settings = parse(urlunsplit((parts.scheme, netloc, parts.path, rest, "")))
    for key in ("host", "port", "connection_class"):
        settings.pop(key, None)
    if parts.scheme == "rediss":
        settings["ssl"] = True
    timeouts = {"socket_timeout": 2.0, "socket_connect_timeout": 2.0}
    sentinel: Any = Sentinel
    return sentinel(sentinels, sentinel_kwargs=timeouts).master_for(service, **settings)


AUTH_HINT = "give the URL the server's current password (and user, where it has ACL users)"


def _what_to_do(exc: BaseException, otherwise: str) -> str:
    """Advice for an error that kept the store from the server."""
    if isinstance(exc, redis.exceptions.AuthenticationError):
        return f"check the URL: {AUTH_HINT}"
    if "max number of clients" in str(exc):  # the server's maxclients, all in use
        return (
            "the server has no connections to spare: raise its maxclients, or run fewer"
            " processes against it"
        )
    return otherwise


def major_version(info: dict[str, Any]) -> int:
    """The server's major version from its INFO (0 where it does not say)."""
    try:
        return int(str(info.get("redis_version", "0")).split(".")[0])
    except ValueError:
        return 0


def warn_of_eviction(display: str, policy: Any) -> None:
    """Log a warning where the server may evict keys when full: it would take messages, or
    whole queues, without a word. (A server that does not say, such as a cluster's proxy,
    is taken at its word.)"""
    if policy is not None and policy != "noeviction":
        log.warning(
            "redis store %s has maxmemory-policy %s: when it is full, Redis deletes keys, and"
            " messages or whole queues with them; set maxmemory-policy noeviction (a full"
            " server then refuses new messages and goes on serving receives and deletes)",
            display, policy,
        )  # fmt: skip


class RedisConnection:
    def __init__(
        self,
        url: str,
        *,
        display: str,
        prefix: str,
        registry: str,
        channel: str,
        reconnect_timeout: float,
    ) -> None:
        self.url = url
        self.display = display
        self.prefix = prefix
        self.registry_key = registry  # the registry's keys start with this ("{prefix}:")
        self.channel = channel
        self.reconnect_timeout = reconnect_timeout
        self.cluster = False
        self._client: Any = None
        self._scripts: Scripts | None = None
        self._closed = threading.Event()
        self._connections()
        self.layout_found = 0  # the store's layout when first connected (layout.py)
        renew_after_fork(self)

    def _connections(self) -> None:
        self._idle: list[Any] = []  # connections of `_evalsha` (pop and append are atomic)
        self._lock = threading.Lock()
        self._listener: threading.Thread | None = None
        self._listening = threading.Event()

    def forked(self) -> None:
        """A forked child: the parent's connections of `_evalsha` and its listener
        forgotten (forks.py); the client's pool renews its own in a child."""
        self._closed = renewed(self._closed)
        self._connections()

    def client(self) -> Any:
        """The client, made on first use."""
        if self._client is not None:
            return self._client
        with self._lock:
            if self._client is None:
                try:
                    client: Any = open_client(self.url)
                    info = client.info()  # server, memory and cluster among its sections
                    cluster = info.get("cluster_enabled") == 1
                    if cluster:
                        client.close()
                        client = RedisCluster.from_url(self.url)
                    warn_of_eviction(self.display, info.get("maxmemory_policy"))
                    scripts = Scripts(client, flags=major_version(info) >= 7)
                    if not cluster:
                        self._load_library(client, scripts)
                    upgrade = scripts.by_name["upgrade"]
                    self.layout_found = ensure_layout(
                        client, self.registry_key, self.prefix, upgrade
                    )
                except redis.exceptions.RedisError as exc:
                    hint = _what_to_do(
                        exc, "check the URL, and that the server is running and reachable"
                    )
                    raise StoreUnavailable(
                        f"cannot connect to redis store {self.display}: {exc} ({hint})"
                    ) from exc
                self._scripts = scripts
                self.cluster = cluster
                self._client = client
        return self._client

    def run(self, fn: Callable[[Any], T], settle: Callable[[Any], T] | None = None) -> T:
        """Run `fn` on the client; on a lost connection, a loading or resharding server, run
        it again for up to `reconnect_timeout` seconds. Claims, deletes and visibility
        changes are safe to run again (they carry their tokens, and a claim whose answer
        was lost only keeps its messages until their visibility timeout). A send is not,
        once its request was written (its messages may have been stored, received and
        deleted since): after that, `settle` runs instead, and says what the first attempt
        did or raises OutcomeUnknown."""
        client = self.client()
        lost_at: float | None = None
        delay = 0.02
        doubt = False
        while True:
            try:
                result = settle(client) if doubt and settle is not None else fn(client)
            except redis.exceptions.AuthenticationError as exc:  # a ConnectionError, not lost
                raise StoreUnavailable(
                    f"redis store {self.display} refused the store's credentials ({exc}):"
                    f" {AUTH_HINT}"
                ) from exc
            except RETRIED as exc:
                # on a cluster, redis-py cannot say whether the request was written
                doubt = doubt or isinstance(exc, InDoubt) or (self.cluster and _lost(exc))
                replica = isinstance(exc, redis.exceptions.ReadOnlyError)
                if replica:
                    self._failed_over()
                now = time.monotonic()
                if lost_at is None:
                    lost_at = now
                    if replica:
                        log.warning(
                            "%s answered as a replica (%s); reconnecting", self.display, exc
                        )
                    else:
                        log.warning("lost the connection to %s (%s); retrying", self.display, exc)
                elif now - lost_at > self.reconnect_timeout:
                    if replica:
                        raise StoreUnavailable(
                            f"redis store {self.display} has answered as a read-only replica"
                            f" for {now - lost_at:.0f} s: give the URL the master's address,"
                            " or its Sentinels' (sentinel=SERVICE)"
                        ) from exc
                    raise StoreUnavailable(
                        f"redis store {self.display} has been unreachable for"
                        f" {now - lost_at:.0f} s ({exc}):"
                        f" {_what_to_do(exc, 'check that the server is running')}"
                    ) from exc
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 1.0)
                continue
            except redis.exceptions.OutOfMemoryError as exc:
                raise StoreUnavailable(
                    f"redis store {self.display} is full ({exc}): it takes no new messages"
                    " until there is room, while receives and deletes go on; raise the"
                    " server's maxmemory, or drain or purge queues"
                ) from exc
            except redis.exceptions.RedisError as exc:
                raise StoreUnavailable(f"redis store {self.display} failed: {exc}") from exc
            if lost_at is not None:
                log.warning(
                    "reconnected to %s after %.1f s", self.display, time.monotonic() - lost_at
                )
            return result

    def script(
        self,
        name: str,
        keys: Sequence[str],
        args: Sequence[Any],
        settle: Callable[[Any], Any] | None = None,
    ) -> Any:
        """Run a script whose keys are `keys` (all in one slot); `settle` as in `run`."""
        return self.run_script(self._loaded().by_name[name], keys, args, settle)

    def registry(self, *args: Any) -> Any:
        """Run an operation of the registry script."""
        keys = [f"{self.registry_key}queues"]
        return self.run_script(self._loaded().registry, keys, [self.registry_key, *args])

    def run_script(
        self,
        script: Any,
        keys: Sequence[str],
        args: Sequence[Any],
        settle: Callable[[Any], Any] | None = None,
    ) -> Any:
        """Run a registered script (`redis.commands.core.Script`): on a cluster through
        redis-py, which routes it to its slot's node; on one server by `_evalsha`."""
        if self.cluster:
            return self.run(lambda client: script(keys, args, client), settle)
        return self.run(lambda client: self._evalsha(script, keys, args), settle)

    def _evalsha(self, script: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """EVALSHA on a connection of this process's own, straight from the connection:
        redis-py's command path (pool checkout and health check, retry wrapper, metrics
        hooks) costs twice the CPU of the round trip itself. An idle connection the server
        closed (its `timeout`, a restart) is found so before anything is written to it; one
        whose request or reply failed midway is closed, never reused, and the failure is
        `InDoubt`; a server that lost the script (a restart, SCRIPT FLUSH) gets it again."""
        conn = self._take()
        try:
            reply = self._call(conn, script, keys, args)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            conn.disconnect()
            raise InDoubt(f"{exc} (the request was written: it may have run)") from exc
        except redis.exceptions.ReadOnlyError:
            conn.disconnect()  # a replica now: a new connection finds the master
            raise
        except redis.exceptions.ResponseError:
            self._idle.append(conn)  # the error was the whole reply: the connection is in step
            raise
        except BaseException:
            conn.disconnect()
            raise
        self._idle.append(conn)
        return reply

    def _failed_over(self) -> None:
        """The server answered READONLY: it is a replica now, after a failover behind an
        address that names the master (a DNS name, a proxy, a load balancer; a Sentinel's
        connections find the new master themselves). Its idle connections are closed, so
        that the next ones are made afresh and reach the master; the connections busy in
        other threads follow when their own writes are refused."""
        while self._idle:
            self._idle.pop().disconnect()
        if not self.cluster and self._client is not None:
            self._client.connection_pool.disconnect(inuse_connections=False)

    def _take(self) -> Any:
        """An idle connection still open and in step (nothing waiting on it: ~2 us to ask),
        or a new one."""
        idle = self._idle
        while idle:
            conn = idle.pop()
            try:
                if not conn.can_read(0):
                    return conn
            except (redis.exceptions.ConnectionError, OSError):
                pass  # closed by the server while idle
            conn.disconnect()
        return self._connect()

    def _connect(self) -> Any:
        """A connection of `_evalsha`'s own, made with the pool's settings but not by the
        pool: the pool counts each connection it makes against its limit (100) until it is
        given back, and these never are, so ones replaced after failures would use the
        limit up and every later call would fail with "Too many connections"."""
        pool = self._client.connection_pool
        conn = pool.connection_class(**pool.connection_kwargs)
        # connected here: a Sentinel's connection finds its master in `connect`, which a
        # first send would pass by (and reach the default localhost:6379)
        conn.connect()
        return conn

    def _loaded(self) -> Scripts:
        self.client()
        assert self._scripts is not None
        return self._scripts

    def _call(self, conn: Any, script: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        scripts = self._scripts
        function = scripts.functions.get(script.sha) if scripts is not None else None
        if function is not None:
            try:
                return _request(conn, "FCALL", function, len(keys), *keys, *args)
            except redis.exceptions.ResponseError as exc:
                if "function not found" not in str(exc).lower():
                    raise
                # the server lost the library (a restart, FUNCTION FLUSH)
                assert scripts is not None
                self._load_library(self._client, scripts)
                return _request(conn, "FCALL", function, len(keys), *keys, *args)
        try:
            return _request(conn, "EVALSHA", script.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            script.sha = self._client.script_load(script.script)
            return _request(conn, "EVALSHA", script.sha, len(keys), *keys, *args)

    @staticmethod
    def _load_library(client: Any, scripts: Scripts) -> None:
        """Load the scripts' library where the server has functions (Redis 7 and later); the
        scripts stay plain scripts elsewhere."""
        try:
            client.function_load(scripts.library)
        except redis.exceptions.ResponseError as exc:
            text = str(exc).lower()
            if "already exists" not in text:
                # no FUNCTION command (Redis 6), or one an ACL or a rename withholds
                log.debug("redis functions unavailable (%s): calling scripts by SHA", exc)
                return
        scripts.use_functions()

    def close(self) -> None:
        self._closed.set()
        listener = self._listener
        if listener is not None and listener is not threading.current_thread():
            listener.join(3.0)  # it looks at the flag at least once a second
        with self._lock:
            while self._idle:
                self._idle.pop().disconnect()
            if self._client is not None:
                self._client.close()
                self._client = None

    # -- the wake-up channel --------------------------------------------------------------

    def listen(self, key: str) -> None:
        """Start hearing the channel (once): each message wakes the waiters of its queue in
        this process (`HUB`, under store key `key`)."""
        if self._listener is None:
            with self._lock:
                if self._listener is None:
                    self._listener = threading.Thread(
                        target=self._subscribe, args=(key,), name="conveyor-redis-listen",
                        daemon=True,
                    )  # fmt: skip
                    self._listener.start()
            self._listening.wait(1.0)

    def _subscribe(self, key: str) -> None:
        delay = 0.1
        lost = False
        while not self._closed.is_set():
            try:
                pubsub = self.client().pubsub(ignore_subscribe_messages=True)
                try:
                    pubsub.subscribe(self.channel)
                    self._listening.set()
                    if lost:
                        log.warning("listening for sends on %s again", self.display)
                        HUB.wake_all()  # sends may have gone unheard while the link was down
                    lost, delay = False, 0.1
                    while not self._closed.is_set():
                        note = pubsub.get_message(timeout=1.0)
                        if note is not None:
                            HUB.notify(key, note["data"].decode())
                finally:
                    pubsub.close()
            except (redis.exceptions.RedisError, StoreUnavailable) as exc:
                if self._closed.is_set():
                    return
                if not lost:
                    log.warning(
                        "lost the channel of %s (%s); long polls fall back to polling",
                        self.display,
                        exc,
                    )
                lost = True
                self._closed.wait(delay)
                delay = min(delay * 2, 2.0)


def _request(conn: Any, *command: Any) -> Any:
    """Send one command on a connection of the store's own and read its reply: packed by
    hiredis straight from the arguments (redis-py's packer looks at each argument's type
    first, a tenth of the client's time per call), without the pool's health check."""
    conn.send_packed_command([hiredis.pack_command(command)], check_health=False)
    return conn.read_response()
