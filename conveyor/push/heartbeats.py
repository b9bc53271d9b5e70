"""The push gateway's heartbeats. A consumer on its own connection that stays silent for
`heartbeat_interval` is pinged; one that does not answer within `heartbeat_timeout` is
removed. A consumer the gateway dials is dialled and pinged every `heartbeat_interval`
(SKMQ's heartbeat: ping, expect pong). The consumer registry's entries are written again on
the same loop."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from .codec import PING, encode
from .peers import Peer

if TYPE_CHECKING:
    from .gateway import Gateway


async def heartbeats(gw: Gateway) -> None:
    cfg = gw.config
    enrolled_at = time.monotonic()
    while not gw.closing:
        await asyncio.sleep(min(cfg.heartbeat_interval, cfg.heartbeat_timeout) / 2)
        now = time.monotonic()
        if now - enrolled_at >= gw.registry.every:  # the registry's entries, refreshed
            enrolled_at = now
            for app in list(gw.apps.values()):
                for peer in list(app.peers.values()):
                    gw.spawn(gw.registry.enrol(peer))
        for app in list(gw.apps.values()):
            for peer in list(app.peers.values()):
                conn = peer.connection
                if conn is None:
                    if now - peer.checked_at >= cfg.heartbeat_interval:
                        peer.checked_at = now
                        gw.spawn(ping_dialled(gw, peer))
                elif conn.pinged_at is not None:
                    if now - conn.pinged_at > cfg.heartbeat_timeout:
                        conn.close()
                        await gw.drop(peer, "it stopped answering pings")
                elif now - conn.last_seen >= cfg.heartbeat_interval:
                    conn.pinged_at = now
                    conn.write(encode(PING))


async def ping_dialled(gw: Gateway, peer: Peer) -> None:
    """Dial a consumer, send ping, expect pong."""
    timeout = gw.config.heartbeat_timeout
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(peer.host, peer.port), timeout
        )
    except (OSError, TimeoutError) as exc:
        await gw.drop(peer, f"dialling {peer.host}:{peer.port} failed ({exc})")
        return
    try:
        writer.write(encode(PING))
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(10), timeout)
        if not answer.startswith(b"pong"):
            await gw.drop(peer, "it did not answer ping with pong")
    except (OSError, TimeoutError):
        await gw.drop(peer, "it did not answer ping")
    finally:
        writer.close()
