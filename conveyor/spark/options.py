"""Options of the `conveyor` Spark data source, checked before any job starts.

Spark hands options over lower-cased and as strings; each is parsed here once, on the
driver, and a wrong one fails the query with a message saying what to pass instead.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from ..exceptions import InvalidInput
from ..validation import check_queue_name

KNOWN = {
    "store",
    "queue",
    "source",
    "numpartitions",
    "maxmessagesperbatch",
    "leasetimeout",
    "stream",
    "sinkid",
    "checkpointlocation",
    "path",
}


@dataclass(frozen=True)
class Options:
    store: str
    queue: str
    source: str = "queue"  # or "archive"
    partitions: int = 4
    max_per_batch: int = 10_000
    lease_timeout: float = 3600.0
    stream: str = "spark"
    sink: str | None = None


def _int(options: dict[str, str], key: str, default: int, low: int, high: int) -> int:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInput(f"option {key}={raw!r} is not a whole number") from None
    if not low <= value <= high:
        raise InvalidInput(f"option {key}={value} is out of range: use {low} to {high}")
    return value


def parse_options(raw: dict[str, Any]) -> Options:
    options = {str(k).lower(): str(v) for k, v in raw.items()}
    unknown = sorted(k for k in options if k not in KNOWN and not k.startswith("spark."))
    if unknown:
        raise InvalidInput(
            f"unknown option(s) {', '.join(unknown)} for format 'conveyor': use"
            " store, queue, source, numPartitions, maxMessagesPerBatch, leaseTimeout, stream,"
            " sinkId"
        )
    store = options.get("store")
    if not store or "://" not in store:
        raise InvalidInput(
            "option 'store' is required: a store URL such as sqlite:///path/conveyor.db or"
            " postgresql://user@host/db"
        )
    if store.startswith("memory:"):
        raise InvalidInput(
            "a memory:// store lives in one process and Spark tasks run in others: use a"
            " sqlite:// file or a database store"
        )
    queue = options.get("queue") or options.get("path")
    if not queue:
        raise InvalidInput("option 'queue' is required: the name of the queue to read or write")
    check_queue_name(queue)
    source = options.get("source", "queue")
    if source not in ("queue", "archive"):
        raise InvalidInput(f"option source={source!r} is not valid: use 'queue' or 'archive'")
    raw_timeout = options.get("leasetimeout", "3600")
    try:
        timeout = float(raw_timeout)
    except ValueError:
        raise InvalidInput(f"option leaseTimeout={raw_timeout!r} is not a number") from None
    if not 1 <= timeout <= 43200:
        raise InvalidInput(
            f"option leaseTimeout={timeout:g} is out of range: use 1 to 43200 seconds (12 h,"
            " the longest visibility timeout)"
        )
    stream = options.get("stream", "spark")
    if not 1 <= len(stream) <= 200:
        raise InvalidInput("option 'stream' must be 1 to 200 characters")
    sink = options.get("sinkid")
    if sink is None and options.get("checkpointlocation"):
        digest = hashlib.sha256(options["checkpointlocation"].encode()).hexdigest()[:24]
        sink = f"checkpoint:{digest}"
    if sink is not None and not 1 <= len(sink) <= 200:
        raise InvalidInput("option 'sinkId' must be 1 to 200 characters")
    return Options(
        store=store,
        queue=queue,
        source=source,
        partitions=_int(options, "numpartitions", 4, 1, 10_000),
        max_per_batch=_int(options, "maxmessagesperbatch", 10_000, 1, 1_000_000),
        lease_timeout=timeout,
        stream=stream,
        sink=sink,
    )
