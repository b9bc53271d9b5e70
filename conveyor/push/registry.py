"""The push gateway's consumers in the store's consumer registry (where the SDK's workers
also register): entered as they register, written again while they stay (by the heartbeat
loop, every `every` seconds) and removed as they go. An entry not written again for
`timeout` lapses, so that the consumers of a gateway that died go too."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ..client import Client
from ..exceptions import ConveyorError
from ..models import Capability
from .config import GatewayConfig
from .peers import Peer

log = logging.getLogger("conveyor.push")

StoreCall = Callable[..., Awaitable[Any]]


class ConsumerRegistry:
    def __init__(self, client: Client, config: GatewayConfig, call: StoreCall) -> None:
        self.client = client
        self.config = config
        self.call = call  # the gateway's store call (on its loop or its pool)

    @staticmethod
    def key(peer: Peer) -> str:
        """A consumer's id in the registry: the app and its own id."""
        return f"skmq:{peer.app}:{peer.id}"

    @staticmethod
    def info(peer: Peer) -> dict[str, Any]:
        conn = peer.connection
        return {
            "via": "push gateway",
            "app": peer.app,
            "mode": peer.mode,
            "weight": peer.weight,
            "prefetch": peer.prefetch,
            "in_flight": len(peer.deliveries),
            "address": f"{peer.host}:{peer.port}" if conn is None else conn.address,
        }

    @property
    def timeout(self) -> float:
        """How long an entry lasts without being written again: three rounds of writes."""
        return 3 * self.every

    @property
    def every(self) -> float:
        return max(1.0, min(self.config.heartbeat_interval, 10.0))

    async def enrol(self, peer: Peer) -> None:
        """Enter (or refresh) a consumer."""
        if Capability.CONSUMERS not in self.client.capabilities or not peer.alive:
            return
        try:
            await self.call(
                self.client.register_consumer,
                self.key(peer),
                queue=peer.app,
                timeout=self.timeout,
                info=self.info(peer),
            )
        except ConveyorError as exc:
            log.warning("could not register consumer %s in the registry: %s", peer.id, exc)

    async def unenrol(self, peer: Peer) -> None:
        if Capability.CONSUMERS not in self.client.capabilities:
            return
        with contextlib.suppress(ConveyorError):
            await self.call(self.client.unregister_consumer, self.key(peer))
