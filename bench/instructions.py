"""Instructions a batch call costs, for callgrind: ``valgrind --tool=callgrind
--callgrind-out-file=/dev/null python -m bench.instructions MODE N [STORE]``.

MODE `send` sends N batches of ten 100-byte bodies; `recv` sends 1,000 batches first, then
receives and deletes N batches of ten; `round` sends, receives and deletes one message N
times. All warm up with 50 of each first. Run it with N and
with 0: the difference of the two totals over N is what one call costs, in instructions,
the same from run to run whatever else the machine does (docs/benchmarks.md).

MODE `sqs-send`, `sqs-receive` and `sqs-cycle` count the SQS endpoint's requests instead:
AWS JSON 1.0 requests handed to the server's ASGI application in this process (all but
uvicorn's HTTP parsing and the socket), on the store STORE names: `sqs-send` a
SendMessageBatch of ten 100-byte bodies, `sqs-receive` a ReceiveMessage of ten with
VisibilityTimeout 0 on a queue kept full, `sqs-cycle` a ReceiveMessage of ten, a
SendMessageBatch of ten and a DeleteMessageBatch of what was received.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from conveyor import Client

# a signed request's header (the server checks signatures only where it holds keys)
AUTH = (
    b"AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/sqs/aws4_request,"
    b" SignedHeaders=host;x-amz-date, Signature=0"
)


def sqs(mode: str, n: int, url: str) -> None:
    from conveyor.server.app import ConveyorServer

    app = ConveyorServer(Client(url)).app

    async def call(action: str, request: dict[str, Any]) -> dict[str, Any]:
        raw = json.dumps(request).encode()
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": "/", "raw_path": b"/",
            "query_string": b"", "root_path": "", "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 9324),
            "headers": [
                (b"host", b"127.0.0.1:9324"),
                (b"content-type", b"application/x-amz-json-1.0"),
                (b"x-amz-target", f"AmazonSQS.{action}".encode()),
                (b"authorization", AUTH),
                (b"content-length", str(len(raw)).encode()),
            ],
        }  # fmt: skip
        messages = [{"type": "http.request", "body": raw, "more_body": False}]
        out: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop()
            await asyncio.Event().wait()  # the client stays connected
            raise AssertionError

        async def send(message: dict[str, Any]) -> None:
            out.append(message)

        await app(scope, receive, send)
        body = b"".join(m.get("body", b"") for m in out[1:])
        if out[0]["status"] != 200:
            raise RuntimeError(f"{action}: {out[0]['status']} {body[:300]!r}")
        answer: dict[str, Any] = json.loads(body) if body else {}
        return answer

    async def run() -> None:
        q = (await call("CreateQueue", {"QueueName": "q"}))["QueueUrl"]
        batch = {
            "QueueUrl": q,
            "Entries": [{"Id": str(i), "MessageBody": "x" * 100} for i in range(10)],
        }
        peek = {"QueueUrl": q, "MaxNumberOfMessages": 10, "VisibilityTimeout": 0}
        take = {"QueueUrl": q, "MaxNumberOfMessages": 10, "VisibilityTimeout": 60}

        async def cycle() -> None:  # receive ten, send ten, delete what was received
            got = await call("ReceiveMessage", take)
            await call("SendMessageBatch", batch)
            entries = [
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                for i, m in enumerate(got.get("Messages", []))
            ]
            await call("DeleteMessageBatch", {"QueueUrl": q, "Entries": entries})

        for _ in range(100 + (n if mode == "sqs-cycle" else 0)):
            await call("SendMessageBatch", batch)
        for _ in range(50):  # warm: each request once
            await call("ReceiveMessage", peek)
            await cycle()
        for _ in range(n):
            if mode == "sqs-send":
                await call("SendMessageBatch", batch)
            elif mode == "sqs-receive":
                await call("ReceiveMessage", peek)
            else:
                await cycle()

    asyncio.run(run())


def main() -> None:
    mode, n = sys.argv[1], int(sys.argv[2])
    url = sys.argv[3] if len(sys.argv) > 3 else "memory://instructions"
    if mode.startswith("sqs-"):
        sqs(mode, n, url)
        return
    q = Client(url).create_queue("q")
    bodies = [b"x" * 100] * 10
    for _ in range(50):
        q.send_batch(bodies)
    for _ in range(50):
        got = q.receive(10)
        q.delete_batch([m.receipt or "" for m in got])
    if mode == "send":
        for _ in range(n):
            q.send_batch(bodies)
        return
    if mode == "round":
        for _ in range(n):
            q.send(b"x" * 100)
            [m] = q.receive()
            q.delete(m.receipt or "")
        return
    for _ in range(1000):
        q.send_batch(bodies)
    for _ in range(n):
        got = q.receive(10)
        q.delete_batch([m.receipt or "" for m in got])


if __name__ == "__main__":
    main()
