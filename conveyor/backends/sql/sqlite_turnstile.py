"""How a write waits for a SQLite file's write lock that another connection holds, and
turns at the lock for a writer that has waited long.

SQLite lets a writer that finds the lock taken sleep in its busy handler (1, 2, 5 ... 100
ms) and try again. A process that writes in a loop takes the lock again microseconds after
it let it go, so a sleeper's tries can keep meeting it taken: with four processes sending
on one file, one send waited 930 ms while the others went on; with four draining one
queue, one process moved 10 messages of 20,000. So a write waits in three steps:

1. `FINE_AFTER` (5 ms) in SQLite's busy handler (tries after 1, 3 and 5 ms): the common
   wait, for a transaction under way, ends here;
2. then until `TURN_AFTER` (50 ms) it tries every 0.1 ms, growing to 0.5 ms, and catches
   the lock between another process's transactions;
3. then it takes the file's turn: it holds an exclusive `flock` on ``FILE-turn`` (beside
   the database) and raises a flag in that file's first byte, which every process on the
   file has mapped into memory. Every write looks at the flag before it asks for the lock
   (a read from memory, no system call) and, while the flag is up, holds back (for
   `HOLD_BACK` at most: a writer stopped with the turn, by SIGSTOP or a debugger, holds
   each process back once, and the turn is not waited for again while it lasts), then
   tries in short steps as in 2. The writer with the turn has the lock as soon as the
   transactions under way end, and lowers the flag once it has it. Writers that have
   waited long take the turn one after another (the `flock`).

A flag left up by a process that died holding the turn (its `flock` went with it) is
lowered by the first writer that finds no `flock` behind it. Where the file cannot be made
(a read-only directory) a write waits in SQLite's busy handler alone, for the whole busy
timeout, as every read does.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import mmap
import os
import threading
import time
from collections.abc import Iterator

log = logging.getLogger("conveyor.store")

FINE_AFTER = 0.005  # seconds a write waits in SQLite's busy handler, then tries in short steps
TURN_AFTER = 0.05  # seconds a write waits in all before it takes the turn
SIZE = 8  # bytes of the turn file: the flag is the first
CHECK_HOLDER = 0.05  # seconds a writer gives way before it looks whether the turn is held
HOLD_BACK = 1.0  # seconds a writer gives way at most, then asks for the lock all the same


def short_tries(until: float, first: float = 0.0002) -> Iterator[None]:
    """Yield for a try, then sleep `first` seconds, doubling to 0.5 ms, and yield again,
    until time.monotonic() has reached `until` (a try is made at or after it, last)."""
    pause = first
    while True:
        yield
        if time.monotonic() >= until:
            return
        time.sleep(pause)
        pause = min(pause * 2, 0.0005)


class Turnstile:
    """The turn file of one SQLite database, as this process sees it."""

    def __init__(self, database: str) -> None:
        self.path = database + "-turn"
        self._mutex = threading.Lock()  # one thread of this process takes the turn at a time
        mode = 0o644
        with contextlib.suppress(OSError):
            mode = os.stat(database).st_mode & 0o666
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode)
        try:
            if os.fstat(fd).st_size < SIZE:
                os.ftruncate(fd, SIZE)  # every process that gets here makes it the same size
            self.flag = mmap.mmap(fd, SIZE)
        except OSError:
            os.close(fd)
            raise
        self._fd = fd
        # the flag of a turn this process gave way to for `HOLD_BACK` in vain (its holder
        # stopped): not waited for again while it stays up, and when it was last looked at
        self.stuck = 0
        self._stuck_looked = 0.0

    @classmethod
    def open(cls, database: str) -> Turnstile | None:
        """The turnstile of `database`, or None where its file cannot be made or mapped."""
        try:
            return cls(database)
        except (OSError, ValueError) as exc:
            log.debug("SQLite store %s: no turns at the write lock (%s)", database, exc)
            return None

    def give_way(self, until: float) -> None:
        """Wait while another writer has the turn (its flag is up), for `HOLD_BACK` and until
        `until` (time.monotonic()) at most; a flag whose holder has gone is lowered. A turn
        held past `HOLD_BACK` (its holder stopped) is not waited for again while it lasts."""
        started = time.monotonic()
        flag = self.flag[0]
        if flag == 0:
            return
        if flag == self.stuck:
            if started - self._stuck_looked >= HOLD_BACK:
                self._stuck_looked = started
                self._lower_if_left()
            return
        self.stuck = 0  # the turn given way to in vain has ended
        looked = started
        for _ in short_tries(min(until, started + HOLD_BACK)):
            if not self.flag[0]:
                return
            now = time.monotonic()
            if now - looked >= CHECK_HOLDER:
                looked = now
                self._lower_if_left()
        now = time.monotonic()
        if self.flag[0] and now >= started + HOLD_BACK:
            self.stuck, self._stuck_looked = self.flag[0], now
            log.warning(
                "SQLite store %s: a writer has held the turn at the write lock for %.1f s"
                " without taking the lock (a process stopped?); writes go on without waiting"
                " for it",
                self.path,
                now - started,
            )

    def held_up(self) -> bool:
        """Whether another writer has the turn, and is not stopped with it."""
        flag = self.flag[0]
        return flag != 0 and flag != self.stuck

    def _lower_if_left(self) -> None:
        """Lower a flag that no `flock` holds up: its process died with the turn."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return  # held: a writer has the turn
        else:
            if self.flag[0]:
                log.info("SQLite store: a turn at the write lock left by a process that ended")
                self.flag[0] = 0
        finally:
            os.close(fd)  # and with it the shared flock

    def take(self, until: float) -> bool:
        """Take the turn, waiting for other writers who have it for `HOLD_BACK` and until
        `until` at most; False where it could not be had by then. `leave()` gives it
        back."""
        until = min(until, time.monotonic() + HOLD_BACK)
        if not self._mutex.acquire(timeout=max(until - time.monotonic(), 0.0)):
            return False
        taken = False
        for _ in short_tries(until):
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                taken = True
                break
            except BlockingIOError:
                continue
            except OSError:
                break
        if not taken:
            self._mutex.release()
            return False
        # each turn's flag differs from the last one's (1-255), so that a turn given way to in
        # vain is told from the next
        turn = self.flag[1] % 255 + 1
        self.flag[1] = turn
        self.flag[0] = turn
        return True

    def leave(self) -> None:
        """Lower the flag and give the turn back."""
        self.flag[0] = 0
        with contextlib.suppress(OSError):
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._mutex.release()

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError, BufferError):
            self.flag.close()
        with contextlib.suppress(OSError):
            os.close(self._fd)
