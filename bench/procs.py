"""Processes the benchmarks watch, from /proc (Linux): a process and its descendants."""

from __future__ import annotations

import os
from pathlib import Path


def tree(pid: int) -> dict[int, tuple[str, int]]:
    """pid -> (command name, resident KiB) of `pid` and every descendant."""
    parents: dict[int, int] = {}
    info: dict[int, tuple[str, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        parents[int(entry)] = int(fields.get("PPid", "0").strip())
        rss = int(fields.get("VmRSS", "0 kB").split()[0]) if "VmRSS" in fields else 0
        info[int(entry)] = (fields.get("Name", "").strip(), rss)
    out = {}
    frontier = [pid]
    while frontier:
        p = frontier.pop()
        out[p] = info.get(p, ("", 0))
        frontier += [c for c, parent in parents.items() if parent == p]
    return out


def cpu_seconds(pid: int) -> float:
    """User and system CPU of a process and its live descendants (a server's workers, the
    push gateway's fsync helper, RabbitMQ's Erlang VM)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total
