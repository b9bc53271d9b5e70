"""The Redis store against hand-written redis-py queues: ``python -m bench.redis [--quick]``.

1 producer + 4 consumer processes (and one process alone), single messages and batches of
10, 100-byte bodies, on the Redis named by ``--redis``. Baselines, in the same run:
a Streams consumer group (XADD; XREADGROUP; XACK + XDEL) and a reliable list queue (LPUSH;
LMOVE to a processing list; LREM), each a pipeline per call. They have no visibility
timeouts, receipts, priorities, delays or dead letters; the store has all of them. Prints
msgs/s with p50/p99 latency and the store's share of the Streams baseline (target: >= 60%
end to end in 1P+4C). See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
from collections.abc import Sequence
from typing import Any

import redis

from conveyor.tuning import keep_heap

from .drivers import ConveyorDriver, Driver
from .runs import alternate, run_multi, run_single


class _RedisDriver(Driver):
    def __init__(self, name: str, url: str, key: str) -> None:
        self.name = name
        self.url = url
        self.key = key
        self._client: Any = None

    @property
    def r(self) -> Any:
        if self._client is None:
            self._client = redis.Redis.from_url(self.url)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def drop(self) -> None:
        self.r.delete(self.key, f"{self.key}:processing")
        self.close()


class StreamsBaseline(_RedisDriver):
    """A consumer group: each consumer reads new entries, acknowledges and deletes them."""

    GROUP = "g"

    def setup(self) -> None:
        self.r.delete(self.key)
        self.r.xgroup_create(self.key, self.GROUP, id="$", mkstream=True)
        self.close()

    def send(self, bodies: Sequence[bytes]) -> None:
        if len(bodies) == 1:
            self.r.xadd(self.key, {"b": bodies[0]})
            return
        pipe = self.r.pipeline(transaction=False)
        for b in bodies:
            pipe.xadd(self.key, {"b": b})
        pipe.execute()

    def receive(self, n: int) -> list[tuple[object, bytes]]:
        got = self.r.xreadgroup(self.GROUP, f"c{os.getpid()}", {self.key: ">"}, count=n)
        if not got:
            return []
        [(_, entries)] = got
        return [(entry_id, fields[b"b"]) for entry_id, fields in entries]

    def delete(self, handles: Sequence[object]) -> None:
        pipe = self.r.pipeline(transaction=False)
        pipe.xack(self.key, self.GROUP, *handles)
        pipe.xdel(self.key, *handles)
        pipe.execute()


class ListsBaseline(_RedisDriver):
    """The reliable-queue pattern: LMOVE to a processing list, LREM once handled."""

    def setup(self) -> None:
        self.r.delete(self.key, f"{self.key}:processing")
        self.close()

    def send(self, bodies: Sequence[bytes]) -> None:
        self.r.lpush(self.key, *bodies)

    def receive(self, n: int) -> list[tuple[object, bytes]]:
        if n == 1:
            b = self.r.lmove(self.key, f"{self.key}:processing", "RIGHT", "LEFT")
            return [] if b is None else [(b, b)]
        pipe = self.r.pipeline(transaction=False)
        for _ in range(n):
            pipe.lmove(self.key, f"{self.key}:processing", "RIGHT", "LEFT")
        return [(b, b) for b in pipe.execute() if b is not None]

    def delete(self, handles: Sequence[object]) -> None:
        if len(handles) == 1:
            self.r.lrem(f"{self.key}:processing", 1, handles[0])
            return
        pipe = self.r.pipeline(transaction=False)
        for h in handles:
            pipe.lrem(f"{self.key}:processing", 1, h)
        pipe.execute()


def _libraries(url: str) -> set[str]:
    """The function libraries a server holds (the store loads its scripts as one)."""
    r = redis.Redis.from_url(url)
    try:
        return {
            dict(zip(e[::2], e[1::2], strict=True))[b"library_name"].decode()
            for e in r.function_list()
        }
    except redis.exceptions.ResponseError:  # a server without functions
        return set()
    finally:
        r.close()


def _drop_store(url: str, prefix: str, libraries: set[str]) -> None:
    """Delete the store's keys, and the library it loaded if the server had none before."""
    r = redis.Redis.from_url(url)
    for pattern in (f"{prefix}:*", f"{{{prefix}}}:*"):
        for key in list(r.scan_iter(match=pattern, count=1000)):
            r.delete(key)
    for name in _libraries(url) - libraries:
        if name.startswith("conveyor_"):
            r.function_delete(name)
    r.close()


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.redis", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer messages (a smoke run)")
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--modes", default="1P+4C,1 proc")
    ap.add_argument("--messages", type=int, default=10000)
    ap.add_argument(
        "--repeat", type=int, default=3, help="rounds per row, drivers in turn; the median is shown"
    )
    args = ap.parse_args()
    keep_heap()  # as in the other benchmarks (and `conveyor serve --keep-heap`)
    libraries = _libraries(args.redis)
    tag = secrets.token_hex(3)
    prefix = f"bench{tag}"
    store = ConveyorDriver("redis store", f"{args.redis}?prefix={prefix}")
    streams = StreamsBaseline("streams baseline", args.redis, f"bench{tag}:stream")
    lists = ListsBaseline("lists baseline", args.redis, f"bench{tag}:list")
    drivers: list[Driver] = [store, streams, lists]
    n_base = args.messages // 4 if args.quick else args.messages
    print(
        f"# Redis store vs hand-written redis-py queues — {platform.platform()},"
        f" {os.cpu_count()} CPUs, Redis {redis.Redis.from_url(args.redis).info()['redis_version']};"
        f" msgs/s, p50 ms, p99 ms; each row the median of {args.repeat} runs, drivers in turn"
    )
    header = (
        f"{'driver':<17} {'mode':<7} {'batch':>5} | {'send':^25} | {'receive+delete':^25} |"
        f" {'end to end':^25}"
    )
    print(header)
    print("-" * len(header))
    ratios: list[tuple[str, int, float, float]] = []
    try:
        for mode in args.modes.split(","):
            for batch in (1, 10):
                n = n_base * (2 if batch > 1 else 1) // batch * batch
                runner = run_single if mode == "1 proc" else run_multi
                results = alternate(drivers, runner, n, batch, 100, args.repeat)
                rates = []
                for d, (send, recv, e2e) in zip(drivers, results, strict=True):
                    rates.append(e2e.rate)
                    print(
                        f"{d.name:<17} {mode:<7} {batch:>5} | {send.cell()} |"
                        f" {recv.cell()} | {e2e.cell()}",
                        flush=True,
                    )
                ratios.append((mode, batch, rates[0] / rates[1], rates[0] / rates[2]))
    finally:
        streams.drop()
        lists.drop()
        _drop_store(args.redis, prefix, libraries)
    print()
    print("## Store end to end as a share of each baseline (target: >= 60% of Streams in 1P+4C)")
    for mode, batch, of_streams, of_lists in ratios:
        verdict = ("ok" if of_streams >= 0.6 else "BELOW TARGET") if mode == "1P+4C" else ""
        print(
            f"  {mode:<7} batch {batch:>2}: {of_streams:6.1%} of streams, {of_lists:6.1%} of"
            f" lists  {verdict}"
        )


if __name__ == "__main__":
    main()
