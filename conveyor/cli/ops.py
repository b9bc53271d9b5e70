"""Operating a store: `backup` while it serves, and `restore` (docs/deploy.md)."""

from __future__ import annotations

import click

from ..urls import backup_store, redact, restore_store
from . import render
from .app import State, _done, cli, pass_state


@cli.command()
@click.argument("dest")
@pass_state
def backup(state: State, dest: str) -> None:
    """Back the store up to the new file DEST while servers and workers use it (SQLite's
    online backup: one moment of the database, whole). Other stores: their database's own
    tools (docs/deploy.md)."""
    where = redact(state.store)
    size = backup_store(state.store, dest)
    _done(
        state,
        {"store": where, "backup": dest, "bytes": size},
        f"backed up {where} to {dest} ({size:,} bytes)",
    )


@cli.command()
@click.argument("source")
@click.option("--replace", is_flag=True, help="Overwrite the store's file where it exists.")
@pass_state
def restore(state: State, source: str, replace: bool) -> None:
    """Put the backup SOURCE back as the store (stop its servers and workers first). The
    messages that were in flight when the backup was taken are visible again at once: their
    receivers' receipts are gone with that moment."""
    from ..client import Client
    from ..models import Delivery, MessageState

    where = redact(state.store)
    size = restore_store(state.store, source, replace=replace)
    released = 0
    with Client(state.store) as client:
        for name in client.list_queues():
            q = client.queue(name)
            if q.info.attributes.delivery is Delivery.AT_MOST_ONCE:
                continue  # a message received once is never delivered again there
            freed = 0
            while True:
                held = q.peek(1000, state=MessageState.IN_FLIGHT)
                for m in held:
                    q.fail(m.id, 0)
                freed += len(held)
                if len(held) < 1000:
                    break
            if freed:
                render.note(f"{name}: {freed} message(s) in flight at the backup visible again")
            released += freed
    _done(
        state,
        {"store": where, "restored": source, "bytes": size, "released": released},
        f"restored {source} into {where} ({size:,} bytes; {released} message(s) that were in"
        " flight are visible again)",
    )
