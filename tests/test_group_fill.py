"""How a FIFO receive's walk chooses groups and when it may stop (rules.GroupFill)."""

from __future__ import annotations

from conveyor.backends.rules import GROUP_FILL_WINDOW, GroupFill


def walk(fill: GroupFill[int], messages: list[tuple[str, float, int]]) -> int:
    """Walk (group, visible_at, receive count) in send order; how many were walked."""
    for walked, (group, visible_at, count) in enumerate(messages, 1):
        fill.step(visible_at, count)
        fill.add(group, walked, visible_at)
        if fill.done:
            return walked
    return len(messages)


def test_one_group_of_new_messages_stops_at_a_full_batch() -> None:
    fill: GroupFill[int] = GroupFill(10)
    assert walk(fill, [("a", float(i), 0) for i in range(100)]) == 10
    assert fill.chosen() == list(range(1, 11))


def test_a_group_that_came_back_goes_after_those_that_waited_meanwhile() -> None:
    """Group a's messages came back at 50: the walk goes on until a message never received
    shows that no group further on opened before a; a group of messages sent before then
    (b, visible from 3) goes first."""
    came_back = [("a", 50.0, 1)] * 3
    fill: GroupFill[int] = GroupFill(3)
    assert walk(fill, [*came_back, ("b", 3.0, 0), ("b", 4.0, 0), ("b", 5.0, 0), ("c", 6.0, 0)]) == 6
    assert fill.chosen() == [4, 5, 6]
    fill = GroupFill(3)
    assert walk(fill, [*came_back, ("c", 60.0, 0), ("c", 61.0, 0)]) == 4  # c sent after 50
    assert fill.chosen() == [1, 2, 3]
    fill = GroupFill(3)
    walk(fill, [*came_back[:1], ("b", 3.0, 0), ("c", 40.0, 0), ("d", 60.0, 0)])
    assert fill.chosen() == [2, 3, 1]  # one each: b and c opened before a, d after


def test_many_groups_stop_a_window_past_a_full_batch() -> None:
    fill: GroupFill[int] = GroupFill(10)
    messages = [(f"g{i}", 100.0, 1) for i in range(5000)]  # came back, none new
    assert walk(fill, messages) == 10 + GROUP_FILL_WINDOW
    assert fill.chosen() == list(range(1, 11))
