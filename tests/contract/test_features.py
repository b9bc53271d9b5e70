"""Queue features: rate limit, compression, priorities on update."""

from __future__ import annotations

import zlib

from conveyor import Client, ManualClock
from conveyor.models import Capability as Capability

from .conftest import needs


def test_rate_limit_token_bucket(client: Client, clock: ManualClock) -> None:
    needs(client, Capability.RATE_LIMIT)
    q = client.create_queue("rl", rate_limit=5)
    for i in range(20):
        q.send(f"m{i}")
    assert len(q.receive(10)) == 5
    assert q.receive(10) == []
    clock.advance(0.4)
    assert len(q.receive(10)) == 2
    clock.advance(10)
    assert len(q.receive(10)) == 5  # the burst is one second's worth


def test_compression_is_transparent(client: Client) -> None:
    needs(client, Capability.COMPRESSION)
    q = client.create_queue("z", compress_over=100)
    big = "abc" * 1000
    q.send(big)
    q.send("small")
    stored = client.catalog.editing("peek").list_messages("z")  # as stored: compressed
    assert stored[0].compressed and zlib.decompress(stored[0].body) == big.encode()
    assert not stored[1].compressed
    assert [m.text for m in q.peek()] == [big, "small"]
    assert [m.text for m in q.receive(10)] == [big, "small"]
    q.update(stored[0].id, body="def" * 1000)
    assert q.get(stored[0].id).text == "def" * 1000
