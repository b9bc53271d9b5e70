"""moto in server mode with its requests applied one at a time: ``python -m tests.support.motoserver
PORT``.

moto's DynamoDB keeps no lock across request threads, so two conditional writes to one item
that arrive together can both pass their condition; DynamoDB applies the writes to an item one
at a time, so one of them fails. Serializing requests restores that (connections are still
accepted concurrently).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple


def main() -> None:
    port = int(sys.argv[1])
    app = DomainDispatcherApplication(create_backend_app)
    lock = threading.Lock()

    def serialized(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        with lock:
            return list(app(environ, start_response))

    run_simple("127.0.0.1", port, serialized, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
