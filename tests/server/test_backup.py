"""Online backup and restore of the embedded store (docs/deploy.md): a backup taken while a
server sends and receives holds every message acknowledged before it began, once; restored
into a new server, the messages in flight at the backup are visible again."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from .test_serve_process import ServeProcess

pytestmark = pytest.mark.slow


def cli(*args: str, code: int = 0) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "conveyor", *args], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == code, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def test_a_backup_under_load_restores_every_acknowledged_message_once(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/live.db"
    server = ServeProcess(tmp_path, store)
    client = server.sqs()
    url = client.create_queue(QueueName="work", Attributes={"VisibilityTimeout": "600"})["QueueUrl"]
    sent: list[tuple[float, str]] = []  # (acknowledged at, id)
    deleted: list[tuple[float, str]] = []
    stop = threading.Event()

    def produce() -> None:
        c = server.sqs()
        i = 0
        while not stop.is_set():
            entries = [{"Id": str(k), "MessageBody": f"m{i + k}"} for k in range(10)]
            out = c.send_message_batch(QueueUrl=url, Entries=entries)
            now = time.monotonic()
            sent.extend((now, s["MessageId"]) for s in out["Successful"])
            i += 10

    def consume() -> None:
        c = server.sqs()
        while not stop.is_set():
            got = c.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
            keep = got[: len(got) // 2]  # half is left in flight
            if keep:
                c.delete_message_batch(
                    QueueUrl=url,
                    Entries=[{"Id": str(k), "ReceiptHandle": m["ReceiptHandle"]}
                             for k, m in enumerate(keep)],
                )  # fmt: skip
                now = time.monotonic()
                deleted.extend((now, m["MessageId"]) for m in keep)

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.5)
        began = time.monotonic()
        said = cli("--store", store, "backup", str(tmp_path / "backup.db"))
        ended = time.monotonic()
        time.sleep(0.5)  # and the load goes on after it
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        server.stop()
    assert "backed up" in said
    restored = f"sqlite:///{tmp_path}/restored.db"
    said = cli("--store", restored, "restore", str(tmp_path / "backup.db"))
    assert "visible again" in said
    # what must be there: sent before the backup began, not deleted by the time it ended;
    # what may be there: anything sent before it ended and not deleted before it began
    must = {i for at, i in sent if at < began} - {i for at, i in deleted if at < ended}
    may = {i for at, i in sent if at < ended} - {i for at, i in deleted if at < began}
    assert len(must) > 100
    (tmp_path / "again").mkdir()
    again = ServeProcess(tmp_path / "again", restored)
    try:
        c = again.sqs()
        back = c.get_queue_url(QueueName="work")["QueueUrl"]
        ids: list[str] = []
        while True:  # everything is visible: the messages in flight at the backup too
            got = c.receive_message(QueueUrl=back, MaxNumberOfMessages=10).get("Messages", [])
            if not got:
                break
            ids += [m["MessageId"] for m in got]
    finally:
        again.stop()
    assert len(ids) == len(set(ids)), "a message came back twice"
    assert must <= set(ids) <= may, (len(must - set(ids)), len(set(ids) - may))


def test_backup_and_restore_refuse_what_would_lose_data(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/a.db"
    cli("--store", store, "queue", "create", "q")
    cli("--store", store, "backup", str(tmp_path / "b.db"))
    said = cli("--store", store, "backup", str(tmp_path / "b.db"), code=1)
    assert "exists" in said  # never over an earlier backup
    said = cli("--store", store, "restore", str(tmp_path / "b.db"), code=1)
    assert "--replace" in said  # never over a store unasked
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 100)
    said = cli("--store", f"sqlite:///{tmp_path}/c.db", "restore", str(tmp_path / "junk.db"),
               code=1)  # fmt: skip
    assert "junk.db" in said
    assert not (tmp_path / "c.db").exists() or os.path.getsize(tmp_path / "c.db") == 0
    said = cli("--store", "memory://", "backup", str(tmp_path / "m.db"), code=1)
    assert "docs/deploy.md" in said


def test_restore_refuses_a_store_a_server_has_open(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/live.db"
    cli("--store", store, "queue", "create", "q")
    cli("--store", store, "backup", str(tmp_path / "b.db"))
    server = ServeProcess(tmp_path, store)  # idle: it only has the file open
    try:
        said = cli("--store", store, "restore", "--replace", str(tmp_path / "b.db"), code=1)
        assert "in use" in said and "stop the servers" in said
        server.sqs().create_queue(QueueName="still-served")  # and the server is unharmed
    finally:
        server.stop()
    cli("--store", store, "restore", "--replace", str(tmp_path / "b.db"))
    assert "still-served" not in cli("--store", store, "queue", "list")
