"""A TCP proxy between servers and their store that breaks the network on demand.

`partition()` cuts the link: what either side sends is held (as TCP holds what it cannot
deliver) and new connections are accepted but not carried through, until `heal()`.
`reset()` ends every connection with a TCP reset, mid-transaction if one is running.
`latency(s)` delays every chunk by `s` seconds each way. `mute()` holds only what the store
answers (its clients' requests still reach it), until `unmute()`: a reply lost in flight.
The proxy runs its own event loop in a thread; its methods may be called from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from typing import Any


class FaultProxy:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.loop = asyncio.new_event_loop()
        self.links: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self.connected = 0  # connections carried through, over the proxy's life
        self.resets = 0  # connections ended by `reset`
        self._delay = 0.0
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self._thread.start()
        started.wait(10)

    @property
    def port(self) -> int:
        sock = self._server.sockets[0]
        return int(sock.getsockname()[1])

    def url(self, url: str) -> str:
        """`url` (a store URL naming the target's host:port) through this proxy."""
        host, port = self.target
        return url.replace(f"{host}:{port}", f"127.0.0.1:{self.port}", 1)

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self._open = asyncio.Event()
        self._open.set()
        self._answers = asyncio.Event()
        self._answers.set()
        self._server = self.loop.run_until_complete(
            asyncio.start_server(self._carry, "127.0.0.1", 0)
        )
        started.set()
        self.loop.run_forever()
        # stopped by `close`: the connections' tasks end, and the loop is closed here
        tasks = asyncio.all_tasks(self.loop)
        for task in tasks:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self.loop.close()

    def _call(self, fn: Any, *args: Any) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    def partition(self) -> None:
        self._call(self._open.clear)

    def heal(self) -> None:
        self._call(self._open.set)

    def mute(self) -> None:
        self._call(self._answers.clear)

    def unmute(self) -> None:
        self._call(self._answers.set)

    def latency(self, seconds: float) -> None:
        self._delay = seconds

    def reset(self) -> None:
        """End every connection now with a reset (RST) to both sides."""
        done = threading.Event()

        def cut() -> None:
            try:
                for a, b in list(self.links):
                    for w in (a, b):
                        sock = w.get_extra_info("socket")
                        with contextlib.suppress(OSError):  # closed by its peer already
                            linger = struct.pack("ii", 1, 0)
                            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                        w.transport.abort()
                    self.resets += 1
                self.links.clear()
            finally:
                done.set()

        self._call(cut)
        done.wait(10)

    def close(self) -> None:
        self.reset()
        self._call(self._server.close)
        self._call(self.loop.stop)
        self._thread.join(10)

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._open.wait()  # a partition: the connection hangs, as a SYN unanswered
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        link = (writer, up_writer)
        self.links.add(link)
        self.connected += 1
        try:
            await asyncio.gather(
                self._pump(reader, up_writer), self._pump(up_reader, writer, self._answers)
            )
        finally:
            self.links.discard(link)
            for w in link:
                w.transport.abort()

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        held: asyncio.Event | None = None,
    ) -> None:
        try:
            while chunk := await reader.read(65536):
                if self._delay:
                    await asyncio.sleep(self._delay)
                await self._open.wait()
                if held is not None:
                    await held.wait()
                writer.write(chunk)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            if not writer.is_closing():
                writer.transport.abort()
