"""The floor for `bench.server`'s wrk runs: an ASGI application that reads each request's
body and answers a fixed JSON document, served by uvicorn the way `conveyor serve` is
(httptools, uvloop when installed). ``python -m bench.trivial PORT``."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import uvicorn

Message = MutableMapping[str, Any]

BODY = b'{"Successful":[],"Failed":[]}'
HEADERS = [(b"content-type", b"application/x-amz-json-1.0"), (b"content-length", b"29")]


async def app(
    scope: MutableMapping[str, Any],
    receive: Callable[[], Awaitable[Message]],
    send: Callable[[Message], Awaitable[None]],
) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})


def main() -> None:
    port = int(sys.argv[1])
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        http="httptools",
        loop="auto",
        lifespan="off",
        access_log=False,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
