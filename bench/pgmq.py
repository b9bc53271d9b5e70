"""The PostgreSQL store beside PGMQ on one server: ``python -m bench.pgmq --pgmq DIR``.

PGMQ (github.com/pgmq/pgmq) is the queue PostgreSQL users reach for. Its SQL-only install
(`pgmq-extension/sql/pgmq.sql`, read from `--pgmq`: a git directory, as the `fetch` tool
brings it, or a checkout) is loaded into a throwaway database on the server `--postgres`
names, and the store runs in the same database: same server, same run, in turn. Nothing of
PGMQ is kept in this project.

Each row: 1 process (send all, drain all, then send-receive-delete in a loop) or 1 producer
+ 4 consumer processes, single messages or batches of 10, 100-byte bodies (PGMQ's are JSON: a
string of the body's time stamp in hex and its other 92 bytes), at a queue depth of
`--depths` messages held throughout (the queue is filled once, and every run sends as many
as it drains). PGMQ: `pgmq.send` / `send_batch`, `pgmq.read` with a visibility timeout,
`pgmq.delete` (`--archive`: `pgmq.archive`, its retained delete). The store: the SDK
(`send` / `send_batch`, `receive`, `delete` / `delete_batch`). Per row: msgs/s with p50/p99
milliseconds of the send calls and of the receive+delete calls (end to end: the rate; the
ages of messages drained from a backlog are no latency), and per message the WAL the server
wrote (`pg_current_wal_lsn` before and after; each run starts after a `CHECKPOINT`, so
both log whole the pages they touch first, as they would after any checkpoint, and neither
gains by when the server last made one) and the server's CPU (the postmaster's
process tree in /proc, exited backends' through the postmaster's children time). Each row is
the median of `--repeat` runs, the two in turn. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import secrets
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from conveyor import Client
from conveyor.models import NewMessage

from .drivers import QUEUE, ConveyorDriver, Driver
from .procs import tree
from .runs import Phase, body, pct, run_multi, run_single
from .sql_drivers import PostgresBaseline

VT = 300  # seconds a read hides a message, as the store's queue's visibility timeout
TICK = os.sysconf("SC_CLK_TCK")
STAMP = 8  # bytes of time stamp at the head of each body (runs.body)


def pgmq_sql(where: str) -> str:
    """PGMQ's SQL-only install script from a git directory or a checkout."""
    path = Path(where)
    checkout = path / "pgmq-extension" / "sql" / "pgmq.sql"
    if checkout.is_file():
        return checkout.read_text()
    shown = subprocess.run(
        ["git", "--git-dir", str(path), "show", "HEAD:pgmq-extension/sql/pgmq.sql"],
        capture_output=True,
        text=True,
    )
    if shown.returncode != 0:
        raise SystemExit(
            f"--pgmq {where}: neither a checkout nor a git directory of github.com/pgmq/pgmq"
            f" ({shown.stderr.strip()})"
        )
    return shown.stdout


def _database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


class PGMQDriver(PostgresBaseline):
    """PGMQ's functions over one psycopg connection per process (the baseline's)."""

    def __init__(self, name: str, url: str, depth: int, archive: bool) -> None:
        super().__init__(name, url)
        self.depth = depth
        self.archive = archive

    def setup(self) -> None:
        """The queue, filled to the depth once (later runs leave it as deep as they found it)."""
        c = self.conn
        made = c.execute("SELECT 1 FROM pgmq.meta WHERE queue_name = %s", (QUEUE,)).fetchone()
        if made is None:
            c.execute("SELECT pgmq.create(%s)", (QUEUE,))
            filler = json.dumps(_text(body(100)))
            done = 0
            while done < self.depth:
                n = min(50_000, self.depth - done)
                c.execute(
                    f"INSERT INTO pgmq.q_{QUEUE} (vt, message) SELECT now(), %s::jsonb"
                    " FROM generate_series(1, %s)",
                    (filler, n),
                )
                done += n
        self.close()

    def send(self, bodies: Sequence[bytes]) -> None:
        texts = [json.dumps(_text(b)) for b in bodies]
        if len(texts) == 1:
            self.conn.execute("SELECT pgmq.send(%s, %s::jsonb)", (QUEUE, texts[0]))
        else:
            self.conn.execute("SELECT pgmq.send_batch(%s, %s::jsonb[])", (QUEUE, texts))

    def receive(self, n: int) -> list[tuple[object, bytes]]:
        rows = self.conn.execute(
            "SELECT msg_id, message FROM pgmq.read(%s, %s, %s)", (QUEUE, VT, n)
        ).fetchall()
        return [(i, _bytes(m)) for i, m in rows]

    def delete(self, handles: Sequence[object]) -> None:
        fn = "pgmq.archive" if self.archive else "pgmq.delete"
        if len(handles) == 1:
            self.conn.execute(f"SELECT {fn}(%s, %s::bigint)", (QUEUE, handles[0]))
        else:
            self.conn.execute(f"SELECT {fn}(%s, %s::bigint[])", (QUEUE, list(handles)))


def _text(body: bytes) -> str:
    """A body as JSON text holds it (no NUL): its 8-byte time stamp in hex, then the rest."""
    return body[:STAMP].hex() + body[STAMP:].decode("ascii")


def _bytes(text: str) -> bytes:
    return bytes.fromhex(text[: 2 * STAMP]) + text[2 * STAMP :].encode("ascii")


class StoreDriver(ConveyorDriver):
    """The SDK on the PostgreSQL store, its queue filled to the depth once."""

    def __init__(self, name: str, url: str, depth: int) -> None:
        super().__init__(name, url)
        self.depth = depth

    def setup(self) -> None:
        client = Client(self.url)
        if QUEUE not in client.list_queues():
            client.create_queue(QUEUE, visibility_timeout=VT)
            filler = body(100)
            done = 0
            while done < self.depth:
                n = min(5_000, self.depth - done)
                client.backend.send(QUEUE, [NewMessage(id="", body=filler, generated_id=True)] * n)
                done += n
        client.close()


class Server:
    """The PostgreSQL server's WAL position and CPU time."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        data = self.conn.execute("SHOW data_directory").fetchone()
        self.postmaster = _postmaster(str(data[0]) if data else "")

    def checkpoint(self) -> None:
        """Every page written out, so that a run logs each page it touches whole the first
        time (as after any checkpoint), whichever queue was filled or run last."""
        self.conn.execute("CHECKPOINT")

    def wal(self) -> int:
        row = self.conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
        return int(row[0]) if row is not None else 0

    def cpu(self) -> float:
        """Seconds of CPU of this server: the postmaster and its live processes (procs.tree),
        and its exited children through the postmaster's children time."""
        total = 0
        for pid in tree(self.postmaster):
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:  # gone meanwhile: counted in the postmaster's children time
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
            if pid == self.postmaster:
                total += int(fields[13]) + int(fields[14])  # cutime, cstime
        return total / TICK


def _postmaster(data_directory: str) -> int:
    try:
        return int(Path(data_directory, "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return -1


Measured = tuple[Phase, Phase, Phase, float, float]  # send, recv, e2e, WAL/msg, CPU ms/msg


def measure(server: Server, d: Driver, mode: str, n: int, batch: int) -> Measured:
    d.setup()
    runner = run_single if mode == "1 proc" else run_multi
    server.checkpoint()
    wal, cpu = server.wal(), server.cpu()
    send, recv, e2e = runner(d, n, batch, 100)
    wal, cpu = server.wal() - wal, server.cpu() - cpu
    messages = send.msgs + (e2e.msgs if mode == "1 proc" else 0)
    return send, recv, e2e, wal / messages, cpu * 1000 / messages


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.pgmq", description=__doc__.split("\n")[0])
    ap.add_argument("--pgmq", required=True, help="a git directory or checkout of pgmq/pgmq")
    ap.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--depths", default="10000,1000000")
    ap.add_argument("--modes", default="1 proc,1P+4C")
    ap.add_argument("--messages", type=int, default=4000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--archive", action="store_true", help="PGMQ archives instead of deleting")
    args = ap.parse_args()
    script = pgmq_sql(args.pgmq)
    import psycopg

    # the store's advice about the server's autovacuum: said once, in the header
    logging.getLogger("conveyor").setLevel(logging.ERROR)

    admin = psycopg.connect(args.postgres, autocommit=True)
    version = str(admin.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
    vacuum = str(admin.execute("SHOW autovacuum").fetchone()[0])  # type: ignore[index]
    name = f"bench_pgmq_{secrets.token_hex(3)}"
    admin.execute(f"CREATE DATABASE {name}")
    url = _database(args.postgres, name)
    try:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute(script)
        server = Server(url)
        print(
            f"# The PostgreSQL store beside PGMQ — PostgreSQL {version} (autovacuum {vacuum}),"
            f" {platform.platform()},"
            f" {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; msgs/s, p50/p99 ms;"
            f" per message WAL bytes and server CPU ms; median of {args.repeat} runs in turn;"
            f" PGMQ {'archive' if args.archive else 'delete'}"
        )
        header = (
            f"{'depth':>9} {'driver':<16} {'mode':<7} {'batch':>5} | {'send':^25} |"
            f" {'receive+delete':^25} | {'e2e/s':>7} | {'WAL B':>6} {'CPU ms':>7}"
        )
        print(header)
        print("-" * len(header))
        verdicts: list[str] = []
        for depth in (int(x) for x in args.depths.split(",")):
            prefix = f"d{depth}_"
            store = StoreDriver("postgres store", f"{url}?prefix={prefix}", depth)
            pgmq = PGMQDriver("pgmq", url, depth, args.archive)
            _reset_pgmq(url)
            print(f"  filling both to {depth:,}...", file=sys.stderr, flush=True)
            store.setup()
            pgmq.setup()
            for mode in args.modes.split(","):
                for batch in (1, 10):
                    n = args.messages * (2 if batch > 1 else 1) // batch * batch
                    runs: list[list[Measured]] = [[], []]
                    for _ in range(args.repeat):
                        runs[0].append(measure(server, store, mode, n, batch))
                        runs[1].append(measure(server, pgmq, mode, n, batch))
                    medians = [sorted(r, key=lambda t: t[2].rate)[len(r) // 2] for r in runs]
                    for who, (sent, recv, e2e, wal, cpu) in zip(
                        (store, pgmq), medians, strict=True
                    ):
                        print(
                            f"{depth:>9,} {who.name:<16} {mode:<7} {batch:>5} | {sent.cell()} |"
                            f" {recv.cell()} | {e2e.rate:7,.0f} | {wal:6.0f} {cpu:7.3f}",
                            flush=True,
                        )
                    _, my_recv, mine, my_wal, my_cpu = medians[0]
                    _, their_recv, theirs, their_wal, their_cpu = medians[1]
                    p99 = pct(my_recv.latencies, 99), pct(their_recv.latencies, 99)
                    share = mine.rate / theirs.rate
                    verdicts.append(
                        f"  {depth:>9,} {mode:<7} batch {batch:>2}: rate {share:5.2f}x"
                        f" ({'ok' if mine.rate >= theirs.rate else 'BELOW'}), WAL"
                        f" {my_wal / their_wal:5.2f}x ({'ok' if my_wal <= their_wal else 'ABOVE'}),"
                        f" CPU {my_cpu / their_cpu:5.2f}x, p99 receive+delete"
                        f" {p99[0]:.2f} vs {p99[1]:.2f} ms"
                    )
        print()
        print("## The store against PGMQ (target: rate >= 1.0x and WAL <= 1.0x in every row)")
        print("\n".join(verdicts))
    finally:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,)
        )
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.close()


def _reset_pgmq(url: str) -> None:
    """A new depth: PGMQ's queue made afresh."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        made = c.execute("SELECT 1 FROM pgmq.meta WHERE queue_name = %s", (QUEUE,)).fetchone()
        if made is not None:
            c.execute("SELECT pgmq.drop_queue(%s)", (QUEUE,))


if __name__ == "__main__":
    main()
