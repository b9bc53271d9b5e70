"""Declarative set-up: queues, dead-letter policies, topics and subscriptions from a TOML file,
created or updated to match, idempotently (`conveyor apply FILE`, `conveyor serve --config`).

```toml
[queues.orders-dlq]

[queues.orders]
visibility_timeout = 60
dead_letter = { queue = "orders-dlq", max_receive_count = 5 }

[topics.events]
subscribers = ["orders"]
```

A queue's table takes any `QueueAttributes` field (`visibility_timeout`, `delay`,
`retention`, `max_message_bytes`, `receive_wait`, `dead_letter`, `fifo`,
`content_based_dedup`, `dedup_per_group`, `delivery`, `archive`, `rate_limit`,
`compress_over`, `tags`); what it leaves out keeps its default on creation and its current
value on update. Nothing is deleted: queues and subscriptions the file does not name are
left as they are.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .client import Client
from .exceptions import InvalidInput, QueueDoesNotExist
from .models import QueueAttributes

FIELDS = {f.name for f in dataclasses.fields(QueueAttributes)} - {"settings"}


def load(path: Path | str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{path} is not valid TOML: {exc}") from exc
    unknown = set(data) - {"queues", "topics"}
    if unknown:
        raise InvalidInput(f"{path}: unknown section(s) {sorted(unknown)}; use [queues.NAME] and"
                           " [topics.NAME]")  # fmt: skip
    for section in ("queues", "topics"):
        if not isinstance(data.get(section, {}), Mapping):
            raise InvalidInput(f"{path}: [{section}] must hold tables, one per name")
    for name, options in data.get("queues", {}).items():
        if not isinstance(options, Mapping):
            raise InvalidInput(f"{path}: queues.{name} must be a table of attributes")
        bad = set(options) - FIELDS
        if bad:
            raise InvalidInput(
                f"{path}: queues.{name}: unknown attribute(s) {sorted(bad)}; known:"
                f" {', '.join(sorted(FIELDS))}"
            )
    for name, options in data.get("topics", {}).items():
        if not isinstance(options, Mapping) or set(options) - {"subscribers"}:
            raise InvalidInput(f'{path}: topics.{name} takes subscribers = ["queue", ...]')
        subscribers = options.get("subscribers", [])
        if not isinstance(subscribers, list) or not all(isinstance(q, str) for q in subscribers):
            raise InvalidInput(f"{path}: topics.{name}.subscribers must be a list of queue names")
    return data


def _order(queues: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Dead-letter queues before the queues that name them."""
    done: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in done or name not in queues:
            return
        if name in path:
            raise InvalidInput(f"queues name each other as dead-letter queues: {' -> '.join(path)}")
        target = (queues[name].get("dead_letter") or {}).get("queue")
        if isinstance(target, str):
            visit(target, (*path, name))
        done.append(name)

    for name in queues:
        visit(name, ())
    return done


def apply(client: Client, path: Path | str) -> list[tuple[str, str, str]]:
    """Make the store match the file; (kind, name, what was done) for each entry."""
    data = load(path)
    queues: Mapping[str, Mapping[str, Any]] = data.get("queues", {})
    report: list[tuple[str, str, str]] = []
    for name in _order(queues):
        wanted = QueueAttributes.from_dict({"fifo": name.endswith(".fifo"), **queues[name]})
        changes = {k: getattr(wanted, k) for k in queues[name]}
        try:
            current = client.queue_info(name, fresh=True).attributes
        except QueueDoesNotExist:
            client.create_queue(name, **changes)
            report.append(("queue", name, "created"))
            continue
        differ = {k: v for k, v in changes.items() if getattr(current, k) != v}
        if differ:
            client.set_attributes(name, **differ)
            report.append(("queue", name, "updated: " + ", ".join(sorted(differ))))
        else:
            report.append(("queue", name, "unchanged"))
    for topic, options in data.get("topics", {}).items():
        created = client.create_topic(topic)
        have = set(client.topic_queues(topic))
        added = [q for q in options.get("subscribers", []) if q not in have]
        for queue in added:
            client.subscribe(topic, queue)
        what = "created" if created else ("updated" if added else "unchanged")
        if added:
            what += f": subscribed {', '.join(added)}"
        report.append(("topic", topic, what))
    return report
