"""SNS's `http` and `https` subscriptions: which endpoints a subscription may reach, the
retry policy, and the deliverer.

Every webhook subscription has a queue of its own in the store (`sns-http-...`), which the
topic's publishes are copied into like any subscribed queue's; its confirmation and
unsubscribe messages go there too. A delivery is therefore a message: it survives a restart,
and several servers of one store share the work (a receive's visibility timeout keeps two
from posting one message at once). Each message carries what its POST needs (the endpoint,
SNS's headers, the delivery policy), so the deliverer reads nothing else.

The deliverer (one task per server) runs one worker per delivery queue: a worker receives,
POSTs up to 10 at once, deletes what the endpoint took (2xx) and leaves the rest for the
policy's next retry (the message's visibility timeout is its wait); past the last retry a
message goes to the subscription's dead-letter queue (its RedrivePolicy), else it is dropped,
as on SNS. An endpoint that hangs or refuses holds its own worker alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import math
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ...aio import AsyncClient
from ...exceptions import ConveyorError, QueueDoesNotExist, TopicDoesNotExist
from ...models import Message
from .attributes import DELIVERY_POLICY

log = logging.getLogger("conveyor.sns")

HTTP_PROTOCOLS = frozenset({"http", "https"})
DELIVERY_PREFIX = "sns-http-"
"""The names of the webhook subscriptions' delivery queues (not listed by the SQS API)."""
TOPIC_TAG = "sns-topic"
"""The tag of a delivery queue that names its topic."""
CONFIRM = "sns-confirm:"
"""Topic settings: a webhook subscription waiting for its confirmation (CONFIRM + queue)."""
UNRESOLVED = "a host name to resolve"
POST_TIMEOUT = 15.0  # SNS waits 15 s for an endpoint's answer
IN_FLIGHT = 10  # POSTs at once per subscription

# SNS's default delivery policy for HTTP/S ("healthyRetryPolicy"), as topics show it
_HTTP_POLICY: Any = DELIVERY_POLICY["http"]
DEFAULT_POLICY: dict[str, Any] = dict(_HTTP_POLICY["defaultHealthyRetryPolicy"])


@dataclass(frozen=True)
class DeliveryPolicy:
    retries: int = 3
    min_delay: float = 20.0
    max_delay: float = 20.0
    no_delay: int = 0
    at_min: int = 0
    at_max: int = 0
    backoff: str = "linear"
    per_second: float | None = None  # throttlePolicy.maxReceivesPerSecond
    content_type: str | None = None  # requestPolicy.headerContentType

    @classmethod
    def of(cls, subscription: Mapping[str, str], topic: Mapping[str, str]) -> DeliveryPolicy:
        """The subscription's DeliveryPolicy, else the topic's (its `http` part: the retry and
        throttle policies, and its `defaultRequestPolicy`), else SNS's default; a field a
        policy leaves out is the default's."""
        healthy = dict(DEFAULT_POLICY)
        throttle: dict[str, Any] = {}
        content_type = None
        layers = ((topic.get("DeliveryPolicy"), True), (subscription.get("DeliveryPolicy"), False))
        for text, nested in layers:
            try:
                policy = json.loads(text) if text else {}
            except ValueError:
                continue
            if nested and isinstance(policy, dict):
                policy = policy.get("http", {})
            if not isinstance(policy, dict):
                continue
            if isinstance(policy.get("healthyRetryPolicy"), dict):
                healthy.update(policy["healthyRetryPolicy"])
            if isinstance(policy.get("throttlePolicy"), dict):
                throttle.update(policy["throttlePolicy"])
            request = policy.get("defaultRequestPolicy" if nested else "requestPolicy")
            wanted = request.get("headerContentType") if isinstance(request, dict) else None
            if isinstance(wanted, str) and wanted:
                content_type = wanted
        try:
            per_second = throttle.get("maxReceivesPerSecond")
            return cls(
                retries=max(0, min(100, int(healthy["numRetries"]))),
                min_delay=max(0.0, float(healthy["minDelayTarget"])),
                max_delay=max(0.0, float(healthy["maxDelayTarget"])),
                no_delay=max(0, int(healthy["numNoDelayRetries"])),
                at_min=max(0, int(healthy["numMinDelayRetries"])),
                at_max=max(0, int(healthy["numMaxDelayRetries"])),
                backoff=str(healthy["backoffFunction"]),
                per_second=None if per_second is None else max(1.0, float(per_second)),
                content_type=content_type,
            )
        except (TypeError, ValueError):
            return cls(content_type=content_type)

    @classmethod
    def carried(cls, info: Mapping[str, str]) -> DeliveryPolicy:
        """The policy a delivery message carries (its `SnsDeliveryPolicy`, `to_json`'s)."""
        return cls.of({"DeliveryPolicy": info.get("SnsDeliveryPolicy", "")}, {})

    def delay(self, retry: int) -> float:
        """Seconds before retry number `retry` (1 for the first): the immediate retries,
        those at the minimum delay, the back-off from minimum to maximum, those at the
        maximum, in that order, as SNS's policy lays them out."""
        if retry <= self.no_delay:
            return 0.0
        retry -= self.no_delay
        if retry <= self.at_min:
            return self.min_delay
        retry -= self.at_min
        steps = self.retries - self.no_delay - self.at_min - self.at_max
        if steps <= 0 or retry > steps:
            return self.max_delay
        low, high = self.min_delay, self.max_delay
        share = retry / steps
        if self.backoff == "exponential" and low > 0:
            return float(low * (high / low) ** share)
        if self.backoff == "geometric" and low > 0:
            return float(low * (high / low) ** (share * share))
        if self.backoff == "arithmetic":
            return low + (high - low) * share * share
        return low + (high - low) * share  # linear

    def to_json(self) -> str:
        return json.dumps(
            {
                "healthyRetryPolicy": {
                    "minDelayTarget": self.min_delay,
                    "maxDelayTarget": self.max_delay,
                    "numRetries": self.retries,
                    "numMaxDelayRetries": self.at_max,
                    "numNoDelayRetries": self.no_delay,
                    "numMinDelayRetries": self.at_min,
                    "backoffFunction": self.backoff,
                },
                "throttlePolicy": (
                    {} if self.per_second is None else {"maxReceivesPerSecond": self.per_second}
                ),
            },
            separators=(",", ":"),
        )


class EndpointRules:
    """The hosts and networks webhook subscriptions may reach (`--sns-http-allow`): host
    names, IP addresses and networks (`10.0.0.0/8`). A host name not listed is allowed
    when every address it resolves to is in an allowed network. Nothing is allowed by
    default: the operator says what the server may call."""

    def __init__(self, specs: Iterable[str] = ()) -> None:
        self.hosts: set[str] = set()
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for spec in specs:
            spec = spec.strip().lower()
            if not spec:
                continue
            try:
                self.networks.append(ipaddress.ip_network(spec, strict=False))
            except ValueError:
                self.hosts.add(spec)

    def refusal(self, url: str, *, resolve: bool = True, unknown: bool = False) -> str | None:
        """Why `url` may not be called (None: it may); without `resolve`, a host name that
        would need resolving is UNRESOLVED; with `unknown`, a host name that resolves to
        nothing (yet) may be called (a subscription to it, whose every POST is checked)."""
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if parts.scheme not in HTTP_PROTOCOLS or not host:
            return "the endpoint must be an http:// or https:// URL"
        if host in self.hosts:
            return None
        try:
            addresses = [ipaddress.ip_address(host)]
        except ValueError:
            if not resolve:
                return UNRESOLVED
            try:
                infos = socket.getaddrinfo(host, parts.port or 443, type=socket.SOCK_STREAM)
            except OSError:
                return None if unknown else f"{host} does not resolve"
            addresses = [ipaddress.ip_address(info[4][0]) for info in infos]
        if addresses and all(any(a in n for n in self.networks) for a in addresses):
            return None
        return (
            f"this server delivers only to the hosts and networks its operator allows"
            f" (--sns-http-allow), and {host} is not among them"
        )


def delivery_headers(attributes: Mapping[str, Any]) -> dict[str, str]:
    """SNS's headers of a POST, from the delivery message's attributes."""
    headers = {
        "Content-Type": str(attributes.get("SnsContentType") or "text/plain; charset=UTF-8"),
        "User-Agent": "Amazon Simple Notification Service Agent",
        "Accept-Encoding": "gzip,deflate",
        "x-amz-sns-message-type": str(attributes.get("SnsType", "Notification")),
        "x-amz-sns-message-id": str(attributes.get("SnsMessageId", "")),
        "x-amz-sns-topic-arn": str(attributes.get("SnsTopicArn", "")),
    }
    if attributes.get("SnsSubscriptionArn"):
        headers["x-amz-sns-subscription-arn"] = str(attributes["SnsSubscriptionArn"])
    if attributes.get("SnsRaw") == "true":
        headers["x-amz-sns-rawdelivery"] = "true"
    return headers


class Webhooks:
    """The deliverer: a worker per delivery queue, found every `scan` seconds."""

    def __init__(self, aio: AsyncClient, rules: EndpointRules, scan: float = 2.0) -> None:
        self.aio = aio
        self.rules = rules
        self.scan = scan
        self._scans = 0
        self.workers: dict[str, asyncio.Task[None]] = {}
        self._http: Any = None
        self._closed = asyncio.Event()

    async def run(self) -> None:
        import httpx

        self._http = httpx.AsyncClient(timeout=POST_TIMEOUT, follow_redirects=False)
        try:
            while not self._closed.is_set():
                try:
                    await self._find()
                except ConveyorError as exc:
                    log.warning("webhook deliveries: cannot list their queues (%s)", exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closed.wait(), self.scan)
        finally:
            for task in self.workers.values():
                task.cancel()
            await asyncio.gather(*self.workers.values(), return_exceptions=True)
            await self._http.aclose()

    def close(self) -> None:
        self._closed.set()

    async def _find(self) -> None:
        """Start a worker for each delivery queue: those of the default namespace at every
        scan, the other regions' and accounts' (found by listing every queue) every tenth."""
        queues = set(await self.aio.list_queues(DELIVERY_PREFIX))
        if self._scans % 10 == 0:
            queues |= {q for q in await self.aio.list_queues() if _is_delivery(q)}
        else:
            queues |= {q for q in self.workers if ":" in q}
        self._scans += 1
        for queue in queues - set(self.workers):
            self.workers[queue] = asyncio.create_task(self._work(queue))
        for queue in set(self.workers) - queues:
            self.workers.pop(queue).cancel()

    async def _work(self, queue: str) -> None:
        """Deliver a delivery queue's messages: up to 10 received at once, POSTed at once,
        those the endpoint took deleted in one batch."""
        q = self.aio.queue(queue)
        next_at = 0.0
        while not self._closed.is_set():
            try:
                got = await q.receive(IN_FLIGHT, wait=5, visibility_timeout=POST_TIMEOUT + 15)
                if not got and await asyncio.to_thread(self._unused, queue):
                    await self.aio.delete_queue(queue)  # unsubscribed, and all delivered
                    return
            except QueueDoesNotExist:
                return
            except ConveyorError as exc:
                log.warning("webhook deliveries of %s: %s", queue, exc)
                await asyncio.sleep(1)
                continue
            infos = [_info(m) for m in got]
            policies = [DeliveryPolicy.carried(info) for info in infos]
            posts = []
            for m, info, policy in zip(got, infos, policies, strict=True):
                if policy.per_second:  # the policy's throttle: one POST every 1/rate seconds
                    now = time.monotonic()
                    next_at = max(next_at, now)
                    await asyncio.sleep(next_at - now)
                    next_at += 1 / policy.per_second
                posts.append(asyncio.create_task(self._post(info, m)))
            failures = await asyncio.gather(*posts)
            taken = [m.receipt or "" for m, why in zip(got, failures, strict=True) if why is None]
            try:
                if taken:
                    await q.delete_batch(taken)
                for m, info, policy, why in zip(got, infos, policies, failures, strict=True):
                    if why is not None:
                        await self._failed(q, m, info, policy, why)
            except ConveyorError as exc:  # receipts gone stale, the queue went away
                log.info("webhook deliveries of %s: %s", queue, exc)

    def _unused(self, queue: str) -> bool:
        """Whether a delivery queue has nothing left to deliver and no subscription (it was
        unsubscribed, or its topic deleted)."""
        client = self.aio.sync
        q = client.queue(queue)
        if q.stats().total:
            return False
        topic = q.attributes.tags.get(TOPIC_TAG)
        if topic is None:
            return False
        try:
            if queue in client.subscriptions(topic):
                return False
            return CONFIRM + queue not in client.topic_settings(topic)
        except TopicDoesNotExist:
            return True

    async def _post(self, info: dict[str, str], m: Message) -> str | None:
        """POST one message: None if the endpoint took it (2xx within the timeout), else
        why not."""
        url = info.get("SnsEndpoint", "")
        why = self.rules.refusal(url, resolve=False)
        if why == UNRESOLVED:  # a host name: resolved off the loop (its addresses may change)
            why = await asyncio.to_thread(self.rules.refusal, url)
        if why is None:
            try:
                r = await self._http.post(url, content=m.body, headers=delivery_headers(info))
                if 200 <= r.status_code < 300:
                    return None
                why = f"HTTP {r.status_code}"
            except Exception as exc:  # refused, reset, timed out: the endpoint's trouble
                why = f"{type(exc).__name__}: {exc}"
        return why

    async def _failed(
        self, q: Any, m: Message, info: dict[str, str], policy: DeliveryPolicy, why: str
    ) -> None:
        """A POST that failed: again after the policy's delay, or, past its retries, to the
        dead-letter queue (or dropped)."""
        retry = m.receive_count  # the attempts so far, this failed one the last
        if retry <= policy.retries:
            delay = policy.delay(retry)
            log.info(
                "delivery to %s failed (%s); again in %g s", info.get("SnsEndpoint"), why, delay
            )
            await q.change_visibility(m.receipt or "", min(delay, 43_200))
            return
        await self._dead_letter(m, info, why)
        await q.delete(m.receipt or "")

    async def _dead_letter(self, m: Message, info: dict[str, str], why: str) -> None:
        target = info.get("SnsDeadLetter")
        if info.get("SnsType", "Notification") != "Notification":
            target = None  # as SNS: a (un)subscription confirmation is never dead-lettered
        if not target:
            endpoint = info.get("SnsEndpoint")
            log.warning("dropped a delivery to %s after its retries (%s)", endpoint, why)
            return
        body = m.body.decode() if isinstance(m.body, bytes) else str(m.body)
        kept = {k: v for k, v in m.attributes.items() if k != "Sns"}
        try:
            await self.aio.queue(str(target)).send(body, attributes=kept or None)
        except ConveyorError as exc:
            log.warning("a delivery's dead-letter queue %s refused it: %s", target, exc)


def _info(m: Message) -> dict[str, str]:
    """What a delivery message carries for its POST (its `Sns` attribute)."""
    try:
        info = json.loads(str(m.attributes.get("Sns", "{}")))
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in info.items()} if isinstance(info, dict) else {}


def _is_delivery(queue: str) -> bool:
    """A delivery queue of any namespace (`region:account:sns-http-...` too)."""
    return queue.rsplit(":", 1)[-1].startswith(DELIVERY_PREFIX)


def _float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number > 0 else None
