"""The push gateway's connections: accepted up to `max_connections` (those not yet
authenticated up to a tenth of them, the longest waiting making room), read with the idle,
frame and authentication timeouts, and their frames answered in order, runs of sends and of
acknowledgements together."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, cast

from .codec import Decoder, Frame, FrameError, resp
from .peers import Connection

if TYPE_CHECKING:
    from .gateway import Gateway

log = logging.getLogger("conveyor.push")

INTERNAL = "internal error (the gateway log has the details)"
RUNS = {"queue": "send", "arrived": "answer", "ack": "answer"}  # handled a run at a time


async def accept(gw: Gateway, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    conn = Connection(reader, writer)
    if len(gw.connections) >= gw.config.max_connections:
        conn.write(resp("error", "too many connections; try again later"))
        await conn.flush()
        conn.close()
        return
    conn.authenticated = gw.config.auth_token is None
    if not conn.authenticated:
        # their share is full: the one waiting longest makes room (a client with the
        # token authenticates in its first frame; one holding a slot silently does not)
        if len(gw.unauthenticated) >= max(1, gw.config.max_connections // 10):
            oldest = next(iter(gw.unauthenticated))
            del gw.unauthenticated[oldest]
            oldest.write(resp("error", "closed to make room: authenticate sooner"))
            await oldest.flush()
            oldest.close()
        conn.auth_deadline = time.monotonic() + gw.config.auth_timeout
        gw.unauthenticated[conn] = None
    gw.connections.add(conn)
    task = asyncio.current_task()
    if task is not None:  # the gateway's close ends it, with its other tasks
        gw.tasks.add(task)
        task.add_done_callback(gw.tasks.discard)
    try:
        await read(gw, conn)
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    except asyncio.CancelledError:
        pass
    except Exception:
        log.exception("push connection from %s failed", conn.address)
    finally:
        gw.connections.discard(conn)
        gw.unauthenticated.pop(conn, None)
        conn.close()
        if conn.peer is not None:
            await gw.drop(conn.peer, "its connection closed")


async def read(gw: Gateway, conn: Connection) -> None:
    decoder = Decoder(max_frame=gw.config.max_frame)
    cfg = gw.config
    clock = asyncio.get_running_loop().time
    while not gw.closing:
        timeout = cfg.read_timeout if decoder.pending else cfg.idle_timeout
        if not conn.authenticated:
            timeout = min(timeout, conn.auth_deadline - time.monotonic())
        try:
            if timeout <= 0:
                raise TimeoutError
            data = await conn.read_until(clock() + timeout)
        except TimeoutError:
            if not conn.authenticated:
                log.info("closing %s: not authenticated within %.0f s", conn.address,
                         cfg.auth_timeout)  # fmt: skip
                conn.write(resp("error", f"authenticate within {cfg.auth_timeout:g} s:"
                                " send type=auth with the token"))  # fmt: skip
                await conn.flush()
                return
            why = "a frame stayed unfinished" if decoder.pending else "it was idle"
            log.debug("closing %s: %s for %.0f s", conn.address, why, timeout)
            return
        if not data:
            return
        conn.last_seen = time.monotonic()
        conn.pinged_at = None
        keep = await frames(gw, conn, decoder.feed(data))
        await conn.flush()  # a peer that does not read holds up its own connection
        if not keep:
            return


async def frames(gw: Gateway, conn: Connection, items: list[Frame | FrameError]) -> bool:
    """Answer the frames one read brought, in order; False to close the connection. Runs of
    sends, and of arrivals and acknowledgements, are handled together: a run's sends to one
    app are one store call (one transaction), its acknowledgements of one queue one
    delete."""
    i, n = 0, len(items)
    while i < n:
        item = items[i]
        if isinstance(item, FrameError):
            if item.http:  # nothing after it is read: its body could hold frames
                log.warning(
                    "push gateway: closed a connection from %s that sent an HTTP request"
                    " (a browser sending it for another site's page?)",
                    conn.address,
                )
                return False
            conn.write(resp("error", f"malformed frame: {item.reason}"))
            i += 1
            continue
        run = RUNS.get(item.type) if conn.authenticated else None
        if run is not None:
            j = i + 1
            while j < n and RUNS.get(getattr(items[j], "type", "")) == run:
                j += 1
            batch = cast(list[Frame], items[i:j])
            try:
                if run == "send":
                    conn.write(b"".join(await gw.send_run(batch)))
                    await gw.give_way(batch)  # the answers go out meanwhile
                else:
                    conn.write(b"".join(await gw.deliveries.answer_run(conn, batch)))
            except Exception:
                log.exception("push frames from %s failed", conn.address)
                conn.write(b"".join(resp("error", INTERNAL, msgid=f.msgid) for f in batch))
            i = j
            continue
        out: list[bytes] = []
        try:
            keep = await gw.handle(conn, item, out)
        except Exception:
            log.exception("push frame %s from %s failed", item.type, conn.address)
            out.append(resp("error", INTERNAL, msgid=item.msgid))
            keep = True
        conn.write(b"".join(out))
        if not keep:
            return False
        i += 1
    return True
