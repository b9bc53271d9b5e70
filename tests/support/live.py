"""A live `conveyor serve` application on 127.0.0.1 (uvicorn in a thread)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import boto3
import uvicorn
from botocore.config import Config

from conveyor import Client
from conveyor.server import ConveyorServer, ServerConfig
from conveyor.server.front.protocol import GuardedHttpProtocol, guarded


class LiveServer:
    def __init__(
        self,
        client: Client,
        config: ServerConfig | None = None,
        request_timeout: float = 30.0,
        http: type[GuardedHttpProtocol] | None = None,
        keep_alive: int = 5,
    ) -> None:
        self.conveyor = ConveyorServer(client, config)
        # bound here and handed to uvicorn: no other process can take the port between its
        # choice and the server's start
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = uvicorn.Config(
            self.conveyor.app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="off",
            http=http or guarded(request_timeout),
            timeout_keep_alive=keep_alive,
            proxy_headers=False,  # as conveyor serve: forwarding headers are --trusted-proxy's
        )
        self.uv = uvicorn.Server(cfg)
        self.thread = threading.Thread(
            target=self.uv.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.uv.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.conveyor.drain()
        self.uv.should_exit = True
        self.thread.join(10)
        self.sock.close()

    def sqs(self, region: str = "us-east-1", key: str = "AKIDTEST", secret: str = "x") -> Any:
        return self.aws("sqs", region, key, secret)

    def sns(
        self,
        region: str = "us-east-1",
        key: str = "AKIDTEST",
        secret: str = "x",
        *,
        validate: bool = True,
    ) -> Any:
        """An SNS client; without `validate`, boto3 sends what its model would refuse."""
        return self.aws("sns", region, key, secret, validate=validate)

    def aws(
        self, service: str, region: str, key: str, secret: str, *, validate: bool = True
    ) -> Any:
        return boto3.client(
            service,
            endpoint_url=self.url,
            region_name=region,
            aws_access_key_id=key,
            aws_secret_access_key=secret,
            config=Config(parameter_validation=validate),
        )
