"""What a pipeline job is doing, for the person who started it: its phases (Spark's start,
planning, execution, commit) with their times, and a line per stage with its tasks.

Spark's own console progress bars are off in `conveyor pipeline` (they interleave with the
output); this follows the job through Spark's status tracker instead, from a thread that
looks every quarter of a second.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

Echo = Callable[[str], None]


class Phases:
    """Phase lines and stage lines of one job, written through `echo` (stderr)."""

    def __init__(self, echo: Echo) -> None:
        self.echo = echo
        self._phase = ""
        self._since = time.monotonic()

    def phase(self, name: str) -> None:
        """End the current phase (saying how long it took) and begin `name`."""
        now = time.monotonic()
        if self._phase:
            self.echo(f"{self._phase}: {now - self._since:.1f} s")
        self._phase, self._since = name, now

    @contextmanager
    def follow(self, spark: Any) -> Iterator[None]:
        """Planning until Spark runs a stage of the job, execution with a line per stage as
        it ends, commit while no stage runs after one did (the job's own writes, its
        publish). The job's Spark jobs are told apart by a job group of their own. A Spark
        Connect session has no status tracker for its client: one phase, `running`."""
        try:
            sc = spark.sparkContext
        except AttributeError:  # Spark Connect: a session without a JVM of its own
            self.phase("running")
            try:
                yield
            finally:
                self.phase("")
            return
        group = f"conveyor-{uuid.uuid4().hex[:12]}"
        sc.setJobGroup(group, "conveyor pipeline")
        self.phase("planning")
        stop = threading.Event()
        watcher = threading.Thread(
            target=self._watch, args=(sc.statusTracker(), group, stop), daemon=True
        )
        watcher.start()
        try:
            yield
        finally:
            stop.set()
            watcher.join(10)
            self.phase("")

    def _watch(self, tracker: Any, group: str, stop: threading.Event) -> None:
        from py4j.protocol import Py4JError

        reported: set[int] = set()
        first_seen: dict[int, float] = {}
        while True:
            last = stop.is_set()  # one more look once the job is over: no stage goes unsaid
            try:
                stages = sorted(
                    sid
                    for jid in tracker.getJobIdsForGroup(group)
                    if (job := tracker.getJobInfo(jid)) is not None
                    for sid in job.stageIds
                )
                active = set(tracker.getActiveStageIds()) & set(stages)
                now = time.monotonic()
                for sid in active:
                    first_seen.setdefault(sid, now)
                if active and self._phase in ("planning", "commit"):
                    self.phase("execution")
                for sid in stages:
                    if sid in reported or sid in active:
                        continue
                    info = tracker.getStageInfo(sid)
                    if info is None or info.numCompletedTasks < info.numTasks:
                        continue  # not run (yet), or skipped
                    if self._phase == "planning":
                        self.phase("execution")
                    reported.add(sid)
                    took = now - first_seen.get(sid, now)
                    name = str(info.name).split(" at ")[0]
                    self.echo(f"  stage {sid} ({name}): {info.numTasks} tasks, {took:.1f} s")
                if not active and reported and self._phase == "execution":
                    self.phase("commit")
            except Py4JError:  # the session went away: nothing more to follow
                return
            if last:
                return
            stop.wait(0.25)
