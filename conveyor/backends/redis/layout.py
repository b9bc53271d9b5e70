"""The layout of the store's keys, and the upgrade of a Redis written in an earlier one.

Layout 2 keeps a message as one string and its receipt state in a hash per queue (see
lua/common.lua); layout 1 kept a message as a hash of fields. The first process of this
version to connect upgrades every queue, in steps of a thousand messages (each step one
script, so atomic), under a lock key that other processes wait on; it records the layout
when done. Processes of an earlier version must be stopped before one of this version
starts.
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any

from ...exceptions import StoreUnavailable
from .values import decode_entry

log = logging.getLogger("conveyor.store")

LAYOUT = b"2"
STEP = 1000  # messages a step of the upgrade rewrites
LOCK_MS = 30_000  # how long the upgrade's lock outlives its last step
WAIT = 600.0  # seconds another process waits for an upgrade to finish


def ensure_layout(client: Any, registry: str, prefix: str, upgrade: Any) -> int:
    """Make sure the store's keys are in this layout: record it on an empty store, upgrade
    one written in the first (`upgrade`: the registered upgrade script). The layout found:
    0 for an empty store; a store in a later layout than this version's is refused."""
    key, lock = f"{registry}layout", f"{registry}upgrading"
    found = client.get(key)
    if found == LAYOUT:
        return int(LAYOUT)
    if found is not None:
        refuse_newer(found, prefix)
    token = secrets.token_hex(8)
    waited_since = time.monotonic()
    while not client.set(lock, token, nx=True, px=LOCK_MS):
        if client.get(key) == LAYOUT:
            return int(LAYOUT)
        if time.monotonic() - waited_since > WAIT:
            raise StoreUnavailable(
                f"another process has been upgrading the redis store's keys ({lock}) for"
                f" {WAIT:.0f} s: if it died, delete that key and start again"
            )
        time.sleep(0.1)
    try:
        if client.get(key) == LAYOUT:
            return int(LAYOUT)
        queues = client.hgetall(f"{registry}queues")
        if queues:
            log.warning(
                "upgrading the keys of %d queues to layout %s", len(queues), LAYOUT.decode()
            )
        for name, text in sorted(queues.items()):
            entry = decode_entry(prefix, name.decode(), text)
            start = 0
            while start >= 0:
                start = int(upgrade([entry.meta], [entry.prefix, start, STEP], client))
                client.pexpire(lock, LOCK_MS)
        client.set(key, LAYOUT)
        return 1 if queues else 0
    finally:
        if client.get(lock) == token.encode():
            client.delete(lock)


def refuse_newer(found: bytes, prefix: str) -> None:
    """A layout key that is not this version's: a later version wrote the store."""
    try:
        later = int(found) > int(LAYOUT)
    except ValueError:
        later = True
    if later:
        layout = found.decode(errors="replace")
        raise StoreUnavailable(
            f"the redis store's keys (prefix {prefix}) are in layout {layout}, newer than"
            f" this Conveyor's ({LAYOUT.decode()}): upgrade Conveyor"
        )
