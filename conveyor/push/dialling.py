"""SKMQ's delivery to a consumer that registered a host and port: the gateway dials it for
each message, pushes, and replies to its answers on that connection."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from .codec import ANSWERS, PONG, Decoder, Frame, FrameError, encode, resp
from .peers import Connection, Delivery

if TYPE_CHECKING:
    from .gateway import Gateway


async def dial_push(gw: Gateway, delivery: Delivery, frame: bytes) -> None:
    """Dial the consumer, push, read its answers and reply to each, and close once it has
    answered for good (`ack`, `reject`, `error`). After `arrived` the connection stays open
    for the rest of the message's ack window, for an `ack` on it (SKMQ's process 1); at the
    end of the window it closes, and the consumer may send its `ack` later on a connection
    of its own (process 2)."""
    peer = delivery.peer
    cfg = gw.config
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(peer.host, peer.port), cfg.dial_timeout
        )
    except (OSError, TimeoutError) as exc:
        await gw.drop(peer, f"dialling {peer.host}:{peer.port} failed ({exc})")
        return
    conn = Connection(reader, writer)
    conn.authenticated = True
    try:
        conn.write(frame)
        await conn.flush()
        decoder = Decoder(max_frame=cfg.max_frame)
        deadline = time.monotonic() + cfg.ack_timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            data = await asyncio.wait_for(reader.read(65536), left)
            if not data:
                return
            for item in decoder.feed(data):
                if isinstance(item, FrameError):
                    conn.write(resp("error", f"malformed frame: {item.reason}"))
                elif item.type == "ping":
                    conn.write(encode(PONG))
                elif item.type in ANSWERS:
                    if not item.msgid:
                        item = Frame(item.type, peer.app, delivery.msgid, item.content)
                    conn.write(b"".join(await gw.deliveries.answer_run(conn, [item])))
                    await conn.flush()
                    if item.type != "arrived" and item.msgid == delivery.msgid:
                        return  # answered for good
    except (OSError, TimeoutError):
        return  # no answer: the ack timeout delivers it again
    finally:
        conn.close()
