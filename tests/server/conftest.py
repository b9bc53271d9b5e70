"""Fixtures: one live server per module over a SQLite store, boto3 clients for it."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Client
from conveyor.server import ServerConfig
from conveyor.server.front.auth import load_credentials

from ..conftest import unavailable
from ..support.credentials import CREDENTIALS
from ..support.live import LiveServer


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    path: Path = tmp_path_factory.mktemp("server") / "conveyor.db"
    client = Client(f"sqlite:///{path}?durability=normal")
    yield client
    client.close()


@pytest.fixture(scope="module")
def server(store: Client) -> Iterator[LiveServer]:
    with LiveServer(store) as live:
        yield live


@pytest.fixture
def sqs(server: LiveServer) -> Any:
    return server.sqs()


@pytest.fixture
def sns(server: LiveServer) -> Any:
    return server.sns()


@pytest.fixture
def name() -> str:
    """A queue name no other test uses."""
    return f"t{uuid.uuid4().hex[:12]}"


def arn_of(sqs: Any, url: str) -> str:
    arn: str = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    return arn


def queue_with_dlq(sqs: Any, name: str, max_receive_count: int = 1) -> tuple[str, str]:
    """A queue `name` whose dead-letter queue is `name`-dlq, both made through the SQS API:
    their URLs (the queue's, the dead-letter queue's)."""
    dlq = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    policy = {"deadLetterTargetArn": arn_of(sqs, dlq), "maxReceiveCount": max_receive_count}
    url = sqs.create_queue(QueueName=name, Attributes={"RedrivePolicy": json.dumps(policy)})
    return url["QueueUrl"], dlq


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Debian's headless Chromium, driven through Selenium."""
    driver_path = shutil.which("chromedriver")
    chromium = shutil.which("chromium")
    if driver_path is None or chromium is None:
        unavailable("Chromium and its chromedriver (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(chromium)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"):
        options.add_argument(arg)
    options.accept_insecure_certs = True  # the TLS proxy's certificate is the test's own
    # Chromium's scratch directories go with the test session's, not into /tmp
    scratch = {**os.environ, "TMPDIR": str(tmp_path_factory.mktemp("chromium"))}
    driver = webdriver.Chrome(service=Service(str(driver_path), env=scratch), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A server that checks SigV4 signatures (`CREDENTIALS`), bearer tokens and a metrics
    token, with a 1 s request timeout."""
    path: Path = tmp_path_factory.mktemp("sec") / "credentials"
    path.write_text(CREDENTIALS)
    config = ServerConfig(
        auth_token="t0ken", metrics_token="scrape", aws_keys=load_credentials(path)
    )
    with Client("memory://") as client, LiveServer(client, config, request_timeout=1) as live:
        yield live
