"""Traces through queues (conveyor/tracing.py), recorded by OpenTelemetry's in-memory
exporter in tests/tracing_scenario.py's process: one trace from a boto3 send through the
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
        [sys.executable, "-m", "tests.tracing_scenario", str(where)],
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
