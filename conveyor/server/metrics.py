"""Server metrics: Prometheus exposition (prometheus_client) and optional StatsD (statsd).

Queue figures are read from the store when `/metrics` is scraped, so every server of a
shared store reports the same totals. StatsD gets the predecessor's per-queue names,
``<queue>.sent.count``, ``received.count``, ``deleted.count`` counted by this server, and
the gauges ``depth.count``, ``approximate_depth.count`` and ``fill.count`` (percent of the
last receive batch that was filled).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..aio import Waits
from ..client import Client
from .counts import SharedCounts

log = logging.getLogger("conveyor.server")

LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    25,
)


class QueueCollector(Collector):
    def __init__(self, client: Client, counts: SharedCounts, waits: Waits | None = None) -> None:
        self.client = client
        self.counts = counts
        self.waits = waits

    def collect(self) -> Iterator[Metric]:
        counters = {
            k: CounterMetricFamily(f"conveyor_messages_{k}", f"Messages {k}", labels=["queue"])
            for k in ("sent", "received", "deleted")
        }
        gauges = {
            k: GaugeMetricFamily(f"conveyor_queue_{k}", help_text, labels=["queue"])
            for k, help_text in (
                ("visible", "Messages ready to be received"),
                ("in_flight", "Messages received and not yet deleted"),
                ("delayed", "Messages waiting for their delay to pass"),
                ("dead", "Messages moved to the dead-letter queue"),
                ("oldest_age_seconds", "Age of the oldest message"),
            )
        }
        for s in self.counts.every(self.client):
            name = s.queue
            counters["sent"].add_metric([name], s.sent)
            counters["received"].add_metric([name], s.received)
            counters["deleted"].add_metric([name], s.deleted)
            gauges["visible"].add_metric([name], s.ready)
            gauges["in_flight"].add_metric([name], s.in_flight)
            gauges["delayed"].add_metric([name], s.delayed)
            gauges["dead"].add_metric([name], s.dead)
            gauges["oldest_age_seconds"].add_metric([name], s.oldest_age or 0.0)
        yield from counters.values()
        yield from gauges.values()
        if self.waits is not None:
            waiting = GaugeMetricFamily(
                "conveyor_receives_waiting",
                "Receives of this server waiting in a long poll",
                labels=["queue"],
            )
            for name, count in sorted(self.waits.counts().items()):
                waiting.add_metric([name], count)
            yield waiting


class Metrics:
    def __init__(
        self,
        client: Client,
        *,
        statsd: str | None = None,
        prefix: str = "",
        waits: Waits | None = None,
        counts: SharedCounts | None = None,
    ) -> None:
        self.client = client
        self.counts = counts or SharedCounts()
        self.registry = CollectorRegistry()
        self.registry.register(QueueCollector(client, self.counts, waits))
        self.latency = Histogram(
            "conveyor_request_seconds",
            "Request latency by API and action",
            ["api", "action", "status"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._latencies: dict[tuple[str, str, int], Histogram] = {}
        self.statsd = None
        if statsd:
            import statsd as statsd_lib

            host, _, port = statsd.rpartition(":")
            self.statsd = statsd_lib.StatsClient(
                host or "127.0.0.1", int(port), prefix=prefix or None
            )

    def observe(self, api: str, action: str, status: int, seconds: float) -> None:
        key = (api, action, status)
        child = self._latencies.get(key)
        if child is None:  # labels() checks and locks at every call: once per series
            child = self._latencies[key] = self.latency.labels(api, action, str(status))
        child.observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    # -- StatsD ---------------------------------------------------------------------------

    def sent(self, queue: str, n: int) -> None:
        if self.statsd is not None and n:
            self.statsd.incr(f"{queue}.sent.count", n)

    def received(self, queue: str, n: int, requested: int) -> None:
        if self.statsd is not None:
            if n:
                self.statsd.incr(f"{queue}.received.count", n)
            self.statsd.gauge(f"{queue}.fill.count", round(100 * n / max(requested, 1)))

    def deleted(self, queue: str, n: int) -> None:
        if self.statsd is not None and n:
            self.statsd.incr(f"{queue}.deleted.count", n)

    def flush_depths(self) -> None:
        """Depth gauges for every queue (run every few seconds while StatsD is on)."""
        if self.statsd is None:
            return
        for s in self.counts.every(self.client):
            self.statsd.gauge(f"{s.queue}.depth.count", s.total)
            self.statsd.gauge(f"{s.queue}.approximate_depth.count", s.ready)

    async def run_flusher(self, interval: float) -> None:
        while True:
            try:
                await asyncio.to_thread(self.flush_depths)
            except Exception:  # metrics must never take the server down
                log.exception("StatsD depth flush failed")
            await asyncio.sleep(interval)
