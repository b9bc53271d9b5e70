"""Redis servers the tests start themselves, on loopback ports, in temporary directories:
one with an append-only file (to restart it), and a 3-master Redis Cluster. The machine's
own Redis (127.0.0.1:6379) is never touched."""

from __future__ import annotations

import atexit
import random
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .waiting import ephemeral_floor, logged, port_free

# each readiness check asks once: redis-py retries a refused password three times otherwise
ONCE = Retry(NoBackoff(), 0)


def cluster_ports(n: int) -> list[int]:
    """`n` ports free for servers, each with its cluster bus port (port + 10000) free too,
    and none of them the port or the bus port of another.

    They lie below the ephemeral range, so that no server another test starts on a port
    the kernel chose, nor a connection's local port, takes one of them between this check
    and the servers' start."""
    top = ephemeral_floor() - 10001
    bottom = 10000 if top >= 12000 else 20000
    top = max(top, bottom + 2000)
    ports: list[int] = []
    used: set[int] = set()  # the ports chosen, and their bus ports
    for _ in range(200 * n):
        port = random.randint(bottom, top)
        if {port, port + 10000} & used or not (port_free(port) and port_free(port + 10000)):
            continue
        ports.append(port)
        used.update((port, port + 10000))
        if len(ports) == n:
            return ports
    raise RuntimeError("no free port pairs for Redis servers")


def tails(logs: Iterable[tuple[str, Path]], chars: int = 2000) -> str:
    """The end of each named log file, one after another."""
    parts = []
    for name, log in logs:
        text = log.read_text(errors="replace")[-chars:] if log.exists() else "(no log)"
        parts.append(f"--- {name}:\n{text}")
    return "\n".join(parts)


def available() -> str | None:
    """None if redis-server and redis-cli are installed, else why not."""
    missing = [tool for tool in ("redis-server", "redis-cli") if shutil.which(tool) is None]
    return f"{' and '.join(missing)} (to start Redis servers)" if missing else None


class RedisServer:
    """One redis-server process; `options` are its command-line settings."""

    def __init__(self, root: Path, port: int, *options: str, tls: bool = False) -> None:
        self.root = root
        self.port = port
        self.options = options
        self.tls = tls  # `port` takes TLS connections alone (options give the certificates)
        self.proc: subprocess.Popen[bytes] | None = None
        root.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        ports = (
            ["--port", "0", "--tls-port", str(self.port)]
            if self.tls
            else ["--port", str(self.port)]
        )
        self.proc = logged(
            ["redis-server", "--bind", "127.0.0.1", *ports, "--dir",
             str(self.root), "--save", "", "--protected-mode", "no", *self.options],
            self.root / "redis.log", append=True,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while True:
            try:
                redis.Redis(
                    port=self.port, socket_connect_timeout=1, retry=ONCE, ssl=self.tls,
                    ssl_cert_reqs="none",
                ).ping()  # fmt: skip
                return
            except redis.exceptions.AuthenticationError:
                return  # it answers: it wants a password
            except redis.exceptions.BusyLoadingError:
                pass
            except redis.exceptions.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        "redis-server did not start:\n" + (self.root / "redis.log").read_text()
                    ) from None
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: what an acknowledged write survives is what was on disk."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Cluster:
    """Three masters, no replicas; every slot covered."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="conveyor-redis-cluster-"))
        options = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
        self.nodes = [
            RedisServer(self.root / f"n{i}", port, *options, "--appendonly", "no")
            for i, port in enumerate(cluster_ports(3))
        ]

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        made = subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
             "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True,
            timeout=120,
        )  # fmt: skip
        if made.returncode != 0:
            output = (made.stdout + made.stderr).decode(errors="replace")[-2000:]
            raise RuntimeError(f"redis-cli --cluster create failed:\n{output}")
        deadline = time.monotonic() + 60
        while True:
            states = [redis.Redis(port=n.port).cluster("info")["cluster_state"] for n in self.nodes]
            if all(state == "ok" for state in states):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster did not come up: {states}")
            time.sleep(0.1)

    def logs(self) -> str:
        """The end of each node's log, to tell why a start failed."""
        return tails(
            ((f"node on port {n.port}", n.root / "redis.log") for n in self.nodes), chars=1500
        )

    def stop(self) -> None:
        for node in self.nodes:
            node.kill()
        shutil.rmtree(self.root, ignore_errors=True)


class Sentinels:
    """A master, its replica and three Sentinels watching them (quorum 2, a master
    unanswering for a second is down). An election the Sentinels split between themselves
    is held again after twice the failover timeout: 2 s here (Redis's default is 3
    minutes), so that a loaded machine's split votes cost seconds, not the test."""

    SERVICE = "conveyor"

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="conveyor-redis-sentinel-"))
        master, replica, *self.sentinel_ports = cluster_ports(5)
        self.master = RedisServer(self.root / "master", master, "--appendonly", "no")
        self.replica = RedisServer(
            self.root / "replica", replica, "--appendonly", "no",
            "--replicaof", "127.0.0.1", str(master),
        )  # fmt: skip
        self.sentinels: list[subprocess.Popen[bytes]] = []

    def url(self, query: str) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis://{hosts}/0?sentinel={self.SERVICE}&{query}"

    def start(self) -> None:
        self.master.start()
        self.replica.start()
        for i, port in enumerate(self.sentinel_ports):
            conf = self.root / f"sentinel{i}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.root}\n"
                f"sentinel monitor {self.SERVICE} 127.0.0.1 {self.master.port} 2\n"
                f"sentinel down-after-milliseconds {self.SERVICE} 1000\n"
                f"sentinel failover-timeout {self.SERVICE} 2000\n"
            )
            self.sentinels.append(
                logged(
                    ["redis-server", str(conf), "--sentinel"],
                    self.root / f"sentinel{i}.log",
                    append=True,
                )
            )
        # ready once each Sentinel knows the replica and the two other Sentinels
        deadline = time.monotonic() + 30
        for port in self.sentinel_ports:
            while True:
                try:
                    sentinel: Any = redis.Redis(port=port, socket_timeout=1)
                    state = sentinel.sentinel_master(self.SERVICE)
                    if state["num-slaves"] >= 1 and state["num-other-sentinels"] >= 2:
                        break
                except redis.exceptions.RedisError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the Sentinels did not come up (port {port})")
                time.sleep(0.2)

    def master_port(self) -> int:
        sentinel: Any = redis.Redis(port=self.sentinel_ports[0])
        _, port = sentinel.sentinel_get_master_addr_by_name(self.SERVICE)
        return int(port)

    def logs(self) -> str:
        """The end of each Sentinel's log: its view of the master, votes and elections."""
        return tails(
            (f"Sentinel on port {port}", self.root / f"sentinel{i}.log")
            for i, port in enumerate(self.sentinel_ports)
        )

    def stop(self) -> None:
        for proc in self.sentinels:
            proc.kill()
            proc.wait()
        self.master.kill()
        self.replica.kill()
        shutil.rmtree(self.root, ignore_errors=True)


_cluster: Cluster | None = None
_cluster_failed: str | None = None  # why this session's cluster could not be started


def cluster_url() -> str:
    """The URL of this test session's cluster, started on first use and stopped at exit.

    A start that fails (a port taken between its check and the server's start, a machine
    too loaded for the cluster to settle in time) is tried again on fresh ports, twice;
    after three failures every later call raises the first call's error at once."""
    global _cluster, _cluster_failed
    if _cluster is not None:
        return _cluster.url
    if _cluster_failed is not None:
        raise RuntimeError(_cluster_failed)
    errors: list[str] = []
    for _ in range(3):
        cluster = Cluster()
        try:
            cluster.start()
        except (RuntimeError, OSError, subprocess.SubprocessError, redis.RedisError) as e:
            errors.append(f"{type(e).__name__}: {e}\n{cluster.logs()}")
            cluster.stop()
            continue
        _cluster = cluster
        atexit.register(cluster.stop)
        return cluster.url
    _cluster_failed = "the Redis Cluster did not start in three tries:\n" + "\n".join(errors)
    raise RuntimeError(_cluster_failed)


def stop_cluster() -> None:
    global _cluster
    if _cluster is not None:
        _cluster.stop()
        _cluster = None
