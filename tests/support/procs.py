"""Programs the process tests run as real subprocesses: python -m tests.support.procs KIND ..."""

from __future__ import annotations

import logging
import resource
import sys
import time
from pathlib import Path

from conveyor import Client, Message, Worker


def drain(url: str, queue: str, out: str) -> None:
    """Receive and delete until the queue stays empty; write each id received. Starts when
    the file `out`.go exists, after saying it is ready (`out`.ready), so that processes
    which took longer to start are not left an empty queue."""
    q = Client(url).queue(queue)
    q.stats()  # connected and the queue found
    Path(out + ".ready").touch()
    while not Path(out + ".go").exists():
        time.sleep(0.005)
    with open(out, "w") as f:
        while True:
            batch = q.receive(10, visibility_timeout=300, wait=0.5)
            if not batch:
                return
            f.write("".join(f"{m.id}\n" for m in batch))
            f.flush()
            results = q.delete_batch([m.receipt or "" for m in batch])
            assert all(r.ok for r in results), results


def work(url: str, queue: str, out: str, seconds: str) -> None:
    """A Worker whose handler takes `seconds`; writes `start id` / `done id` lines."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    q = Client(url).queue(queue)
    log = open(out, "a", buffering=1)  # noqa: SIM115 - open for the process's lifetime

    def handler(m: Message) -> None:
        log.write(f"start {m.id}\n")
        time.sleep(float(seconds))
        log.write(f"done {m.id}\n")

    Worker(q, handler, concurrency=2, batch_size=4, grace=float(seconds) * 3).run()


def record(url: str, queue: str, out: str) -> None:
    """A Worker that writes `body receive_count time` per delivery, until SIGTERM."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    q = Client(url).queue(queue)
    log = open(out, "a", buffering=1)  # noqa: SIM115 - open for the process's lifetime

    def handler(m: Message) -> None:
        log.write(f"{m.body.decode()} {m.receive_count} {time.time():.3f}\n")

    Worker(q, handler, concurrency=2, batch_size=10, wait=5, grace=10).run()


def idle(url: str) -> None:
    """Wait 2 s on an empty queue; print the seconds of CPU the whole process used. A first
    receive runs before: what a store's driver does once (botocore loads an operation's
    model at its first call) is not the waiting."""
    with Client(url) as client:
        q = client.create_queue("idle")
        assert q.receive(wait=0) == []
        before = resource.getrusage(resource.RUSAGE_SELF)
        start = time.time()  # the store's clock: the wait ends by it (NTP may slew it)
        assert q.receive(wait=2) == []
        assert time.time() - start >= 2
        after = resource.getrusage(resource.RUSAGE_SELF)
    print((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))


if __name__ == "__main__":
    if sys.argv[1] == "drain":
        drain(*sys.argv[2:5])
    elif sys.argv[1] == "idle":
        idle(sys.argv[2])
    elif sys.argv[1] == "record":
        record(*sys.argv[2:5])
    else:
        work(*sys.argv[2:6])
