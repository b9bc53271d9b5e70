"""uvicorn's HTTP protocol with a deadline on each request's arrival, a bound on its headers,
and a response sent in one write.

uvicorn closes a keep-alive connection idle between requests, but not one that connects and
says nothing, nor one that sends its headers or body a byte at a time: each such connection
is held for ever, and a few hundred exhaust the server. Here a request must arrive whole
(request line, headers and body) within `request_timeout` of its first byte, or of the
connection opening; otherwise the connection is closed (408 when nothing was answered yet).

uvicorn sets no bound on a request's headers either: one client sending headers without end
would have them all held in memory. Here the request line and headers may take `MAX_HEAD`
bytes; past that the answer is 431, and what more the client sends is read and dropped for
`LINGER` seconds before the connection closes (closed at once, it would be reset under a
client still sending, which might then never read the answer).

uvicorn writes a response's status line and headers, then its body, each to the socket at
once: two system calls and two TCP segments for every response. Here what a connection
writes during one turn of the event loop goes out in one write at the start of its next.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("conveyor.server")

REQUEST_TIMEOUT = 30.0
# a request's line and headers, at most (bytes): SigV4's headers with a session token take
# about 2 KiB; common servers allow 8 to 64 KiB
MAX_HEAD = 64 * 1024
LINGER = 1.0


class GuardedHttpProtocol(HttpToolsProtocol):
    request_timeout = REQUEST_TIMEOUT
    max_head = MAX_HEAD

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._receiving = False  # a request has begun and not fully arrived
        self._in_head = False  # its line and headers have not all arrived
        self._head = 0  # bytes received while they were arriving
        self._chunk = 0  # bytes in the read being parsed
        self._refused = False  # answered 431: what arrives now is dropped

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # asyncio hands a BaseTransport; uvicorn's protocol declares the full Transport it
        # uses (uvloop's transports have its methods without subclassing asyncio.Transport)
        writes = _OneWrite(cast(asyncio.Transport, transport), self.loop)
        super().connection_made(cast(asyncio.Transport, writes))
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if not self._receiving:
            self._receiving = True
            self._arm()
        self._chunk = len(data)
        super().data_received(data)
        if self._in_head:
            self._head += len(data)
            if self._head > self.max_head:
                self._refuse_head()

    def _refuse_head(self) -> None:
        self._refused = True
        if self.transport.is_closing():
            return
        log.debug("closing %s: request headers over %d bytes", self.client, self.max_head)
        why = (
            b"The request line and headers take more than %d bytes: send fewer or shorter"
            b" headers.\n" % self.max_head
        )
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain;"
            b" charset=utf-8\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(why), why)
        )
        if self.transport.can_write_eof():  # not over TLS
            self.transport.write_eof()
        self._disarm()
        self._deadline = self.loop.call_later(LINGER, self.transport.close)

    # the parser's callbacks call the base class's directly: super() would cost each request
    def on_message_begin(self) -> None:
        HttpToolsProtocol.on_message_begin(self)
        self._in_head = True
        self._head = 0

    def on_headers_complete(self) -> None:
        self._in_head = False
        # complete within one read: measured when that read could have taken them past
        if self._head + self._chunk > self.max_head and self._head_size() > self.max_head:
            self._refuse_head()
            return
        HttpToolsProtocol.on_headers_complete(self)

    def _head_size(self) -> int:
        """The request line and headers' size, give or take a few bytes."""
        return len(self.url) + 16 + sum(len(n) + len(v) + 4 for n, v in self.headers)

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            HttpToolsProtocol.on_body(self, body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._receiving = False
        self._disarm()
        HttpToolsProtocol.on_message_complete(self)

    def shutdown(self) -> None:
        """Server shutdown: an idle connection is dropped at once. (Closing a TLS connection
        waits for the client's close_notify, which an idle keep-alive client never sends
        while it is not reading: the process would hang for the graceful-shutdown timeout.)"""
        if self.cycle is None or self.cycle.response_complete:
            self.transport.abort()
        else:
            super().shutdown()

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.request_timeout, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        log.debug("closing %s: no whole request within %g s", self.client, self.request_timeout)
        if self.cycle is None or self.cycle.response_complete:
            self.transport.write(
                b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            )
        self.transport.close()


class _OneWrite:
    """A connection's transport whose writes of one turn of the event loop are sent together
    at its next turn (or before the transport closes)."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._held is None:
            self._held = [bytes(data)]
            self._loop.call_soon(self._flush)
        else:
            self._held.append(bytes(data))

    def _flush(self) -> None:
        held, self._held = self._held, None
        if held and not self._transport.is_closing():
            self._transport.writelines(held)  # uvloop: one writev

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_write_buffer_size(self) -> int:
        held = sum(map(len, self._held)) if self._held else 0
        return held + self._transport.get_write_buffer_size()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def guarded(request_timeout: float) -> type[GuardedHttpProtocol]:
    """The protocol class with this deadline."""
    return type("GuardedHttp", (GuardedHttpProtocol,), {"request_timeout": request_timeout})
