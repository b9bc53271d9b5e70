"""uvicorn's HTTP protocol with a deadline on each request's arrival, a bound on its headers,
and a response sent in one write.

uvicorn closes a keep-alive connection idle between requests, but not one that connects and
says nothing, nor one that sends its headers or body a byte at a time: each such connection
is held for ever, and a few hundred exhaust the server. Here a request must arrive whole
(request line, headers and body) within `request_timeout` of its first byte, or of the
connection opening; otherwise the connection is closed (408 when nothing was answered yet).
That deadline and the keep-alive's end (uvicorn's `timeout_keep_alive`) share one timer a
connection, which a later deadline leaves in place (it finds it not due and waits on):
uvicorn made and cancelled a timer for each request's keep-alive, and a deadline another.

uvicorn sets no bound on a request's headers either: one client sending headers without end
would have them all held in memory. Here the request line and headers may take `MAX_HEAD`
bytes; past that the answer is 431, and what more the client sends is read and dropped for
`LINGER` seconds before the connection closes (closed at once, it would be reset under a
client still sending, which might then never read the answer).

uvicorn writes a response's status line and headers, then its body, each to the socket at
once: two system calls and two TCP segments for every response. Here what a connection
writes during one turn of the event loop goes out in one write at the start of its next
(replies to requests that waited for a commit go out as the commit is made: they are written
together, in the one callback that makes it).

A request to the SQS endpoint (a POST to `/` or a queue URL with its length declared) does
not go through ASGI: uvicorn's request cycle (its scope, an asyncio task, the receive and
send messages) costs a request about 15 µs of CPU, more than the answer itself on the
memory store. Its body is gathered here as the parser hands it over, the endpoint's
coroutine is stepped once when it has arrived, and where it ends in that step (nothing to
wait for) its reply is written at once; where it waits for its commit (`CommitWait`) it is
stepped again as the commit is made (`CommitWait.settled`), in the same turn of the loop;
otherwise a task runs it on. Requests pipelined behind one that waits are held, and
answered in order, as uvicorn's are. Requests that need more of uvicorn (an `Expect:
100-continue`, a chunked body, proxy headers) take the ASGI path; the access log has the
same lines for both.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import time
import urllib.parse
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Protocol, cast

import httptools
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

from ... import tracing
from ...commits import CommitWait
from ..app import BodyLimit
from .conns import GONE, OPEN, Gone
from .endpoint import (
    Endpoint,
    Incoming,
    Reply,
    base_url,
    declared_too_large,
    header_map,
    sqs_path_of,
)
from .proxies import has_forwarding

log = logging.getLogger("conveyor.server")

REQUEST_TIMEOUT = 30.0
# a request's line and headers, at most (bytes): SigV4's headers with a session token take
# about 2 KiB; common servers allow 8 to 64 KiB
MAX_HEAD = 64 * 1024
LINGER = 1.0


def refusal(status: int, code: str, message: str) -> bytes:
    """A whole response, closing the connection, for a request refused before it reached a
    route: the REST API's error shape, `{"error": ..., "code": ...}`."""
    body = json.dumps({"error": message, "code": code}).encode()
    head = b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n"
    return STATUS_LINE[status] + head % len(body) + b"\r\n" + body


# a timer may fire this much (seconds) before its time (the loop's clock granularity)
TIMER_SLACK = 0.002


class GuardedHttpProtocol(HttpToolsProtocol):
    request_timeout = REQUEST_TIMEOUT
    max_head = MAX_HEAD

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # one timer a connection, moved lazily: `_due` is when what `_on_due` does happens
        # (the request deadline, the keep-alive's end, the linger after a 431); setting a
        # later one leaves the timer as it is, which finds it not due and waits again
        self._due = math.inf
        self._on_due: Callable[[], object] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        self._receiving = False  # a request has begun and not fully arrived
        self._in_head = False  # its line and headers have not all arrived
        self._head = 0  # bytes received while they were arriving
        self._chunk = 0  # bytes in the read being parsed
        self._refused = False  # answered 431: what arrives now is dropped
        app: Any = self.config.app
        fast = isinstance(app, BodyLimit) and not self.root_path
        self._endpoint: Endpoint | None = app.endpoint if fast else None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # asyncio hands a BaseTransport; uvicorn's protocol declares the full Transport it
        # uses (uvloop's transports have its methods without subclassing asyncio.Transport)
        writes = self._writes = _OneWrite(cast(asyncio.Transport, transport), self.loop)
        super().connection_made(cast(asyncio.Transport, writes))
        OPEN[0] += 1
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        OPEN[0] -= 1
        self._disarm()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        cycle: Any = self.cycle
        if type(cycle) is Exchange and not cycle.complete and self._endpoint is not None:
            self._endpoint.gone(cycle.started_at)
        if cycle is not None and not cycle.response_complete:
            _client_went(cycle)
        super().connection_lost(exc)

    def eof_received(self) -> bool | None:  # type: ignore[override]  # asyncio's protocol
        """The client has sent all it will (it may still read): a request that has arrived
        whole is answered, then the connection closes. (uvicorn closes at once, and the
        answer is lost.)"""
        cycle: Any = self.cycle  # uvicorn's request cycle or an Exchange
        if cycle is None or self.scheme == "https":  # TLS ends with close_notify instead
            return None
        arrived = cycle.complete if type(cycle) is Exchange else not cycle.more_body
        if not arrived:  # cut short: nothing to answer
            return None
        if cycle.response_complete:
            self.transport.close()  # after what this turn wrote has gone out
        else:
            cycle.keep_alive = False
            # a client that closed its socket looks the same until a write meets its reset:
            # a long poll answers with what it has rather than claim messages for a reader
            # that may be gone (the request's `Gone`)
            _client_went(cycle)
        return True

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
            f"the request line and headers take more than {self.max_head} bytes: send fewer"
            " or shorter headers"
        )
        self.transport.write(refusal(431, "RequestHeaderFieldsTooLarge", why))
        if self.transport.can_write_eof():  # not over TLS
            self.transport.write_eof()
        self._set_due(LINGER, self.transport.close)

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
        if not self._exchange():
            HttpToolsProtocol.on_headers_complete(self)

    def _head_size(self) -> int:
        """The request line and headers' size, give or take a few bytes."""
        return len(self.url) + 16 + sum(len(n) + len(v) + 4 for n, v in self.headers)

    def on_body(self, body: bytes) -> None:
        if self._refused:
            return
        cycle: Any = self.cycle  # uvicorn's request cycle or an Exchange
        if type(cycle) is Exchange:
            cycle.body.append(body)
        else:
            HttpToolsProtocol.on_body(self, body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._receiving = False
        self._disarm()
        cycle: Any = self.cycle  # uvicorn's request cycle or an Exchange
        if type(cycle) is Exchange:
            cycle.complete = True
            if cycle.started:
                self._answer(cycle)
        else:
            HttpToolsProtocol.on_message_complete(self)

    # -- the SQS endpoint without ASGI ------------------------------------------------------

    def _exchange(self) -> bool:
        """Take the request whose headers have arrived as an `Exchange` if it may skip ASGI
        (see the module's doc); False leaves it to uvicorn."""
        parser = self.parser
        endpoint = self._endpoint
        if parser.get_method() != b"POST" or self.expect_100_continue or parser.should_upgrade():
            return False
        if endpoint is None or self.limit_concurrency is not None:
            return False
        if tracing.active() is not None:
            return False  # ASGI's task per request keeps each span's context its own
        url = httptools.parse_url(self.url)
        raw_path: bytes = url.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        where = sqs_path_of(path)
        if where is None:
            return False
        headers = header_map(self.headers)
        length = headers.get("content-length")
        if length is None or declared_too_large(length, endpoint.server.config.max_body):
            return False  # chunked, or over the limit: the ASGI path says so
        scheme: str = self.scheme or "http"
        proxies = endpoint.server.proxies
        if proxies and has_forwarding(headers):
            view = proxies.resolve(scheme, headers, self.client[0] if self.client else None)
            if view is not None:
                scheme = view.scheme
                if view.host is not None:
                    headers["host"] = view.host
        query: bytes | None = url.query
        exchange = Exchange(
            Incoming(
                method="POST",
                path=path,
                raw_path=raw_path.decode("latin-1") or "/",
                query=query.decode("latin-1") if query else "",
                headers=headers,
                base_url=base_url(scheme, headers, self.server),
                body=b"",
                account=where.get("account"),
                queue=where.get("queue"),
            ),
            version=parser.get_http_version(),
            keep_alive=parser.get_http_version() != "1.0" and parser.should_keep_alive(),
        )
        previous = self.cycle
        self.cycle = as_cycle(exchange)
        if previous is None or previous.response_complete:
            exchange.started = True
        else:  # pipelined behind a request not yet answered
            self.flow.pause_reading()
            self.pipeline.appendleft((as_cycle(exchange), self.app))
        return True

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        if type(cycle) is Exchange:  # its turn after pipelined requests before it
            cycle.started = True
            if cycle.complete:
                self.loop.call_soon(self._answer, cycle)
            return
        cycle.scope[GONE] = cycle.conveyor_gone = Gone()
        HttpToolsProtocol._start_asgi_task(self, cycle, app)

    def _answer(self, exchange: Exchange) -> None:
        endpoint = self._endpoint
        assert endpoint is not None
        chunks = exchange.body
        request = exchange.request
        if chunks:
            request.body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._step(exchange, endpoint.answer(request, exchange.started_at))

    def _step(self, exchange: Exchange, coro: Coroutine[Any, Any, Reply], *settled: object) -> None:
        """Run the request's coroutine to its answer or its next wait. A wait for a commit
        (`CommitWait`) is resumed from the future's callback (`settled`: the future); any
        other gets a task."""
        try:
            step = coro.send(None)
        except StopIteration as done:
            self._reply(exchange, done.value, bool(settled))
            return
        except (Exception, asyncio.CancelledError):  # the endpoint answers its own errors
            log.exception("SQS request failed")
            self._abandon(exchange)
            return
        if type(step) is CommitWait:
            step._asyncio_future_blocking = False  # as a task would (see below)
            step.settled(functools.partial(self._step, exchange, coro))
            return
        if getattr(step, "_asyncio_future_blocking", False):
            # a future awaited: a task clears this mark at once, and another coroutine
            # that awaits the same future before this one's task runs would meet it set
            step._asyncio_future_blocking = False
        task = self.loop.create_task(_resumed(coro, step))
        self.tasks.add(cast("asyncio.Task[None]", task))
        task.add_done_callback(self.tasks.discard)
        task.add_done_callback(lambda t: self._replied(exchange, t))

    def _replied(self, exchange: Exchange, task: asyncio.Task[Reply]) -> None:
        if task.cancelled():  # shutdown: the connection goes with it
            self._abandon(exchange)
            return
        error = task.exception()
        if error is not None:  # the endpoint answers its own errors: this is a bug
            log.error("SQS request failed", exc_info=error)
            self._abandon(exchange)
            return
        self._reply(exchange, task.result())

    def _abandon(self, exchange: Exchange) -> None:
        """No answer can be given: the connection closes."""
        exchange.response_complete = True
        self.transport.close()

    def _reply(self, exchange: Exchange, reply: Reply, now: bool = False) -> None:
        status, content_type, body, extra = reply
        transport = self.transport
        if transport.is_closing():
            exchange.response_complete = True
            return
        keep_alive = exchange.keep_alive
        out = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            out += (name, b": ", value, b"\r\n")
        out.append(b"content-type: %s\r\ncontent-length: %d\r\n" % (content_type, len(body)))
        for name, value in extra:
            if name == b"connection" and value.lower() == b"close":
                keep_alive = False
            out += (name, b": ", value, b"\r\n")
        if not keep_alive and all(name != b"connection" for name, _ in extra):
            out.append(b"connection: close\r\n")
        out += (b"\r\n", body)
        if now:  # the replies of a commit's requests, written together as it is made
            self._writes.write_now(b"".join(out))
        else:  # held to the loop's next turn with the others this turn answers
            self._writes.write(b"".join(out))
        if self.access_log:  # as uvicorn's request cycle logs it
            request = exchange.request
            self.access_logger.info(
                '%s - "%s %s HTTP/%s" %d',
                "%s:%d" % self.client if self.client else "",  # noqa: UP031 - uvicorn's form
                request.method,
                f"{request.raw_path}?{request.query}" if request.query else request.raw_path,
                exchange.version,
                status,
            )
        if self.flow.write_paused:  # the client reads slowly: the next request waits
            self.loop.create_task(self._after_drain(exchange, keep_alive))
        else:
            self._complete(exchange, keep_alive)

    async def _after_drain(self, exchange: Exchange, keep_alive: bool) -> None:
        await self.flow.drain()
        self._complete(exchange, keep_alive)

    def _complete(self, exchange: Exchange, keep_alive: bool) -> None:
        exchange.response_complete = True
        if not keep_alive or not exchange.keep_alive:  # shutdown() may have cleared it
            self.transport.close()
        self.on_response_complete()

    def shutdown(self) -> None:
        """Server shutdown: an idle connection is dropped at once (closing a TLS connection
        waits for the client's close_notify, which an idle keep-alive client never sends
        while it is not reading: the process would hang for the graceful-shutdown timeout),
        unless an answer is still on its way out (a long poll the shutdown just ended: the
        event loop may not have written it yet), which is sent before it closes."""
        if self.cycle is None or self.cycle.response_complete:
            if self.transport.get_write_buffer_size():
                self.transport.close()
            else:
                self.transport.abort()
        else:
            super().shutdown()

    def on_response_complete(self) -> None:
        """uvicorn's, with the keep-alive's end set on the connection's one timer rather
        than a timer of its own for every response (made, then cancelled by the next
        request)."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:  # requests pipelined behind the one answered
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        else:
            self._set_due(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def _arm(self) -> None:
        self._set_due(self.request_timeout, self._expired)

    def _disarm(self) -> None:
        self._due, self._on_due = math.inf, None

    def _set_due(self, delay: float, then: Callable[[], object]) -> None:
        self._due, self._on_due = self.loop.time() + delay, then
        if self._due < self._timer_at:  # sooner than the timer: moved (else it waits on)
            self._schedule()

    def _schedule(self) -> None:
        """The connection's timer, at `_due` (the one before it, if any, cancelled)."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = self.loop.call_at(self._due, self._tick), self._due

    def _tick(self) -> None:
        self._timer, self._timer_at = None, math.inf
        then = self._on_due
        if then is None:
            return
        if self._due - self.loop.time() > TIMER_SLACK:  # moved on since: wait again
            self._schedule()
            return
        self._disarm()
        then()

    def _expired(self) -> None:
        if self.transport.is_closing():
            return
        log.debug("closing %s: no whole request within %g s", self.client, self.request_timeout)
        cycle = self.cycle  # uvicorn's, or an Exchange (which answers once it has the body)
        if cycle is None or cycle.response_complete or not getattr(cycle, "response_started", 0):
            why = (
                f"the request did not arrive whole within {self.request_timeout:g} s: send"
                " the request line, headers and body together"
            )
            self.transport.write(refusal(408, "RequestTimeout", why))
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        """A request that is not HTTP (uvicorn's parser refused it)."""
        why = f"{msg.rstrip('.')}: send a well-formed HTTP/1.1 request"
        self.transport.write(refusal(400, "MalformedRequest", why))
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

    def write_now(self, data: bytes) -> None:
        """Send `data` at once (a whole response), after what this turn wrote before."""
        if self._held is None:
            self._transport.write(data)
        else:
            self._held.append(data)

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


class _Settable(Protocol):
    def set(self) -> None: ...


class CycleView(Protocol):
    """What uvicorn's HTTP protocol reads and sets of its request cycle outside the methods
    `GuardedHttpProtocol` overrides for an Exchange (`on_body`, `on_message_complete`,
    `_start_asgi_task`): all an Exchange needs to stand in for one."""

    response_complete: bool
    keep_alive: bool
    disconnected: bool

    @property
    def message_event(self) -> _Settable: ...


def as_cycle(stand_in: CycleView) -> RequestResponseCycle:
    """An Exchange where uvicorn's protocol keeps its request cycle (`cycle`, `pipeline`):
    it has what `CycleView` says uvicorn uses of one (checked here)."""
    return cast("RequestResponseCycle", stand_in)


class _Unused:
    """The request cycle's event, which uvicorn sets when the connection is lost."""

    __slots__ = ()

    def set(self) -> None:
        pass


class Exchange:
    """A request to the SQS endpoint and its answer, in place of uvicorn's request cycle
    (the protocol reads `response_complete`, and sets `keep_alive` and `disconnected`)."""

    __slots__ = (
        "body",
        "complete",
        "disconnected",
        "keep_alive",
        "request",
        "response_complete",
        "started",
        "started_at",
        "version",
    )

    message_event = _Unused()

    def __init__(self, request: Incoming, version: str, keep_alive: bool) -> None:
        self.started_at = time.perf_counter()
        self.request = request
        self.version = version
        self.keep_alive = keep_alive
        self.body: list[bytes] = []
        self.complete = False  # the body has arrived
        self.started = False  # no request before it on the connection waits for its answer
        self.response_complete = False
        self.disconnected = False


def _client_went(cycle: Any) -> None:
    """The client of a request not yet answered (an Exchange, or uvicorn's request cycle)
    closed the connection or its sending side: its `Gone` says so."""
    gone = cycle.request.gone if type(cycle) is Exchange else getattr(cycle, "conveyor_gone", None)
    if isinstance(gone, Gone):
        gone.gone = True


class _Resume:
    """Runs on a coroutine that has been stepped once and yielded `step` (a future)."""

    __slots__ = ("coro", "step")

    def __init__(self, coro: Coroutine[Any, Any, Reply], step: Any) -> None:
        self.coro = coro
        self.step = step

    def __await__(self) -> Generator[Any, Any, Reply]:
        coro, step = self.coro, self.step
        if getattr(step, "_asyncio_future_blocking", None) is not None:
            step._asyncio_future_blocking = True  # as the coroutine left it (see _answer)
        while True:
            try:
                sent = yield step
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # the task's, passed on
                try:
                    step = coro.throw(exc)
                except StopIteration as done:
                    return cast(Reply, done.value)
            else:
                try:
                    step = coro.send(sent)
                except StopIteration as done:
                    return cast(Reply, done.value)


async def _resumed(coro: Coroutine[Any, Any, Reply], step: Any) -> Reply:
    return await _Resume(coro, step)


def guarded(request_timeout: float) -> type[GuardedHttpProtocol]:
    """The protocol class with this deadline."""
    return type("GuardedHttp", (GuardedHttpProtocol,), {"request_timeout": request_timeout})
