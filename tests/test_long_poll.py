"""Long polling in real time: how fast a send wakes a waiter, and what waiting costs."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from unittest import mock

from conveyor import Client


def test_send_wakes_waiter_in_same_process(store_url: str) -> None:
    with Client(store_url) as client:
        wake_waiters(client)


def wake_waiters(client: Client) -> None:
    q = client.create_queue("lp")
    latencies = []
    for _ in range(20):
        got: list[float] = []

        def wait(into: list[float] = got) -> None:
            assert q.receive(wait=5)
            into.append(time.perf_counter())

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.02)  # let the receiver start waiting: this measures wake-up in real time
        sent = time.perf_counter()
        q.send("ping")
        t.join(5)
        latencies.append(got[0] - sent)
        for m in q.receive(10):
            q.delete(m.receipt or "")
    # what a send and then a receive cost on this store without any waiting (a remote or
    # emulated store takes milliseconds a request): waking adds at most 20 ms to that
    direct = []
    for _ in range(10):
        start = time.perf_counter()
        q.send("ping")
        [m] = q.receive()
        direct.append(time.perf_counter() - start)
        q.delete(m.receipt or "")
    latencies.sort()
    direct.sort()
    assert latencies[len(latencies) // 2] < direct[len(direct) // 2] + 0.02, (latencies, direct)


def test_idle_waiter_uses_no_measurable_cpu(store_url: str) -> None:
    """A receive waiting 2 s on an empty queue, measured in a process of its own (so that
    nothing left running by other tests counts): under a quarter of a core. A waiter that
    spins uses all of one (2 s); the polls the stores make by design (every 0.2 to 1 s, each
    a round trip) cost 3-10% of a core on this machine, by the hour (0.07 to 0.2 s measured
    on one day, the same code), so the bound is far from both."""
    out = subprocess.run(
        [sys.executable, "-m", "tests.support.procs", "idle", store_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    cpu = float(out.split()[-1])
    assert cpu < 0.5, f"waiting 2 s used {cpu:.3f} s of CPU"


def test_a_wake_up_on_the_waiters_own_loop_skips_the_loops_wake_up_pipe() -> None:
    """A send made on the event loop a receive waits on (the server's) resolves the wait at
    the loop's next turn; only a send from another thread wakes the loop through its pipe
    (`call_soon_threadsafe`, a write and a read of a pipe)."""
    import asyncio

    from conveyor.notify import WaitHub

    hub = WaitHub()

    async def scenario() -> None:
        loop = asyncio.get_running_loop()

        async def woken() -> bool:
            waiter = loop.create_task(hub.wait_async("s", "q", hub.version("s", "q"), 5.0))
            await asyncio.sleep(0)  # it waits now
            return await waiter

        with mock.patch.object(
            loop, "call_soon_threadsafe", wraps=loop.call_soon_threadsafe
        ) as through_pipe:
            waiting = loop.create_task(woken())
            await asyncio.sleep(0.01)
            hub.notify("s", "q")  # on the loop's thread
            assert await waiting is True
            assert through_pipe.call_count == 0

            waiting = loop.create_task(woken())
            await asyncio.sleep(0.01)
            other = threading.Thread(target=hub.notify, args=("s", "q"))
            other.start()
            assert await asyncio.wait_for(waiting, 5) is True
            other.join()
            assert through_pipe.call_count == 1

    asyncio.run(scenario())
