"""A DynamoDB endpoint for tests: moto in server mode (`tests/support/motoserver.py`:
requests applied one at a time, as DynamoDB applies the writes to one item), started once
per test session on a free loopback port and stopped at its end. Each test gets its own
table."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import suppress
from pathlib import Path
from urllib.request import urlopen

from .waiting import free_port, logged

# moto accepts any credentials; boto3 insists on some
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

ROOT = Path(__file__).resolve().parents[2]
_server: subprocess.Popen[bytes] | None = None
_endpoint: str | None = None
_failed: str | None = None
_log_dir: Path | None = None


def _command(port: int) -> list[str]:
    return [sys.executable, "-m", "tests.support.motoserver", str(port)]


def endpoint() -> str | None:
    """The moto server's URL (started on first call), or None when it cannot run."""
    global _server, _endpoint, _failed
    if _endpoint is not None or _failed is not None:
        return _endpoint
    try:
        import moto.server  # noqa: F401 - it must be installed with its server extra
    except ImportError as exc:
        _failed = f"moto[server] ({exc})"
        return None
    global _log_dir
    why = ""
    for _ in range(2):  # a port taken between its choice and the server's start: once more
        port = free_port()
        _log_dir = Path(tempfile.mkdtemp(prefix="conveyor-moto-"))
        log = _log_dir / "moto.log"
        _server = logged(_command(port), log, append=True, cwd=ROOT)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60  # a loaded machine takes a while to import moto
        while True:
            try:
                with urlopen(f"{url}/moto-api/", timeout=1):
                    _endpoint = url
                    return url
            except OSError:
                if _server.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        why = log.read_text()[-500:]
        stop()
    _failed = f"moto_server (did not start: {why})"
    return None


def unavailable_reason() -> str:
    return _failed or "moto_server"


def fresh_url(**options: str) -> str | None:
    """A store URL on a table of its own, or None when moto cannot run."""
    url = endpoint()
    if url is None:
        return None
    query = "&".join(f"{k}={v}" for k, v in {"endpoint_url": url, **options}.items())
    return f"dynamodb://t{secrets.token_hex(5)}?{query}"


def client() -> object:
    import boto3

    return boto3.client("dynamodb", endpoint_url=endpoint(), region_name="us-east-1")


def drop(url: str) -> None:
    """Delete a test's table."""
    table = url.split("://", 1)[1].split("?", 1)[0]
    with suppress(Exception):
        client().delete_table(TableName=table)  # type: ignore[attr-defined]


def stop() -> None:
    global _server, _endpoint, _log_dir
    if _server is not None and _server.poll() is None:
        _server.terminate()
        try:
            _server.wait(10)
        except subprocess.TimeoutExpired:
            _server.kill()
    _server = None
    _endpoint = None
    if _log_dir is not None:
        shutil.rmtree(_log_dir, ignore_errors=True)
        _log_dir = None
