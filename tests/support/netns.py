"""A link to cut: a network namespace of the test's own joined to this one by a veth pair,
for a throwaway database server that listens there (on the pair's private /30, which no
other host can reach). `cut()` takes the link down, so that what either side sends is lost
without a word, as when a host is gone or a network partitioned (no reset, no refusal: TCP
waits); `mend()` brings it back. Making namespaces takes root and ip(8): tests skip
elsewhere (`unavailable_reason`)."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass


def unavailable_reason() -> str | None:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return "root and ip(8) (a network namespace to cut a database server off)"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@dataclass(frozen=True)
class Link:
    namespace: str
    here: str  # this side's address
    there: str  # the address a server in the namespace listens on
    _peer: str  # the namespace's end of the pair

    def run_there(self) -> list[str]:
        """The prefix of a command that runs in the namespace."""
        return ["ip", "netns", "exec", self.namespace]

    def cut(self) -> None:
        _ip("netns", "exec", self.namespace, "ip", "link", "set", self._peer, "down")

    def mend(self) -> None:
        _ip("netns", "exec", self.namespace, "ip", "link", "set", self._peer, "up")


@contextlib.contextmanager
def cut_off_link() -> Iterator[Link]:
    """A namespace and the veth pair to it, removed afterwards."""
    tag = secrets.token_hex(3)
    namespace, ours, theirs = f"conveyor-{tag}", f"cv{tag}a", f"cv{tag}b"
    net = f"10.{200 + secrets.randbelow(50)}.{secrets.randbelow(256)}"
    here, there = f"{net}.1", f"{net}.2"
    _ip("netns", "add", namespace)
    try:
        _ip("link", "add", ours, "type", "veth", "peer", "name", theirs)
        _ip("link", "set", theirs, "netns", namespace)
        _ip("addr", "add", f"{here}/30", "dev", ours)
        _ip("link", "set", ours, "up")
        _ip("netns", "exec", namespace, "ip", "addr", "add", f"{there}/30", "dev", theirs)
        _ip("netns", "exec", namespace, "ip", "link", "set", theirs, "up")
        _ip("netns", "exec", namespace, "ip", "link", "set", "lo", "up")
        yield Link(namespace, here, there, theirs)
    finally:
        subprocess.run(["ip", "link", "del", ours], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True, check=False)
