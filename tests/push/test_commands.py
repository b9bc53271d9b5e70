"""The push gateway's commands: `conveyor gateway`, `conveyor serve --tcp`, and a consumer
process stopped by SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from conveyor import Client
from conveyor.push import (
    PushConsumer,
    PushProducer,
)

from ..support.push import Start
from ..support.waiting import free_port, until, wait_port


def test_conveyor_gateway_command(tmp_path: Path) -> None:
    port = free_port()
    conf = tmp_path / "conf.json"
    conf.write_text(json.dumps({"listener_host": "127.0.0.1", "listener_port": str(port)}))
    store = f"sqlite:///{tmp_path / 'gw.db'}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "conveyor", "--store", store, "gateway", "--conf", str(conf)],
        stderr=subprocess.PIPE,
    )
    try:
        wait_port(proc, port)
        got: list[bytes] = []
        url = f"skmq://127.0.0.1:{port}"
        with PushConsumer(url, "cmd", lambda m: got.append(m.content)):
            with PushProducer(url) as producer:
                producer.send("cmd", b"via the command")
            until(lambda: got == [b"via the command"], what="delivery")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    _, err = proc.communicate(timeout=30)  # (and its pipe closed)
    assert b"push gateway listening on 127.0.0.1" in err
    with Client(store) as client:
        assert client.queue("cmd").stats().deleted == 1


def test_serve_with_tcp_beside_http(tmp_path: Path) -> None:
    import boto3

    http, tcp = free_port(), free_port()
    store = f"sqlite:///{tmp_path / 'both.db'}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "conveyor", "--store", store, "serve", "--port", str(http),
         "--tcp", f"127.0.0.1:{tcp}"],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_port(proc, http, tcp)
        with PushProducer(f"skmq://127.0.0.1:{tcp}") as producer:
            producer.send("mixed", b"from tcp", msgid="x-1")
        sqs = boto3.client(
            "sqs",
            endpoint_url=f"http://127.0.0.1:{http}",
            region_name="us-east-1",
            aws_access_key_id="k",
            aws_secret_access_key="s",
        )
        url = sqs.get_queue_url(QueueName="mixed")["QueueUrl"]
        got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]
        assert [(m["MessageId"], m["Body"]) for m in got] == [("x-1", "from tcp")]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_push_consumer_stops_gracefully_on_sigterm(start: Start, tmp_path: Path) -> None:
    gw = start("sqlite")
    log = tmp_path / "graceful.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.push", gw.url, "graceful", str(log), "0.5"],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    try:
        until(lambda: log.exists() and "registered" in log.read_text(), what="registration")
        with PushProducer(gw.url) as producer:
            producer.send("graceful", b"finish me", msgid="g-1")
        until(lambda: "got g-1" in log.read_text(), what="the handler starting")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "done g-1" in log.read_text()
    until(lambda: gw.client.queue("graceful").stats().deleted == 1, what="the ack")
