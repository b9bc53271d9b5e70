"""Instructions a batch call costs, for callgrind: ``valgrind --tool=callgrind
--callgrind-out-file=/dev/null python -m bench.instructions MODE N [STORE]``.

MODE `send` sends N batches of ten 100-byte bodies; `recv` sends 1,000 batches first, then
receives and deletes N batches of ten; `round` sends, receives and deletes one message N
times. All warm up with 50 of each first. Run it with N and
with 0: the difference of the two totals over N is what one call costs, in instructions,
the same from run to run whatever else the machine does (docs/benchmarks.md).
"""

from __future__ import annotations

import sys

from conveyor import Client


def main() -> None:
    mode, n = sys.argv[1], int(sys.argv[2])
    url = sys.argv[3] if len(sys.argv) > 3 else "memory://instructions"
    q = Client(url).create_queue("q")
    bodies = [b"x" * 100] * 10
    for _ in range(50):
        q.send_batch(bodies)
    for _ in range(50):
        got = q.receive(10)
        q.delete_batch([m.receipt or "" for m in got])
    if mode == "send":
        for _ in range(n):
            q.send_batch(bodies)
        return
    if mode == "round":
        for _ in range(n):
            q.send(b"x" * 100)
            [m] = q.receive()
            q.delete(m.receipt or "")
        return
    for _ in range(1000):
        q.send_batch(bodies)
    for _ in range(n):
        got = q.receive(10)
        q.delete_batch([m.receipt or "" for m in got])


if __name__ == "__main__":
    main()
