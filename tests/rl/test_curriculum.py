"""No-Positive-Resampling: epoch sampler, retirement, state round-trip, all-retired."""

from __future__ import annotations

import json

import pytest
import torch

from scalerl.rl.curriculum import AllPromptsRetired, NoPositiveResampling


def test_epochs_cover_every_prompt_once_and_are_seeded():
    npr = NoPositiveResampling(list(range(12)), seed=3)
    epoch0 = npr.next_batch(4) + npr.next_batch(4) + npr.next_batch(4)
    epoch1 = npr.next_batch(6) + npr.next_batch(6)
    assert sorted(epoch0) == sorted(epoch1) == list(range(12))
    assert epoch0 != epoch1  # reshuffled per epoch
    assert npr.epoch == 1
    again = NoPositiveResampling(list(range(12)), seed=3)
    assert again.next_batch(24) == epoch0 + epoch1  # same seed, same walk, across epochs
    other = NoPositiveResampling(list(range(12)), seed=4)
    assert other.next_batch(12) != epoch0


def test_retirement_at_threshold_from_later_epochs():
    npr = NoPositiveResampling(["a", "b", "c", "d"], threshold=0.9, seed=0)
    assert sorted(npr.next_batch(4)) == ["a", "b", "c", "d"]
    # a: 9/10 = 0.9 >= 0.9 -> retired; b: 8/10 = 0.8 -> stays; c: 10/10 -> retired.
    newly = npr.update(["a"] * 10 + ["b"] * 10 + ["c"] * 10,
                       [True] * 9 + [False] + [True] * 8 + [False] * 2 + [True] * 10)
    assert newly == ["a", "c"]
    assert npr.n_retired == 2 and npr.n_active == 2
    assert npr.is_retired("a") and not npr.is_retired("b")
    assert npr.pass_rate("b") == pytest.approx(0.8) and npr.pass_rate("d") is None
    for _ in range(5):
        assert sorted(npr.next_batch(2)) == ["b", "d"]  # one epoch per batch, only active


def test_history_accumulates_across_epochs_and_min_samples():
    npr = NoPositiveResampling([0, 1], threshold=0.9, min_samples=4)
    assert npr.update([0, 0, 0], [True, True, True]) == []  # 3 < min_samples
    assert npr.update([0], [True]) == [0]  # 4/4
    # prompt 1: 8/10 then 10/10 -> 18/20 = 0.9 over all epochs -> retired
    assert npr.update([1] * 10, [True] * 8 + [False] * 2) == []
    assert npr.update(torch.tensor([1] * 10), torch.ones(10, dtype=torch.bool)) == [1]
    assert npr.pass_rate(1) == pytest.approx(0.9)


def test_prompt_retired_mid_epoch_is_skipped():
    npr = NoPositiveResampling(list(range(6)), seed=1)
    first = npr.next_batch(3)
    rest_of_epoch = [p for p in npr.state_dict()["order"] if p not in first]
    npr.update([rest_of_epoch[0]] * 2, [True, True])  # retired before its turn comes
    second = npr.next_batch(2)
    assert second == rest_of_epoch[1:]
    assert npr.epoch == 0


def test_state_round_trip_continues_identically():
    def drive(npr: NoPositiveResampling, steps: range) -> list[list[int]]:
        batches = []
        for step in steps:
            batch = npr.next_batch(5)
            # deterministic grading: multiples of 3 always pass, p = 1 (mod 3) from step 6 on
            npr.update(batch, [p % 3 == 0 or (step >= 6 and p % 3 == 1) for p in batch])
            batches.append(batch)
        return batches

    ids = list(range(17))
    uninterrupted = drive(NoPositiveResampling(ids, threshold=0.5, seed=7), range(12))
    first = NoPositiveResampling(ids, threshold=0.5, seed=7)
    head = drive(first, range(5))
    state = json.loads(json.dumps(first.state_dict()))  # must be JSON-serialisable
    resumed = NoPositiveResampling(ids, threshold=0.5, seed=7)
    resumed.load_state_dict(state)
    tail = drive(resumed, range(5, 12))
    assert head + tail == uninterrupted
    # Retirement happens on both sides of the resume point (multiples of 3 always pass).
    assert 0 < len(state["retired"]) < resumed.n_retired
    assert all(resumed.is_retired(p) for p in range(0, 17, 3))
    assert resumed.state_dict() == drive_state(ids, 12)


def drive_state(ids: list[int], n_steps: int) -> dict:
    npr = NoPositiveResampling(ids, threshold=0.5, seed=7)
    for step in range(n_steps):
        batch = npr.next_batch(5)
        npr.update(batch, [p % 3 == 0 or (step >= 6 and p % 3 == 1) for p in batch])
    return npr.state_dict()


def test_all_retired_raises():
    npr = NoPositiveResampling([1, 2], threshold=0.9)
    npr.next_batch(2)
    npr.update([1, 2], [True, True])
    with pytest.raises(AllPromptsRetired, match="all 2 training prompts .* npr_threshold"):
        npr.next_batch(1)


def test_disabled_npr_never_retires_but_records():
    npr = NoPositiveResampling([1, 2, 3], threshold=None, seed=0)
    npr.next_batch(3)
    assert npr.update([1, 2, 3] * 4, [True] * 12) == []
    assert npr.n_retired == 0 and npr.pass_rate(1) == 1.0
    assert sorted(npr.next_batch(3)) == [1, 2, 3]


def test_small_active_set_spans_epochs():
    npr = NoPositiveResampling([5, 6], threshold=None, seed=0)
    batch = npr.next_batch(5)  # 2.5 epochs
    assert len(batch) == 5 and sorted(batch[:2]) == [5, 6] and sorted(batch[2:4]) == [5, 6]
    assert npr.epoch == 2


def test_errors():
    with pytest.raises(ValueError, match="unique"):
        NoPositiveResampling([1, 1])
    with pytest.raises(ValueError, match="at least one"):
        NoPositiveResampling([])
    with pytest.raises(ValueError, match="threshold = 1.5"):
        NoPositiveResampling([1], threshold=1.5)
    with pytest.raises(ValueError, match="int or str"):
        NoPositiveResampling([1.5])
    npr = NoPositiveResampling([1, 2])
    with pytest.raises(ValueError, match="unknown prompt id"):
        npr.update([3], [True])
    with pytest.raises(ValueError, match="2 prompt ids but 1"):
        npr.update([1, 2], [True])
    with pytest.raises(ValueError, match="n = 0"):
        npr.next_batch(0)
    state = npr.state_dict()
    with pytest.raises(ValueError, match="different prompt set"):
        NoPositiveResampling([1, 2, 3]).load_state_dict(state)
    with pytest.raises(ValueError, match="seed=0 but this sampler has 1"):
        NoPositiveResampling([1, 2], seed=1).load_state_dict(state)
