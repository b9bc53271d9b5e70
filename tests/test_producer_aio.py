"""Producer batching and AsyncClient."""

from __future__ import annotations

import asyncio

from conveyor import AsyncClient, Client, Producer


def test_producer_batches_by_size(client: Client) -> None:
    q = client.create_queue("p")
    with Producer(q, batch_size=10, linger=60) as producer:
        futures = [producer.send(f"m{i}") for i in range(25)]
        results = [f.result(timeout=5) for f in futures[:20]]
        assert all(not r.duplicate for r in results)
        producer.flush(timeout=5)
        assert q.stats().sent == 25
    assert [m.text for m in q.peek(30)] == [f"m{i}" for i in range(25)]


def test_producer_batches_by_time_and_reports_errors(client: Client) -> None:
    q = client.create_queue("p", max_message_bytes=1024)
    with Producer(q, linger=0.01) as producer:
        ok = producer.send("fine")
        bad = producer.send("x" * 2000)
        assert ok.result(timeout=5).id
        assert "at most 1024" in str(bad.exception(timeout=5))


def test_async_client_roundtrip(store_url: str) -> None:
    async def main() -> None:
        async with AsyncClient(store_url) as client:
            q = await client.create_queue("a")
            waiter = asyncio.create_task(q.receive(wait=5))
            await asyncio.sleep(0.05)
            await q.send("hello")
            [m] = await asyncio.wait_for(waiter, 2)
            assert m.text == "hello"
            await q.delete(m.receipt or "")
            assert (await q.stats()).deleted == 1
            assert await q.receive(wait=0.05) == []

    asyncio.run(main())
