"""Trial allocation by expected gain (pure arithmetic: no TVM build)."""

from __future__ import annotations

from convtune.tuner.search.allocation import allocate


def test_allocation_is_proportional_to_gain_within_bounds_and_sums_to_the_pool():
    shares = allocate([10.0, 1.0, 1.0, 0.1], 24, [2] * 4, [12] * 4)
    assert shares == [12, 5, 5, 2]  # capped, proportional, raised to the floor
    assert sum(allocate([3.0, 2.0, 1.0], 17, [1] * 3, [40] * 3)) == 17


def test_allocation_of_an_empty_pool_and_of_no_gain():
    assert allocate([10.0, 1.0], 0, [0, 0], [12, 12]) == [0, 0]
    assert allocate([0.0, 0.0, 0.0], 7, [0] * 3, [12] * 3) == [3, 2, 2]  # even split
    assert allocate([], 10, [], []) == []


def test_allocation_respects_per_task_room():
    # The second task already has most of its trials: it can take 4 more at most.
    assert allocate([5.0, 5.0], 30, [0, 0], [12, 4]) == [12, 4]
