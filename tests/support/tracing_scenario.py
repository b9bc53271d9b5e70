"""The traced run tests/test_tracing.py checks, in a process of its own: OpenTelemetry's
SDK takes one tracer provider per process, and a provider left set would change every later
test's path through the server (traced requests take ASGI's).

`python -m tests.support.tracing_scenario DIR` sets the SDK up with its in-memory exporter, then: a
boto3 client (propagating W3C context in its HTTP headers, as an instrumented one does) sends
in a span of the test's through an in-process server on a SQLite store, and a Worker handles
the message; an SDK send is pushed to a PushConsumer by the gateway; a Spark source reads a
queue. It prints every finished span as one JSON object a line.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from pathlib import Path
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from conveyor import Client, Worker
from conveyor.push import GatewayConfig, PushConsumer
from conveyor.push.gateway import Gateway

from .live import LiveServer


def main(where: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("scenario")
    facts: dict[str, Any] = {}
    with Client(f"sqlite:///{where}/traced.db") as client:
        with LiveServer(client) as server:
            sqs = server.sqs()

            def carry(request: Any, **_: Any) -> None:
                propagate.inject(request.headers)

            sqs.meta.events.register("before-send.sqs.*", carry)
            url = sqs.create_queue(QueueName="orders")["QueueUrl"]
            with tracer.start_as_current_span("checkout") as checkout:
                sqs.send_message(QueueUrl=url, MessageBody="first")
                sqs.send_message(QueueUrl=url, MessageBody="second")
                facts["trace"] = format(checkout.get_span_context().trace_id, "032x")
            handled: list[str] = []

            def handle(message: Any) -> None:
                with tracer.start_as_current_span("charge card"):
                    handled.append(message.text)

            got = sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=1, MessageAttributeNames=["All"]
            )["Messages"]
            facts["wire_attributes"] = sorted(got[0].get("MessageAttributes", {}))
            Worker(client.queue("orders"), handle).run(until_empty=True)
            facts["handled"] = handled

        # the push gateway delivers a message sent in a span
        client.create_queue("pushed")
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        gateway = Gateway(client, GatewayConfig(port=0))
        asyncio.run_coroutine_threadsafe(gateway.start(), loop).result(30)
        with tracer.start_as_current_span("notify") as notify:
            client.queue("pushed").send("pushed to a consumer")
            facts["push_trace"] = format(notify.get_span_context().trace_id, "032x")
        arrived = threading.Event()
        consumer = PushConsumer(
            f"skmq://127.0.0.1:{gateway.port}", "pushed", lambda m: arrived.set()
        ).start()
        facts["pushed"] = arrived.wait(30)
        consumer.stop()
        asyncio.run_coroutine_threadsafe(gateway.close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)

        # the Spark source's batch read links to what it reads
        with tracer.start_as_current_span("import") as imported:
            client.create_queue("lake").send("read by spark")
            facts["read_trace"] = format(imported.get_span_context().trace_id, "032x")
    from conveyor.spark.options import parse_options
    from conveyor.spark.source import SnapshotReader

    reader = SnapshotReader(
        parse_options({"store": f"sqlite:///{where}/traced.db", "queue": "lake"})
    )
    facts["read_rows"] = sum(
        batch.num_rows for p in reader.partitions() for batch in reader.read(p)
    )
    provider.force_flush()
    print(json.dumps({"facts": facts}))
    for s in exporter.get_finished_spans():
        context = s.get_span_context()
        assert context is not None
        print(
            json.dumps(
                {
                    "name": s.name,
                    "kind": s.kind.name,
                    "trace": format(context.trace_id, "032x"),
                    "span": format(context.span_id, "016x"),
                    "parent": format(s.parent.span_id, "016x") if s.parent else None,
                    "links": [format(link.context.trace_id, "032x") for link in s.links],
                    "attributes": dict(s.attributes or {}),
                    "status": s.status.status_code.name,
                }
            )
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
