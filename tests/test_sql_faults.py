"""A PostgreSQL server (a throwaway one of the test's own) restarts while a server and
workers run: no acknowledged message is lost, both reconnect by themselves and say so in
their logs, and clients never see a traceback (at worst a typed 503 while the database is
down). It crashes between a job's staging and its commit: nothing is published. And the
database says no: a lock another session holds past lock_timeout, a statement it cancels, a
full disk under the store's tables; each call fails at once saying so, never retried as a
lost connection."""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pymysql
import pytest

from conveyor import Client, OutcomeUnknown, SendEntry, StagedWritesLost, StoreUnavailable
from conveyor.backends.sql.store import SQLStore
from conveyor.backends.sql.totals import last_counts

from .conftest import unavailable
from .support import disks, mariadbserver, pgserver, sqlstores
from .support.mariadbserver import ThrowawayMariaDB
from .support.pgserver import ThrowawayPostgres
from .support.sqlstores import fresh
from .support.waiting import until
from .test_sql_cluster import VISIBILITY, Cluster

pytestmark = pytest.mark.slow

TARGET = {
    "X-Amz-Target": "AmazonSQS.SendMessageBatch",
    "Content-Type": "application/x-amz-json-1.0",
}


@pytest.fixture
def throwaway_postgres() -> Iterator[ThrowawayPostgres]:
    """A PostgreSQL of this test's own: restarting it disturbs nobody else."""
    why = pgserver.unavailable_reason()
    if why is not None:
        unavailable(why)
    pg = ThrowawayPostgres().start()
    try:
        yield pg
    finally:
        pg.stop()


def test_database_restart_loses_nothing(
    throwaway_postgres: ThrowawayPostgres, tmp_path: Path
) -> None:
    cluster = Cluster(throwaway_postgres.url, tmp_path)
    try:
        database_restart(cluster, throwaway_postgres)
    finally:
        cluster.close()


def database_restart(cluster: Cluster, pg: ThrowawayPostgres) -> None:
    with Client(cluster.url) as client:
        client.create_queue("jobs", visibility_timeout=VISIBILITY)
    cluster.serve(1)
    cluster.work(2, "jobs")
    base = cluster.servers[0][1]
    queue_url = f"{base}/000000000000/jobs"

    acked: list[str] = []
    answers: list[tuple[int, str]] = []
    stop = threading.Event()

    def send() -> None:
        n = 0
        with httpx.Client(timeout=120) as http:
            while not stop.is_set():
                bodies = [f"m{n + j}" for j in range(10)]
                r = http.post(
                    base + "/",
                    json={
                        "QueueUrl": queue_url,
                        "Entries": [{"Id": str(j), "MessageBody": b} for j, b in enumerate(bodies)],
                    },
                    headers=TARGET,
                )
                if r.status_code == 200 and not r.json().get("Failed"):
                    acked.extend(bodies)
                else:
                    answers.append((r.status_code, r.text))
                n += 10
                time.sleep(0.01)

    sender = threading.Thread(target=send)
    sender.start()
    time.sleep(2)
    before = len(acked)
    pg.restart()
    time.sleep(3)
    stop.set()
    sender.join(120)
    assert before > 0 and len(acked) > before, "sends did not resume after the restart"

    deadline = time.monotonic() + 120
    while not set(acked) <= set(cluster.deliveries()) and time.monotonic() < deadline:
        time.sleep(0.5)
    missing = set(acked) - set(cluster.deliveries())
    assert not missing, f"{len(missing)} acknowledged messages were lost"
    assert cluster.stop_workers() == [0, 0]

    for status, text in answers:  # what a client saw while the database was away
        assert status == 503 and "Traceback" not in text, (status, text)
    server_log = cluster.servers[0][2].read_text()
    assert "lost the connection" in server_log and "reconnected" in server_log, server_log
    assert "Traceback" not in server_log, server_log
    worker_logs = "".join(log.read_text() for _, _, log in cluster.workers)
    assert "lost the connection" in worker_logs and "reconnected" in worker_logs, worker_logs
    assert "Traceback" not in worker_logs, worker_logs


def test_a_crash_between_staging_and_publishing_publishes_nothing(
    throwaway_postgres: ThrowawayPostgres,
) -> None:
    """PostgreSQL empties an unlogged table as it recovers from a crash: what a job's tasks
    staged is gone, and the job's commit refuses (StagedWritesLost) rather than publish
    what is left; the job run again publishes whole."""
    pg = throwaway_postgres
    entries = [SendEntry(entry_id="0", body=f"m{i}", id=f"m{i}") for i in range(100)]
    with Client(pg.url) as client:
        client.create_queue("imp")
        pipe = client.pipeline("imp")
        assert pipe.stage("job:crash", 0, 0, 0, entries[:50]) == 50
        assert pipe.stage("job:crash", 0, 1, 0, entries[50:]) == 50
    pg.kill()
    pg.start()
    with Client(pg.url) as client:
        pipe = client.pipeline("imp")
        with pytest.raises(StagedWritesLost, match="run the job again"):
            pipe.publish("job:crash", 0, [(0, 0), (1, 0)])
        q = client.queue("imp")
        assert q.stats().ready == 0 and q.peek(limit=10) == []
        # the job again: Spark's new attempts of both tasks
        assert pipe.stage("job:crash", 0, 0, 1, entries[:50]) == 50
        assert pipe.stage("job:crash", 0, 1, 1, entries[50:]) == 50
        assert pipe.publish("job:crash", 0, [(0, 1), (1, 1)]) == 100
        assert sorted(m.text for m in q.peek(limit=200)) == sorted(e.body for e in entries)


def fill_then_grow(url: str, disk: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Sends until the database server's disk is full, where the store's tables are: the
    send that meets it fails at once with StoreUnavailable saying so, not taken for a lost
    connection (no reconnecting in the log, no OutcomeUnknown: the server rolled the
    transaction back); reads go on; once the disk has room, every message of the batches
    that succeeded is received, and none of the failed one."""
    with Client(f"{url}?reconnect_timeout=30") as client:
        q = client.create_queue("full")
        sent = 0
        with pytest.raises(StoreUnavailable, match="disk is full") as failed:
            for i in range(2000):
                body = secrets.token_hex(30_000)  # what the server cannot compress away
                started = time.monotonic()
                q.send_batch([f"{i:04d}-{j}-{body}" for j in range(10)])
                sent += 10
        assert time.monotonic() - started < 10  # not retried for reconnect_timeout
        assert not isinstance(failed.value, OutcomeUnknown)
        assert "lost the connection" not in caplog.text
        assert sent > 0
        assert client.list_queues() == ["full"]  # reads go on
        disks.grow(disk, 1000)
        got: list[str] = []
        while batch := q.receive(10, wait=0):
            got += [m.body[:6].decode() for m in batch]
            q.delete_batch([m.receipt for m in batch if m.receipt])
        assert sorted(got) == [f"{i:04d}-{j}" for i in range(sent // 10) for j in range(10)]


def test_a_full_disk_under_postgresql_fails_writes_whole_and_says_so(
    throwaway_postgres: ThrowawayPostgres, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL: the store's tables in a tablespace on a small disk (its write-ahead log
    elsewhere: a full disk under the log stops the server, an outage like any other)."""
    why = disks.unavailable_reason()
    if why is not None:
        unavailable(why)
    with disks.small_disk(40, owner="postgres") as disk:
        try:
            with psycopg.connect(throwaway_postgres.url, autocommit=True) as admin:
                admin.execute(f"CREATE TABLESPACE small LOCATION '{disk}'")
                admin.execute("ALTER DATABASE postgres SET default_tablespace = small")
            fill_then_grow(throwaway_postgres.url, disk, caplog)
        finally:
            throwaway_postgres.stop()  # its tablespace goes before its disk


def test_a_full_disk_under_mariadb_fails_writes_whole_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """MariaDB: a server of the test's own on a small disk (InnoDB answers "the table is
    full"), with no binary log: where the binary log meets a full disk, MariaDB waits for
    room instead of answering, as it says in its log."""
    why = disks.unavailable_reason() or mariadbserver.unavailable_reason()
    if why is not None:
        unavailable(why)
    with disks.small_disk(200) as disk:
        mariadb = ThrowawayMariaDB(under=disk, binlog=False)
        try:
            mariadb.start().allow_tcp_root()
            fill_then_grow(mariadb.url, disk, caplog)
        finally:
            mariadb.stop()


@contextmanager
def locks_held(kind: str, url: str, statements: list[str]) -> Iterator[None]:
    """A session of another program that runs `statements` in a transaction left open
    ({messages}: the store's messages table) while the block runs, then lets go."""
    table = f"{url.split('prefix=')[1].split('&')[0]}messages"
    if kind == "postgres":
        session: Any = psycopg.connect(sqlstores.PG_URL)
    else:
        session = sqlstores.mysql_connect(url)
        session.autocommit(False)
        session.begin()
    try:
        with session.cursor() as cur:
            for statement in statements:
                cur.execute(statement.format(messages=table))
        yield
    finally:
        session.rollback()
        if kind == "mysql":
            with session.cursor() as cur:
                cur.execute("UNLOCK TABLES")
        session.close()


LOCKS = {
    "postgres": ["LOCK TABLE {messages} IN ACCESS EXCLUSIVE MODE"],
    "mysql": ["LOCK TABLES {messages} WRITE"],
}


def test_a_lock_held_by_another_session_fails_calls_after_lock_timeout(
    kind: str, urls: list[str]
) -> None:
    """Another session holds locks the store's statements need, and keeps its transaction
    open: a row of a received message (an operator's SELECT ... FOR UPDATE), then the
    messages table (LOCK TABLE, LOCK TABLES: what a schema change takes). A delete of that
    message, and then a send, fail once the URL's lock_timeout has passed (not retried,
    never waiting for ever), saying what to look for; nothing of them is written, and both
    work once the session lets go."""
    url = fresh(kind, urls, lock_timeout="1")
    with Client(url) as client:
        q = client.create_queue("held")
        q.send("first")
        (got,) = q.receive(1, wait=0)
        assert got.receipt
        with locks_held(kind, url, ["SELECT * FROM {messages} FOR UPDATE"]):
            started = time.monotonic()
            with pytest.raises(StoreUnavailable, match=r"waited 1 s \(lock_timeout\) for a lock"):
                q.delete(got.receipt)
            assert time.monotonic() - started < 4  # once, not retried
        with locks_held(kind, url, LOCKS[kind]):
            started = time.monotonic()
            with pytest.raises(StoreUnavailable, match="LOCK TABLE or a schema change"):
                q.send("while locked")
            assert time.monotonic() - started < 4
        q.delete(got.receipt)
        q.send("after")
        assert [m.body for m in q.receive(10, wait=0)] == [b"after"]


def test_a_statement_the_database_cancels_fails_its_call_without_retries(
    kind: str, urls: list[str]
) -> None:
    """A statement of the store cancelled by the database (here an operator's cancel of a
    send waiting for a table lock; a statement timeout set on the server says the same):
    the call fails at once with StoreUnavailable saying so, instead of being run again as
    if the connection had been lost."""
    url = fresh(kind, urls, lock_timeout="60")
    if kind == "postgres":
        watch: Any = psycopg.connect(sqlstores.PG_URL, autocommit=True)
        waiting = (
            "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND query LIKE 'INSERT%%' AND query LIKE %s"
        )
        cancel = "SELECT pg_cancel_backend(%s)"
    else:
        watch = sqlstores.mysql_connect(url)
        waiting = (
            "SELECT id FROM information_schema.processlist"
            " WHERE state LIKE 'Waiting for table metadata lock' AND info LIKE 'INSERT%%'"
            " AND info LIKE %s"
        )
        cancel = "KILL QUERY %s"
    failed: list[BaseException] = []
    found: list[Any] = []

    def blocked() -> bool:
        with watch.cursor() as cur:
            cur.execute(waiting, (sqlstores.statements_of(url),))
            found[:] = cur.fetchall()
        return bool(found)

    with Client(url) as client, watch:
        q = client.create_queue("cancelled")

        def send() -> None:
            try:
                q.send("waits")
            except StoreUnavailable as exc:
                failed.append(exc)

        sender = threading.Thread(target=send)
        with locks_held(kind, url, LOCKS[kind]):
            sender.start()
            until(blocked, 10, "a send waiting for the table lock")
            started = time.monotonic()
            with watch.cursor() as cur:
                cur.execute(cancel, (found[0][0],))
            sender.join(10)
            assert time.monotonic() - started < 5  # not retried for reconnect_timeout
        sender.join(60)
        (error,) = failed
        assert "the database cancelled a statement" in str(error)
        assert q.receive(10, wait=0) == []


@contextmanager
def role_of_its_own() -> Iterator[tuple[str, Any]]:
    """A login role of the test's own on the machine's PostgreSQL, with a schema of its own
    (where its tables go: first on its search path), and a session to change it with;
    dropped after."""
    role = f"conveyor_ro_{secrets.token_hex(4)}"
    admin: Any = psycopg.connect(sqlstores.PG_URL, autocommit=True)
    try:
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute(f"CREATE SCHEMA {role} AUTHORIZATION {role}")
        yield role, admin
    finally:
        admin.execute(f"DROP SCHEMA IF EXISTS {role} CASCADE")
        admin.execute(f"DROP OWNED BY {role}")
        admin.execute(f"DROP ROLE IF EXISTS {role}")
        admin.close()


def test_a_standby_the_address_led_to_is_left_for_the_primary_on_postgresql() -> None:
    """A failover behind one address (a DNS name, a proxy, a cloud endpoint): the old
    primary's sessions end, the store connects again to an address that still leads to it,
    now a standby that takes no writes, and then to the new primary. Here the role's
    sessions are ended and its new ones made read-only, and then new ones take writes again.
    Reads go on throughout; a send meets the refusal on the read-only sessions (SQLSTATE
    25006, nothing of it done) and is done once on a new connection. An address that leads
    to read-only sessions alone fails after `reconnect_timeout`, saying to give the primary's
    address."""
    why = sqlstores.reachable("postgres")
    if why is not None:
        unavailable(why)
    base = sqlstores.PG_URL.replace("postgres@", "{role}@", 1)
    with role_of_its_own() as (role, admin):

        def fail_over_to_standby() -> None:
            admin.execute(f"ALTER ROLE {role} SET default_transaction_read_only = on")
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )

        url = f"{base.format(role=role)}?prefix=standby_&reconnect_timeout=10"
        with Client(url) as client:
            q = client.create_queue("jobs")
            q.send("before")
            fail_over_to_standby()
            assert q.stats().ready == 1  # read on a new, read-only session
            admin.execute(f"ALTER ROLE {role} RESET default_transaction_read_only")
            q.send("after")  # refused on the read-only sessions, done on a new one
            got = q.receive(10, wait=0)
            assert sorted(m.text for m in got) == ["after", "before"]
            assert all(r.ok for r in q.delete_batch([m.receipt or "" for m in got]))
            assert q.stats().total == 0
        with Client(url.replace("=10", "=0.5")) as client:
            q = client.queue("jobs")
            assert q.stats().total == 0
            fail_over_to_standby()
            with pytest.raises(StoreUnavailable, match=r"has taken no writes .*primary's address"):
                q.send("never")


def test_a_server_made_read_only_for_a_while_is_waited_out_on_mariadb() -> None:
    """MariaDB set read-only (`read_only`, as a failover tool does to a demoted primary) for
    a moment: a send waits it out and is done once, for a user without the right to write
    past it; one that stays read-only fails after `reconnect_timeout`, saying so."""
    why = mariadbserver.unavailable_reason()
    if why is not None:
        unavailable(why)
    mariadb = ThrowawayMariaDB(binlog=False).start()
    try:
        admin = sqlstores.mysql_connect(mariadb.url)
        with admin.cursor() as cur:
            cur.execute("CREATE USER 'app'@'%'")
            cur.execute("GRANT ALL ON test.* TO 'app'@'%'")
        url = f"{mariadb.url.replace('root@', 'app@')}?prefix=ro_&reconnect_timeout=10"
        with Client(url) as client:
            q = client.create_queue("jobs")
            q.send("before")
            with admin.cursor() as cur:
                cur.execute("SET GLOBAL read_only = 1")
            timer = threading.Timer(0.5, lambda: admin.cursor().execute("SET GLOBAL read_only = 0"))
            timer.start()
            started = time.monotonic()
            q.send("after")
            timer.join()
            assert 0.4 < time.monotonic() - started < 10
            got = q.receive(10, wait=0)
            assert sorted(m.text for m in got) == ["after", "before"]
            with admin.cursor() as cur:
                cur.execute("SET GLOBAL read_only = 1")
        with (
            Client(url.replace("=10", "=0.5")) as client,
            pytest.raises(StoreUnavailable, match=r"has taken no writes .*primary's address"),
        ):
            client.queue("jobs").send("never")
        admin.close()
    finally:
        mariadb.stop()


def end_idle_sessions(kind: str, client: Client) -> None:
    """End the store's connections from the server's side while they are idle (what an
    idle timeout, an operator's kill or a proxy's restart does), and wait until they are
    gone."""
    backend = client.backend
    assert isinstance(backend, SQLStore)
    db: Any = backend.db
    if kind == "postgres":
        pids = [conn.info.backend_pid for conn, _ in db._held._idle]
        gone = "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)"
        with psycopg.connect(sqlstores.PG_URL, autocommit=True) as admin:
            for pid in pids:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            until(lambda: admin.execute(gone, (pids,)).fetchone() == (0,), 10, "ended")
        return
    ids = [conn.thread_id() for conn in list(db._idle.queue)]
    admin = sqlstores.mysql_connect(sqlstores.MYSQL_URL)
    with admin.cursor() as cur:
        for thread in ids:
            cur.execute("KILL CONNECTION %s", (thread,))

        def ended() -> bool:
            cur.execute("SELECT id FROM information_schema.processlist")
            return not {row[0] for row in cur.fetchall()} & set(ids)

        until(ended, 10, "ended")
    admin.close()


def test_a_connection_the_server_ended_while_idle_is_replaced_before_a_write(
    kind: str, urls: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """The server ends the store's idle connections (here killed; an idle timeout, a
    proxy's restart do the same). The next send finds so before it writes anything, takes
    a new connection, and is stored once: not answered OutcomeUnknown ("it may have been
    stored") as a send whose connection was lost in flight is. The log says what
    happened."""
    url = fresh(kind, urls)
    with Client(url) as client:
        q = client.create_queue("idle")
        q.send("first")
        q.send_batch(["a", "b"])
        for round_ in range(2):
            end_idle_sessions(kind, client)
            with caplog.at_level(logging.WARNING, logger="conveyor.store"):
                q.send(f"single {round_}")
                q.send_batch([f"batch {round_}", f"batch {round_}"])
            said = " ".join(r.getMessage() for r in caplog.records)
            assert "closed the connection while it was idle" in said and "reconnected" in said
            caplog.clear()
        got = q.receive(10, wait=0)
        assert len(got) == 9 and q.stats().ready == 0


def test_a_server_out_of_connections_is_waited_out_on_mariadb() -> None:
    """MariaDB at its `max_connections` (other programs hold them all): a store that needs
    a new connection waits for one (a busy database's moment) instead of failing at once,
    and fails after `reconnect_timeout` saying which limit to raise or what to lower; a
    store's first use fails at once, saying the same rather than to check the URL."""
    why = mariadbserver.unavailable_reason()
    if why is not None:
        unavailable(why)
    mariadb = ThrowawayMariaDB(binlog=False).start()
    hogs: list[Any] = []
    try:
        admin = sqlstores.mysql_connect(mariadb.url)
        with admin.cursor() as cur:
            cur.execute("CREATE USER 'app'@'%'")
            cur.execute("GRANT ALL ON test.* TO 'app'@'%'")
            cur.execute("SET GLOBAL max_connections = 10")  # MariaDB's least
        app = mariadb.url.replace("root@", "app@")
        url = f"{app}?prefix=crowd_&reconnect_timeout=10"

        def crowd() -> None:
            while True:
                try:
                    hogs.append(sqlstores.mysql_connect(app))
                except pymysql.err.OperationalError as exc:
                    assert exc.args[0] == 1040
                    return

        def let_go() -> None:
            while hogs:
                hogs.pop().close()

        with Client(url) as client:
            q = client.create_queue("jobs")
            q.send("before")
            crowd()
            with admin.cursor() as cur:  # its idle connection ends: it needs a new one
                cur.execute("SELECT id FROM information_schema.processlist WHERE user = 'app'")
                mine = [row[0] for row in cur.fetchall()]
                for thread in mine:
                    cur.execute("KILL CONNECTION %s", (thread,))
            crowd()  # the room the killed connections left
            timer = threading.Timer(0.5, let_go)
            timer.start()
            started = time.monotonic()
            q.send("after")
            timer.join()
            assert 0.4 < time.monotonic() - started < 10
            assert q.stats().ready == 2
        crowd()
        with (
            Client(url.replace("=10", "=0.5")) as client,
            pytest.raises(StoreUnavailable, match="raise the server's max_connections"),
        ):
            client.queue("jobs").send("never")
        let_go()
        admin.close()
    finally:
        for hog in hogs:
            hog.close()
        mariadb.stop()


def crowd_room(admin: Any, hogs: list[Any]) -> bool:
    """Whether client backends other than `admin` and `hogs` are still there."""
    mine = [admin.info.backend_pid] + [h.info.backend_pid for h in hogs]
    row = admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE pid <> ALL(%s)"
        " AND backend_type = 'client backend'",
        (mine,),
    ).fetchone()
    return bool(row and row[0])


def test_a_postgresql_out_of_connections_is_named_when_the_wait_ends() -> None:
    """PostgreSQL at its `max_connections` (others hold them all): a store's first use fails
    at once, and a running store that needs a new connection waits `reconnect_timeout`; both
    errors say the server has no connections to spare and which limit to raise (the pool
    itself says only that it had no connection to give)."""
    why = pgserver.unavailable_reason()
    if why is not None:
        unavailable(why)
    pg = ThrowawayPostgres("-c max_connections=8 -c superuser_reserved_connections=0").start()
    hogs: list[Any] = []

    def crowd() -> None:
        while True:
            try:
                hogs.append(psycopg.connect(pg.url, connect_timeout=5, autocommit=True))
            except psycopg.OperationalError as exc:
                assert "too many clients" in str(exc)
                return

    try:
        url = f"{pg.url}?prefix=crowd_&reconnect_timeout=1"
        with Client(url) as client, psycopg.connect(pg.url, autocommit=True) as admin:
            q = client.create_queue("jobs")
            q.send("before")
            crowd()
            admin.execute(  # the store's connections end: it needs new ones
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> ALL(%s)"
                " AND backend_type = 'client backend'",
                ([admin.info.backend_pid]
                 + [h.info.backend_pid for h in hogs],),
            )  # fmt: skip
            until(lambda: not crowd_room(admin, hogs), 10, "the store's connections ended")
            crowd()
            with pytest.raises(StoreUnavailable, match=r"no connections to spare .*max_conn"):
                q.send("after")
        crowd()  # the room the first store and the session above left
        with (
            Client(url) as client,
            pytest.raises(StoreUnavailable, match="raise the server's max_connections"),
        ):
            client.list_queues()
    finally:
        for hog in hogs:
            hog.close()
        pg.stop()


def test_the_last_counts_are_written_on_a_connection_the_server_ended(
    kind: str, urls: list[str]
) -> None:
    """The running totals a process still holds as it exits are written in one last attempt
    (`last_counts`): where the server ended the store's idle connections meanwhile, the
    attempt finds so before it sends anything and takes a new connection, once."""
    url = fresh(kind, urls)
    with Client(url) as client:
        q = client.create_queue("idle")
        q.send("a")  # its count written at once
        q.send("b")  # its count held for up to a second
        backend = client.backend
        assert isinstance(backend, SQLStore)
        assert backend.accounts.totals  # held
        end_idle_sessions(kind, client)
        last_counts(backend.db, backend.accounts.totals, backend.dialect)
        assert not backend.accounts.totals
    with Client(url) as again:
        assert again.queue("idle").stats().sent == 2
