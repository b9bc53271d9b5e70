"""The throwaway database servers the fault tests start (tests/support/): their ports are
chosen where no connection's local port falls, and a port taken between its choice and the
server's bind (by the other test worker, say) costs a second start on a fresh port, not the
test."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pymysql
import pytest

from .conftest import unavailable
from .support import mariadbserver, pgserver
from .support.mariadbserver import ThrowawayMariaDB
from .support.pgserver import ThrowawayPostgres
from .support.waiting import ephemeral_floor, free_port, port_free

pytestmark = pytest.mark.slow


@contextmanager
def taken(port: int) -> Iterator[None]:
    """Another process listens on `port` (on every loopback address, as a server would)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()
        yield


def test_a_throwaway_postgres_whose_port_was_taken_starts_on_another() -> None:
    why = pgserver.unavailable_reason()
    if why is not None:
        unavailable(why)
    pg = ThrowawayPostgres()
    chosen = pg.port
    try:
        with taken(chosen):
            pg.start()
        assert pg.port != chosen
        with psycopg.connect(pg.url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        pg.restart()  # it keeps its new port
        with psycopg.connect(pg.url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        pg.stop()


def test_a_throwaway_mariadb_whose_port_was_taken_starts_on_another() -> None:
    why = mariadbserver.unavailable_reason()
    if why is not None:
        unavailable(why)
    db = ThrowawayMariaDB(binlog=False)
    chosen = db.port
    try:
        with taken(chosen):
            db.start()
        assert db.port != chosen
        assert db.url.endswith(f":{db.port}/test")
        db.allow_tcp_root()
        tcp = pymysql.connect(host="127.0.0.1", port=db.port, user="root")
        with tcp, tcp.cursor() as cur:
            cur.execute("SELECT 1")
            assert cur.fetchall() == ((1,),)
    finally:
        db.stop()


def test_a_throwaway_postgres_that_cannot_start_says_why() -> None:
    why = pgserver.unavailable_reason()
    if why is not None:
        unavailable(why)
    pg = ThrowawayPostgres("-c shared_buffers=nonsense")
    try:
        with pytest.raises(RuntimeError, match="shared_buffers"):
            pg.start()
    finally:
        pg.stop()


def test_free_ports_lie_below_the_ephemeral_range_where_no_connection_takes_them() -> None:
    floor = ephemeral_floor()
    if floor <= 12000:
        pytest.skip(f"this system's ephemeral range starts at {floor}: no room below it")
    ports = {free_port() for _ in range(20)}
    assert all(10000 <= port < floor and port_free(port) for port in ports), ports
    assert len(ports) > 1  # picked at random: two tests beside each other seldom meet
    # the local ports of outgoing connections lie in the range, so never on one of them
    with socket.create_server(("127.0.0.1", 0)) as server:
        with socket.create_connection(server.getsockname()) as client:
            assert client.getsockname()[1] >= floor
        with taken(next(iter(ports))):
            assert not port_free(next(iter(ports)))
