"""`conveyor serve` behind Debian's nginx, as docs/deploy.md sets it up: TLS at nginx with a
certificate made here with openssl, deploy/nginx.conf as it is in the repository, and the
server behind on loopback HTTP or on a Unix socket. boto3 (SQS and SNS, SigV4-signed), the
AWS CLI and the dashboard in Chromium work through it, and queue URLs name the proxy."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from conveyor import Client

from ..conftest import unavailable
from ..support.certs import make_cert
from ..support.waiting import free_port, logged, unix_socket_accepts

pytestmark = pytest.mark.slow

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
TOKEN = "proxy-token"
KEY_ID, SECRET = "AKIDPROXY", "proxysecret"


def site(upstream: str, port: int, tls: Path, *, keep_host: bool) -> str:
    """deploy/nginx.conf with this test's upstream, port and certificate; without the line
    that keeps the client's Host when `keep_host` is false (a proxy that rewrites Host, whose
    X-Forwarded-Host is then what the server checks signatures against)."""
    text = (DEPLOY / "nginx.conf").read_text()
    for old, new in [
        ("server 127.0.0.1:9324;", f"server {upstream};"),
        ("listen 443 ssl;", f"listen 127.0.0.1:{port} ssl;"),
        ("/etc/ssl/conveyor/", f"{tls}/"),
        ("proxy_set_header Host $http_host;", "" if not keep_host else None),
    ]:
        assert old in text, f"deploy/nginx.conf no longer has {old!r}"
        if new is not None:
            text = text.replace(old, new)
    return text


class Nginx:
    """Debian's nginx in the foreground with a configuration of its own in `where`."""

    def __init__(self, where: Path, site_text: str, port: int) -> None:
        binary = shutil.which("nginx", path=os.environ.get("PATH", "") + ":/usr/sbin")
        if binary is None:
            unavailable("nginx (apt-get install nginx)")
        self.where = where
        (where / "site.conf").write_text(site_text)
        user = "user root;" if os.getuid() == 0 else ""  # its workers reach the socket
        (where / "nginx.conf").write_text(
            f"""
worker_processes 1;
{user}
pid {where}/nginx.pid;
error_log {where}/error.log;
events {{ worker_connections 256; }}
http {{
    access_log {where}/access.log;
    client_body_temp_path {where}/body;
    proxy_temp_path {where}/proxy;
    fastcgi_temp_path {where}/fastcgi;
    uwsgi_temp_path {where}/uwsgi;
    scgi_temp_path {where}/scgi;
    include {where}/site.conf;
}}
"""
        )
        self.proc = logged(
            [str(binary), "-p", str(where), "-c", str(where / "nginx.conf"), "-g", "daemon off;"],
            where / "nginx.out",
        )
        wait_for(lambda: connects(port), self.proc, lambda: self.log())

    def log(self) -> str:
        return "\n".join(
            p.read_text()
            for p in (self.where / "nginx.out", self.where / "error.log")
            if p.exists()
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # nginx's graceful stop
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def connects(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def wait_for(ready: Any, proc: subprocess.Popen[Any], log: Any) -> None:
    deadline = time.monotonic() + 30
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"it did not start:\n{log()}")
        time.sleep(0.05)


@dataclass
class Proxied:
    url: str  # https://localhost:PORT, nginx's
    cert: Path
    store: str


@pytest.fixture(scope="module", params=["tcp", "unix"])
def proxied(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proxied]:
    """nginx with TLS in front of conveyor serve: on loopback TCP behind a proxy that rewrites
    Host (X-Forwarded-Host carries the client's), or on a Unix socket with Host kept."""
    where = tmp_path_factory.mktemp(f"proxy-{request.param}")
    cert, _ = make_cert(where)
    credentials = where / "aws-credentials"
    credentials.write_text(
        f"[default]\naws_access_key_id = {KEY_ID}\naws_secret_access_key = {SECRET}\n"
    )
    store = f"sqlite:///{where}/conveyor.db"
    command = [
        sys.executable, "-m", "conveyor", "serve", "--store", store, "--auth-token", TOKEN,
        "--aws-credentials", str(credentials),
    ]  # fmt: skip
    if request.param == "tcp":
        backend = free_port()
        command += ["--port", str(backend), "--trusted-proxy", "127.0.0.1"]
        upstream = f"127.0.0.1:{backend}"
        check = httpx.Client(base_url=f"http://127.0.0.1:{backend}")
    else:
        path = where / "conveyor.sock"
        command += ["--unix", str(path), "--trusted-proxy", "unix"]
        upstream = f"unix:{path}"
        check = httpx.Client(
            base_url="http://conveyor", transport=httpx.HTTPTransport(uds=str(path))
        )
    log = where / "serve.log"
    server = logged(command, log)

    def ready() -> bool:
        if request.param == "unix" and not unix_socket_accepts(path):  # before httpcore's
            return False
        try:
            return check.get("/healthz").status_code == 200
        except httpx.HTTPError:
            return False

    port = free_port()
    nginx = None
    try:
        wait_for(ready, server, log.read_text)
        if request.param == "unix":
            assert oct(path.stat().st_mode & 0o777) == "0o660"  # the server's user and group
        nginx = Nginx(where, site(upstream, port, where, keep_host=request.param == "unix"), port)
        yield Proxied(url=f"https://localhost:{port}", cert=cert, store=store)
        assert "[error]" not in nginx.log(), nginx.log()
    finally:
        check.close()
        if nginx is not None:
            nginx.stop()
        server.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0, log.read_text()
    if request.param == "unix":
        assert not path.exists()  # the server removes its socket as it stops


def client(proxied: Proxied, service: str, secret: str = SECRET) -> Any:
    return boto3.client(
        service, endpoint_url=proxied.url, region_name="us-east-1", aws_access_key_id=KEY_ID,
        aws_secret_access_key=secret, verify=str(proxied.cert),
        config=Config(retries={"max_attempts": 1}),
    )  # fmt: skip


def test_boto3_through_the_proxy_signed_with_urls_on_the_proxy(proxied: Proxied) -> None:
    sqs = client(proxied, "sqs")
    url = sqs.create_queue(QueueName="orders")["QueueUrl"]
    assert url == f"{proxied.url}/000000000000/orders"  # the client's scheme and host
    assert sqs.get_queue_url(QueueName="orders")["QueueUrl"] == url
    started = time.monotonic()
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)
    assert time.monotonic() - started >= 0.9  # a long poll held through the proxy
    sent = sqs.send_message(QueueUrl=url, MessageBody="through nginx")
    [got] = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]
    assert got["MessageId"] == sent["MessageId"] and got["Body"] == "through nginx"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got["ReceiptHandle"])
    # SNS's Query protocol signs a form body: publish reaches a subscribed queue
    sns = client(proxied, "sns")
    topic = sns.create_topic(Name="events")["TopicArn"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    sns.subscribe(
        TopicArn=topic, Protocol="sqs", Endpoint=arn, Attributes={"RawMessageDelivery": "true"}
    )
    sns.publish(TopicArn=topic, Message="fanned out")
    [fanned] = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]
    assert fanned["Body"] == "fanned out"
    # a wrong secret is still refused: the proxy changes nothing about who may sign
    with pytest.raises(ClientError) as refused:
        client(proxied, "sqs", secret="wrong").list_queues()
    assert refused.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    with Client(proxied.store) as direct:  # in the store, where the server put it
        assert direct.queue("orders").stats().in_flight == 1


def test_the_aws_cli_through_the_proxy(proxied: Proxied) -> None:
    aws = shutil.which("aws", path=str(Path(sys.executable).parent)) or shutil.which("aws")
    if aws is None:
        pytest.fail("the AWS CLI is not installed (pip install awscli)")
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }

    def run(*args: str) -> Any:
        done = subprocess.run(
            [aws, "--endpoint-url", proxied.url, "--ca-bundle", str(proxied.cert),
             "--output", "json", "sqs", *args],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout) if done.stdout.strip() else None

    url = run("create-queue", "--queue-name", "cli")["QueueUrl"]
    assert url == f"{proxied.url}/000000000000/cli"
    run("send-message", "--queue-url", url, "--message-body", "from the cli")
    [got] = run("receive-message", "--queue-url", url, "--wait-time-seconds", "5")["Messages"]
    assert got["Body"] == "from the cli"


def test_the_dashboard_through_the_proxy(browser: Any, proxied: Proxied) -> None:
    from selenium.webdriver.common.by import By

    with Client(proxied.store) as direct:
        direct.create_queue("seen-through-nginx")
    browser.get(f"{proxied.url}/ui")
    deadline = time.monotonic() + 20
    while not browser.find_element(By.ID, "login").is_displayed():
        assert time.monotonic() < deadline, "no login"
        time.sleep(0.1)
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.ID, "login-submit").click()
    row = 'tr[data-queue="seen-through-nginx"]'
    while not browser.find_elements(By.CSS_SELECTOR, row):
        assert time.monotonic() < deadline, "the queues did not show"
        time.sleep(0.1)
    assert browser.current_url.startswith(proxied.url)
    browser.execute_script("sessionStorage.clear()")
