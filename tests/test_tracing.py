"""Traces through queues (conveyor/tracing.py), recorded by OpenTelemetry's in-memory
exporter in tests/support/tracing_scenario.py's process: one trace from a boto3 send through the
server and its store call to a Worker's handler; the push gateway's delivery and the Spark
source's read continue the traces of what they take; and without a tracer provider, nothing
is added to messages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conveyor import Client

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    where = tmp_path_factory.mktemp("traced")
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.tracing_scenario", str(where)],
        capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return lines[0]["facts"], lines[1:]


def one(spans: list[dict[str, Any]], name: str, **where: Any) -> dict[str, Any]:
    found = [s for s in spans if s["name"] == name and all(s[k] == v for k, v in where.items())]
    assert found, f"no span {name} {where} among {[s['name'] for s in spans]}"
    return found[0]


def test_one_trace_from_a_boto3_send_to_a_workers_handler(
    traced: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    facts, spans = traced
    trace = facts["trace"]
    checkout = one(spans, "checkout", trace=trace)
    requests = [s for s in spans if s["name"] == "SQS SendMessage"]
    assert len(requests) == 2
    for request in requests:  # the server continues the client's trace
        assert request["kind"] == "SERVER" and request["trace"] == trace
        assert request["parent"] == checkout["span"]
        assert request["attributes"]["http.response.status_code"] == 200
    stores = [s for s in spans if s["name"] == "send orders"]
    assert {s["parent"] for s in stores} == {r["span"] for r in requests}  # a store call each
    assert all(s["kind"] == "CLIENT" and s["attributes"]["db.system.name"] == "sqlite"
               for s in stores)  # fmt: skip
    assert facts["handled"] == ["second"]  # boto3 received the first
    process = one(spans, "process orders", kind="CONSUMER")
    assert process["trace"] == trace  # the Worker continues the trace
    assert process["parent"] in {s["span"] for s in stores}
    handler = one(spans, "charge card")
    assert handler["trace"] == trace and handler["parent"] == process["span"]
    # its acknowledgement is part of the processing
    delete = one(spans, "delete orders")
    assert delete["trace"] == trace and delete["parent"] == process["span"]
    # receives, by the Worker and over the wire, link to the contexts of what they got
    receives = [s for s in spans if s["name"] == "receive orders" and s["links"]]
    assert len(receives) == 2 and all(s["links"] == [trace] for s in receives)
    wire = one(spans, "SQS ReceiveMessage")
    assert any(s["parent"] == wire["span"] for s in receives)
    # the context is a message attribute any SQS client reads, W3C's traceparent
    assert facts["wire_attributes"] == ["traceparent"]


def test_the_gateway_and_the_spark_source_continue_the_trace(
    traced: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    facts, spans = traced
    assert facts["pushed"]
    deliver = one(spans, "deliver pushed", kind="CONSUMER")
    assert deliver["trace"] == facts["push_trace"]
    assert deliver["parent"] == one(spans, "send pushed")["span"]
    assert deliver["attributes"]["messaging.consumer.group.name"] == "pushed"
    assert facts["read_rows"] == 1
    read = one(spans, "read lake", kind="CONSUMER")
    assert read["links"] == [facts["read_trace"]]
    assert read["attributes"]["messaging.batch.message_count"] == 1


def test_without_a_tracer_provider_messages_carry_nothing(tmp_path: Path) -> None:
    """This process sets no provider: a send adds no attribute, whatever is imported."""
    import opentelemetry.trace  # noqa: F401 - imported, yet no provider set

    from conveyor import tracing

    assert tracing.active() is None
    with Client(f"sqlite:///{tmp_path}/plain.db") as client:
        q = client.create_queue("plain")
        q.send("x")
        q.send("y", attributes={"k": "v"})
        assert [m.attributes for m in q.receive(10)] == [{}, {"k": "v"}]


def test_conveyor_serve_under_opentelemetry_instrument(tmp_path: Path) -> None:
    """docs/deploy.md's way to trace a server: `opentelemetry-instrument` sets the SDK up
    from its flags (here the console exporter); a request carrying `traceparent` gets a
    server span in that trace, and the message it sends carries the trace on."""
    import os
    import signal
    import time

    import httpx

    from .support.waiting import free_port, logged

    instrument = Path(sys.executable).parent / "opentelemetry-instrument"
    if not instrument.exists():
        pytest.skip("opentelemetry-distro is not installed (the dev extra has it)")
    port = free_port()
    spans = tmp_path / "spans.txt"
    env = {**os.environ, "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_SERVICE_NAME": "queues"}
    server = logged(
        [str(instrument), "--traces_exporter", "console", "--metrics_exporter", "none",
         "--logs_exporter", "none", str(Path(sys.executable).parent / "conveyor"),
         "--store", f"sqlite:///{tmp_path}/c.db", "serve", "--port", str(port)],
        spans, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url + "/livez").raise_for_status()
                break
            except httpx.HTTPError:
                assert server.poll() is None and time.monotonic() < deadline, "no server"
                time.sleep(0.1)
        sqs = {"Content-Type": "application/x-amz-json-1.0"}
        httpx.post(url, headers={**sqs, "X-Amz-Target": "AmazonSQS.CreateQueue"},
                   json={"QueueName": "traced"}).raise_for_status()  # fmt: skip
        queue_url = f"{url}/000000000000/traced"
        httpx.post(
            url,
            headers={**sqs, "X-Amz-Target": "AmazonSQS.SendMessage",
                     "traceparent": f"00-{trace_id}-{parent}-01"},
            json={"QueueUrl": queue_url, "MessageBody": "hello"},
        ).raise_for_status()  # fmt: skip
        got = httpx.post(
            url,
            headers={**sqs, "X-Amz-Target": "AmazonSQS.ReceiveMessage"},
            json={"QueueUrl": queue_url, "MessageAttributeNames": ["All"]},
        ).json()["Messages"][0]
        carried = got["MessageAttributes"]["traceparent"]["StringValue"]
        assert carried.split("-")[1] == trace_id and carried.split("-")[2] != parent
        deadline = time.monotonic() + 20
        while '"SQS SendMessage"' not in spans.read_text():
            assert time.monotonic() < deadline, spans.read_text()[-2000:]
            time.sleep(0.1)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    printed = json.loads("[" + spans.read_text().replace("}\n{", "},\n{") + "]")
    send = next(s for s in printed if s["name"] == "SQS SendMessage")
    assert send["context"]["trace_id"] == f"0x{trace_id}" and send["parent_id"] == f"0x{parent}"
    assert send["kind"] == "SpanKind.SERVER" and send["resource"]["attributes"][
        "service.name"] == "queues"  # fmt: skip
    store = next(s for s in printed if s["name"] == "send traced")
    assert store["context"]["trace_id"] == f"0x{trace_id}"
    assert store["attributes"]["db.system.name"] == "sqlite"
    assert carried.split("-")[2] == store["context"]["span_id"][2:]
