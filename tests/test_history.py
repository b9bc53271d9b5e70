"""The history checker finds each kind of fault it reports, and nothing in a clean history."""

from __future__ import annotations

from .support.history import History, Op, check


def op(kind: str, start: float, end: float, outcome: str = "ok", **what: object) -> Op:
    return Op("p", kind, start, end, outcome, **what)  # type: ignore[arg-type]


def history(*ops: Op) -> History:
    h = History()
    h.ops.extend(ops)
    return h


def test_a_clean_history_has_no_problems() -> None:
    h = history(
        op("send", 0, 1, body="a", group="g", seq=0),
        op("send", 1, 2, body="b", group="g", seq=1),
        op("receive", 2, 3, got=[("a", "m1", "r1"), ("b", "m2", "r2")]),
        op("delete", 3, 4, body="a", receipt="r1"),
        op("delete", 3, 4, body="b", receipt="r2"),
    )
    report = check(h, [], visibility=30)
    assert report.problems() == {} and report.sent_ok == 2 and report.delivered == 2


def test_each_fault_is_found() -> None:
    h = history(
        op("send", 0, 1, body="lost"),
        op("send", 0, 1, body="unknown", outcome="info"),  # never seen: not counted lost
        op("send", 0, 1, body="a", group="g", seq=0),
        op("send", 1, 2, body="b", group="g", seq=1),
        op("receive", 2, 3, got=[("b", "m2", "r2")]),  # b before a: out of order
        op("receive", 4, 5, got=[("a", "m1", "r1")]),
        op("delete", 5, 6, body="a", receipt="r1"),
        op("receive", 7, 8, got=[("a", "m1", "r3")]),  # after its delete was acknowledged
        op("send", 0, 1, body="twice"),
        op("receive", 2, 3, got=[("twice", "m4", "r4")]),
        op("receive", 4, 5, got=[("twice", "m4", "r5")]),  # within the first's 30 s
    )
    report = check(h, [("twice", "m9")], visibility=30)  # and under a second id
    assert report.problems() == {
        "lost": ["lost"],
        "after_delete": ["a"],
        "concurrent": ["a", "twice"],
        "duplicated": ["twice"],
        "order": ["g"],
    }
    assert report.sent_unknown == 1
