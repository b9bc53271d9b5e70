"""Wake-ups across the processes of one host that share a store (a SQLite file; a MySQL
database, whose processes on other hosts are left to the store's ticker).

A process with long polls on the store binds a Unix datagram socket in the store's wake
directory (beside a SQLite file, ``FILE-wake``; else, or where that path is too long for a
socket, under the temporary directory, named by a digest of the store's identity) and a
thread of its reads what arrives there: a queue's name, which wakes that process's waiters
on the queue (`conveyor.notify.HUB`). A process that commits a send (or anything else that
makes messages ready) sends the queue's name to every other socket of the directory. A
waiting receive is then woken within a millisecond or two of a send in any process; the
store's ticker stays as a safety net (and for delays and visibility timeouts ending).

A process removes its socket as it closes the store or exits; sockets of processes that
were killed are removed by the first sender or new listener that finds them refusing, and
the last listener to close removes the directory. Where the directory
cannot be made (no Unix sockets, a read-only temporary directory) the store falls back to
its ticker alone.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the modules below are imported where they are used: a process that
    import socket  # only looks into a store (the command line) goes without them

log = logging.getLogger("conveyor.store")

DATAGRAM = 4096  # queue names are far shorter
REFRESH = 0.5  # how often a sender looks at the directory again, at most (seconds)


SOCKET_PATH = 100  # what every platform takes in a Unix socket's path (Linux 107, macOS 103)
NAME = 16  # a socket's name in the directory, and its separator


def wake_directory(identity: str, beside: str | None = None) -> str:
    """`beside` + ``-wake`` where a socket's path there is short enough, else a directory
    under the temporary directory named by a digest of `identity`."""
    if beside is not None and len(beside) + len("-wake") + NAME <= SOCKET_PATH:
        return beside + "-wake"
    import hashlib
    import tempfile

    digest = hashlib.sha256(identity.encode()).hexdigest()[:20]
    return os.path.join(tempfile.gettempdir(), f"conveyor-wake-{digest}")


class Wakes:
    """This process's socket in a store's wake directory, and its sends to the others."""

    def __init__(
        self, identity: str, clock: Callable[[], float], *, beside: str | None = None
    ) -> None:
        self.directory = wake_directory(identity, beside)
        self._clock = clock
        self._lock = threading.Lock()
        self._own: str | None = None
        self._listener: socket.socket | None = None
        self._sender: socket.socket | None = None
        self._peers: list[str] = []
        self._peers_at = -1e18
        self._mtime = -1.0
        self._broken = os.name != "posix"  # Unix datagram sockets

    # -- listening ------------------------------------------------------------------------

    def _settled(self) -> bool:
        """Whether this process's socket is bound, or cannot be."""
        return self._listener is not None or self._broken

    def listen(self, wake: Callable[[str], None]) -> bool:
        """Bind this process's socket (once) and wake `wake(queue)` for what arrives; False
        where it cannot, and the ticker must do."""
        if self._settled():
            return not self._broken
        with self._lock:
            if self._settled():  # another thread bound it meanwhile
                return not self._broken
            import secrets
            import socket

            own = os.path.join(self.directory, f"{os.getpid():x}-{secrets.token_hex(3)}")
            try:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                for attempt in range(3):  # the last listener may remove the directory
                    os.makedirs(self.directory, mode=0o700, exist_ok=True)
                    try:
                        sock.bind(own)
                        break
                    except FileNotFoundError:
                        if attempt == 2:
                            raise
            except OSError as exc:
                log.warning(
                    "no wake-ups across processes for %s (%s): long polls see other processes'"
                    " sends on the store's ticker",
                    self.directory,
                    exc,
                )
                self._broken = True
                return False
            self._own, self._listener = own, sock
            self._sweep()
            atexit.register(_close, weakref.ref(self))
            threading.Thread(
                target=self._read, args=(sock, wake), name="conveyor-sqlite-wakes", daemon=True
            ).start()
            return True

    def _sweep(self) -> None:
        sweep(self.directory, keep=self._own)

    def _read(self, sock: socket.socket, wake: Callable[[str], None]) -> None:
        while True:
            try:
                data = sock.recv(DATAGRAM)
            except OSError:
                return
            if self._listener is not sock:
                return  # closed (the empty datagram `close` sends)
            if data:
                with contextlib.suppress(UnicodeDecodeError):
                    wake(data.decode())

    # -- announcing -----------------------------------------------------------------------

    def announce(self, queue: str) -> None:
        """Tell every other listening process that `queue` may have messages ready."""
        if self._broken:
            return
        peers = self._current_peers()
        if not peers:
            return
        sender = self._sender
        if sender is None:
            import socket

            sender = self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sender.setblocking(False)
        data = queue.encode()
        own = self._own
        for peer in peers:
            if peer == own:
                continue
            try:
                sender.sendto(data, peer)
            except (ConnectionRefusedError, FileNotFoundError):
                with contextlib.suppress(OSError):
                    os.unlink(peer)  # its process is gone
                self._peers_at = -1e18
            except OSError:
                pass  # its buffer is full (it has wake-ups enough) or it is going away

    def _current_peers(self) -> list[str]:
        now = self._clock()
        if now - self._peers_at < REFRESH:
            return self._peers
        self._peers_at = now
        try:
            mtime = os.stat(self.directory).st_mtime
        except OSError:
            self._peers, self._mtime = [], -1.0
            return self._peers
        if mtime != self._mtime:
            self._mtime = mtime
            try:
                self._peers = [os.path.join(self.directory, n) for n in os.listdir(self.directory)]
            except OSError:
                self._peers = []
        return self._peers

    def close(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            own, self._own = self._own, None
            if listener is not None and own is not None:
                import socket

                with (
                    contextlib.suppress(OSError),
                    socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as poke,
                ):
                    poke.sendto(b"", own)  # the reader returns from recv and sees it closed
                with contextlib.suppress(OSError):
                    os.unlink(own)
                with contextlib.suppress(OSError):
                    os.rmdir(self.directory)  # when this was the last listener
                listener.close()
            if self._sender is not None:
                self._sender.close()
                self._sender = None


def sweep(directory: str, keep: str | None = None) -> None:
    """Remove the sockets of processes that were killed (they refuse what is sent), and the
    directory itself when nothing is left in it."""
    import socket

    with (
        contextlib.suppress(OSError),
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe,
    ):
        probe.setblocking(False)
        for name in os.listdir(directory):
            peer = os.path.join(directory, name)
            if peer == keep:
                continue
            try:
                probe.sendto(b"", peer)
            except (ConnectionRefusedError, FileNotFoundError):
                with contextlib.suppress(OSError):
                    os.unlink(peer)
            except OSError:
                pass
    if keep is None:
        with contextlib.suppress(OSError):
            os.rmdir(directory)  # only when empty


def _close(ref: weakref.ref[Wakes]) -> None:
    wakes = ref()
    if wakes is not None:
        wakes.close()
