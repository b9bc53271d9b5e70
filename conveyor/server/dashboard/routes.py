"""The web dashboard at /ui: three static files (no build step, no CDN) over the REST API,
and one route of its own, the overview with an hour of history for the sparklines.

Every figure and action goes through the REST API, behind the server's bearer token (the
page asks for it once and keeps it in the browser tab's session storage). When the server
has a token, a browser beyond loopback gets nothing but a sign-in form until it gives the
token: the form keeps it in the tab and in a cookie scoped to /ui, which opens the static
files (the API itself takes the token only as a bearer header, so the cookie cannot be used
to act on the API from another site).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from importlib import resources
from itertools import pairwise
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from ...client import Client
from ...exceptions import ConveyorError, NotFound, QueueDoesNotExist, Unauthorized
from ...models import QueueStats
from ...push.config import is_loopback
from ..counts import SharedCounts

log = logging.getLogger(__name__)

HOUR = 3600.0
STEP = 10.0
"""Seconds between two points of a sparkline: an hour is 360 points."""

ASSETS = {"app.js": "text/javascript", "app.css": "text/css"}
COOKIE = "conveyor_token"

SIGN_IN = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Conveyor: sign in</title>
<link rel="icon" href="data:,"></head>
<body style="font: 14px system-ui, sans-serif; margin: 40px">
<form id="login-form"><h2>This server needs its token</h2>
<p>The token <code>conveyor serve</code> was started with (<code>--auth-token</code>).</p>
<input type="password" id="token" placeholder="token" required>
<button id="login-submit" type="submit">Sign in</button></form>
<script>
document.getElementById("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const token = document.getElementById("token").value;
  sessionStorage.setItem("conveyor-token", token);
  document.cookie = "conveyor_token=" + encodeURIComponent(token) +
    "; path=/ui; SameSite=Strict" + (location.protocol === "https:" ? "; Secure" : "");
  location.reload();
});
</script></body></html>
"""


class History:
    """Per queue, an hour of (time, depth, sent total, received total, deleted total)
    samples, one every STEP seconds at most, taken by the server's sampler and when the
    overview is read, from the counts the server's readers share."""

    def __init__(
        self, now: Callable[[], float] = time.time, counts: SharedCounts | None = None
    ) -> None:
        self._now = now
        self._lock = threading.Lock()
        self._points: dict[str, deque[tuple[float, int, int, int, int]]] = {}
        self.shared = counts or SharedCounts(now)

    def counts(self, client: Client, name: str) -> QueueStats:
        """The queue's stats as the server's readers share them (counts.py), recorded."""
        stats = self.shared.stats(client, name)
        self.record(stats)
        return stats

    def record(self, stats: QueueStats, *, force: bool = False) -> None:
        now = self._now()
        sent = stats.sent or stats.received + stats.total  # stores without totals: an estimate
        with self._lock:
            points = self._points.setdefault(stats.queue, deque(maxlen=int(HOUR / STEP) + 1))
            if force or not points or now - points[-1][0] >= STEP:
                points.append((now, stats.total, sent, stats.received, stats.deleted))
            while points and now - points[0][0] > HOUR:
                points.popleft()

    def series(self, queue: str) -> dict[str, Any]:
        """[time, value] points: `depth`, and the rates (messages a second between two
        samples) `rate` (sent), `received` and `deleted`."""
        with self._lock:
            points = list(self._points.get(queue, ()))
        depth = [[round(t, 3), d] for t, d, *_ in points]
        rate, received, deleted = [], [], []
        for (t0, _, s0, r0, d0), (t1, _, s1, r1, d1) in pairwise(points):
            if t1 > t0:
                rate.append([round(t1, 3), round(max(0, s1 - s0) / (t1 - t0), 3)])
                received.append([round(t1, 3), round(max(0, r1 - r0) / (t1 - t0), 3)])
                deleted.append([round(t1, 3), round(max(0, d1 - d0) / (t1 - t0), 3)])
        return {"depth": depth, "rate": rate, "received": received, "deleted": deleted}

    def forget(self, names: set[str]) -> None:
        """Drop the history and the shared counts of queues not in `names` (deleted)."""
        with self._lock:
            for name in set(self._points) - names:
                del self._points[name]
        self.shared.forget(names)


SAMPLED_QUEUES = 500
"""The sampler looks at this many queues at most; past that, only while the overview is open."""


def sample(client: Client, history: History) -> None:
    """One round of the sampler: every queue's counts into the history."""
    names = client.list_queues()
    for name in names[:SAMPLED_QUEUES]:
        try:
            history.counts(client, name)
        except ConveyorError:
            continue  # deleted while we looked, or the store is away: the next round tries
    history.forget(set(names))


async def run_sampler(client: Client, history: History, interval: float = STEP) -> None:
    """Keep an hour of history for the dashboard's sparklines, whether or not a page is
    open."""
    while True:
        try:
            await asyncio.to_thread(sample, client, history)
        except Exception:  # the dashboard's history must never take the server down
            log.warning("dashboard history: a sampling round failed", exc_info=True)
        await asyncio.sleep(interval)


def last(points: list[list[float]]) -> float:
    return points[-1][1] if points else 0.0


def build_ui(
    client: Client,
    history: History,
    check_token: Any,
    auth: Any,
    connections: Callable[[], dict[str, int]] = dict,
) -> APIRouter:
    r = APIRouter(include_in_schema=False)

    def opened(request: Request) -> bool:
        """Whether the static files may go to this browser: always on loopback or without a
        token; beyond loopback, with the token as a bearer header or the /ui cookie."""
        host = request.client.host if request.client else ""
        if auth.token is None or is_loopback(host):
            return True
        header = request.headers.get("authorization")
        cookie = request.cookies.get(COOKIE)
        try:
            auth.check_bearer(header or (f"Bearer {cookie}" if cookie else None))
        except Unauthorized:
            return False
        return True

    def asset(name: str) -> str:
        return (resources.files("conveyor.server.dashboard") / "static" / name).read_text(
            encoding="utf-8"
        )

    @r.get("/ui", response_class=HTMLResponse)
    @r.get("/ui/", response_class=HTMLResponse)
    def index(request: Request) -> HTMLResponse:
        page = asset("index.html") if opened(request) else SIGN_IN
        return HTMLResponse(page, headers={"Cache-Control": "no-cache"})

    @r.get("/ui/{name}")
    def static(name: str, request: Request) -> Response:
        if name not in ASSETS:
            raise NotFound(f"no dashboard file {name!r}: the dashboard is at /ui")
        if not opened(request):
            raise Unauthorized("sign in at /ui with the server's token first")
        return Response(asset(name), media_type=ASSETS[name], headers={"Cache-Control": "no-cache"})

    @r.get("/ui/api/overview", dependencies=[Depends(check_token)])
    def overview() -> dict[str, Any]:
        """Every queue's counts now, rates and hour, and the server at a glance. A queue's
        `dead_now` is what its dead-letter queue holds now; its totals (sent, received,
        deleted, dead-lettered, expired) count since it was created."""
        names = client.list_queues()
        found: dict[str, tuple[QueueStats, str | None]] = {}
        for name in names:
            try:
                stats = history.counts(client, name)
                dead_letter = client.queue_info(name).attributes.dead_letter
            except QueueDoesNotExist:
                continue  # deleted while we looked
            found[name] = (stats, dead_letter.queue if dead_letter else None)
        dead_letter_queues = {dlq for _, dlq in found.values() if dlq in found}
        queues = []
        for name, (stats, dlq) in found.items():
            series = history.series(name)
            held = found[dlq][0] if dlq in found else None
            queues.append(
                {
                    **stats.to_dict(),
                    "dead_letter_queue": dlq,
                    "is_dead_letter_queue": name in dead_letter_queues,
                    "dead_now": None if held is None else held.total,
                    "rate": last(series["rate"]),
                    "received_rate": last(series["received"]),
                    "deleted_rate": last(series["deleted"]),
                    "history": series,
                }
            )
        history.forget(set(names))
        server = {
            "queues": len(queues),
            "ready": sum(q["ready"] for q in queues),
            "delayed": sum(q["delayed"] for q in queues),
            "in_flight": sum(q["in_flight"] for q in queues),
            "dead": sum(found[n][0].total for n in dead_letter_queues),
            "sent_rate": round(sum(q["rate"] for q in queues), 3),
            "received_rate": round(sum(q["received_rate"] for q in queues), 3),
            "deleted_rate": round(sum(q["deleted_rate"] for q in queues), 3),
            "connections": connections(),
        }
        return {
            "queues": queues,
            "topics": client.list_topics(),
            "server": server,
            "now": time.time(),
        }

    @r.get("/ui/api/queues/{name}/history", dependencies=[Depends(check_token)])
    def queue_history(name: str) -> dict[str, Any]:
        """A queue's hour: depth, and sent, received and deleted a second."""
        client.queue_info(name)  # a missing queue is a 404
        history.counts(client, name)
        return history.series(name)

    return r


__all__ = ["History", "build_ui", "run_sampler", "sample"]
