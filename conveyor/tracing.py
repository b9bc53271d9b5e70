"""Traces through queues, with OpenTelemetry (the `otel` extra; docs/deploy.md, Traces).

A message sent while a span is current carries that span's W3C trace context in two message
attributes, `traceparent` and `tracestate` (as OpenTelemetry's SQS instrumentations put
them; a message that already has a `traceparent`, from an instrumented client, keeps it).
Whoever takes the message continues the trace: the SDK's receive links its span to each
message's context, a Worker processes each message in a span that is the message's child
(so the handler's own spans join the sender's trace), the push gateway delivers in one, and
the Spark source's reads link to what they read. `conveyor serve` continues the trace of a
request that carries `traceparent`, with a span for the request and one for each store call.

Nothing here imports OpenTelemetry: spans are made only where the program has set a tracer
provider (an SDK, configured in code or by `opentelemetry-instrument`), which means it has
imported the API already; elsewhere each entry point costs a dictionary lookup.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast

if TYPE_CHECKING:
    from .models import Message

__all__ = ["KEYS", "active", "begin", "context_of", "end", "span", "store_call", "with_context"]

KEYS = ("traceparent", "tracestate")  # the message attributes the context travels in
MAX_LINKS = 128  # links a receive span keeps (OpenTelemetry's default limit)
LOOK_EVERY = 256  # calls between looks for a tracer provider while there is none
P = ParamSpec("P")
T = TypeVar("T")


_api: Any = None  # the trace API, once a provider is seen (one is set once, for good)
_skip = 0  # calls left before looking for a provider again
# whether `active` has seen a provider: for per-message checks inside calls that asked it
ON = False


def active() -> Any | None:
    """OpenTelemetry's trace API where a tracer provider is set, else None. A provider is
    looked for on the first call and then every LOOK_EVERY calls (providers are set as a
    program starts): asking OpenTelemetry each time would cost a request microseconds."""
    global _api, _skip, ON
    if _api is not None:
        return _api
    if _skip:
        _skip -= 1
        return None
    _skip = LOOK_EVERY
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None
    _api, ON = trace, True
    return trace


@functools.cache
def _propagator() -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator()


def _tracer(trace: Any) -> Any:
    from . import __version__

    return trace.get_tracer("conveyor", __version__)


def with_context(attributes: dict[str, Any], room: int, budget: int) -> dict[str, Any]:
    """`attributes` with the current span's context added, where a span is current and the
    message has `room` more attributes and `budget` more bytes for them; else as they are."""
    trace = active()
    if trace is None or "traceparent" in attributes or room < 1:
        return attributes
    if not trace.get_current_span().get_span_context().is_valid:
        return attributes
    carrier: dict[str, str] = {}
    _propagator().inject(carrier)
    added: dict[str, str] = {}
    for key in KEYS[:room]:
        value = carrier.get(key)
        cost = len(key) + len("String") + len(value or "")
        if value and cost <= budget:
            added[key] = value
            budget -= cost
    if "traceparent" not in added:
        return attributes
    return {**attributes, **added}


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    inner = getattr(value, "value", None)  # a TypedValue of the SQS API
    return inner if isinstance(inner, str) else None


def context_of(message: Message | Mapping[str, Any]) -> Any | None:
    """The trace context a message carries (its attributes' `traceparent`), as an
    OpenTelemetry Context to start a span in; None where it carries none or no tracer
    provider is set."""
    if active() is None:
        return None
    attributes = message if isinstance(message, Mapping) else message.attributes
    carrier = {k: t for k in KEYS if (t := _text(attributes.get(k))) is not None}
    if "traceparent" not in carrier:
        return None
    context = _propagator().extract(carrier)
    trace = sys.modules["opentelemetry.trace"]
    if not trace.get_current_span(context).get_span_context().is_valid:
        return None
    return context


def links_to(messages: Iterable[Message]) -> list[Any]:
    """Links to the contexts `messages` carry (at most MAX_LINKS)."""
    trace = active()
    if trace is None:
        return []
    links = []
    for m in messages:
        context = context_of(m)
        if context is not None:
            links.append(trace.Link(trace.get_current_span(context).get_span_context()))
            if len(links) >= MAX_LINKS:
                break
    return links


@contextmanager
def span(
    name: str,
    kind: str = "internal",
    *,
    parent: Any | None = None,
    attributes: Mapping[str, Any] | None = None,
    links: Iterable[Any] = (),
) -> Iterator[Any | None]:
    """A span made current for the block (None where no tracer provider is set); an
    exception leaving the block is recorded on it."""
    trace = active()
    if trace is None:
        yield None
        return
    with _tracer(trace).start_as_current_span(
        name,
        context=parent,
        kind=getattr(trace.SpanKind, kind.upper()),
        attributes=dict(attributes or {}),
        links=list(links),
    ) as current:
        yield current


def begin(
    name: str,
    kind: str = "internal",
    *,
    parent: Any | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> Any | None:
    """A span started but not made current (for work that spans callbacks or a generator's
    yields): end it with `end`. None where no tracer provider is set."""
    trace = active()
    if trace is None:
        return None
    return _tracer(trace).start_span(
        name,
        context=parent,
        kind=getattr(trace.SpanKind, kind.upper()),
        attributes=dict(attributes or {}),
    )


def end(current: Any | None, error: str | None = None) -> None:
    """End a span of `begin`'s; with `error`, marked as failed."""
    if current is None:
        return
    if error is not None:
        trace = sys.modules["opentelemetry.trace"]
        current.set_status(trace.Status(trace.StatusCode.ERROR, error))
    current.end()


def messaging(operation: str, queue: str, store: str) -> dict[str, str]:
    """The semantic-convention attributes of a span about a queue."""
    return {
        "messaging.system": "conveyor",
        "messaging.operation.name": operation,
        "messaging.destination.name": queue,
        "db.system.name": store,
    }


def received(current: Any | None, messages: Iterable[Message]) -> None:
    """Mark a receive's span with what it returned: its count, a link to each context."""
    if current is None:
        return
    messages = list(messages)
    current.set_attribute("messaging.batch.message_count", len(messages))
    for link in links_to(messages):
        current.add_link(link.context)


def reading(queue: str, store: str, messages: Iterable[Message]) -> Iterator[Message]:
    """`messages` as they are read, in a span (`read queue`, not current: it lasts while
    the reader is consumed) linked to the contexts the first MAX_LINKS of them carry."""
    current = begin(f"read {queue}", "consumer", attributes=messaging("read", queue, store))
    if current is None:
        yield from messages
        return
    count = links = 0
    try:
        for m in messages:
            count += 1
            if links < MAX_LINKS and (context := context_of(m)) is not None:
                trace = sys.modules["opentelemetry.trace"]
                current.add_link(trace.get_current_span(context).get_span_context())
                links += 1
            yield m
    finally:
        current.set_attribute("messaging.batch.message_count", count)
        current.end()


def failed(error: BaseException) -> None:
    """Record on the current span that its work failed with `error`."""
    trace = active()
    if trace is None:
        return
    current = trace.get_current_span()
    current.record_exception(error)
    current.set_status(trace.Status(trace.StatusCode.ERROR, str(error)[:200]))


def http_context(headers: Mapping[str, str]) -> Any | None:
    """The trace context an HTTP request's `traceparent` header (lower-case names) names."""
    if "traceparent" not in headers:
        return None
    return _propagator().extract(headers)


def answered(name: str, status: int) -> None:
    """Name the current (request) span for what it turned out to be, with its status."""
    trace = active()
    if trace is None:
        return
    current = trace.get_current_span()
    current.update_name(name)
    current.set_attribute("http.response.status_code", status)
    if status >= 500:
        current.set_status(trace.Status(trace.StatusCode.ERROR))


def store_call(
    operation: str, *, topic: bool = False
) -> Callable[[Callable[Concatenate[Any, P], T]], Callable[Concatenate[Any, P], T]]:
    """A Queue method (or with `topic`, a Client method whose first argument is a topic)
    as a span of its own: `operation queue` (kind client), with the store's scheme; a
    receive links to the context of each message it returns."""

    def wrap(fn: Callable[Concatenate[Any, P], T]) -> Callable[Concatenate[Any, P], T]:
        @functools.wraps(fn)
        def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
            if active() is None:
                return fn(self, *args, **kwargs)
            target = str(args[0] if args else kwargs.get("topic")) if topic else self.name
            attributes = messaging(operation, target, self.backend.scheme)
            with span(f"{operation} {target}", "client", attributes=attributes) as current:
                result = fn(self, *args, **kwargs)
                if operation == "receive":  # a receive returns its messages
                    received(current, cast("list[Message]", result))
                return result

        return call

    return wrap
