"""benchmarks/fault_injection.py: its accounting flags lost/duplicated prompts (fast), and a
seeded SIGKILL trial of the tiny workflow (as a mid-chunk train save is written) resumes
cleanly (slow)."""

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "fault_injection.py"
_spec = importlib.util.spec_from_file_location("fault_injection", BENCH)
fault_injection = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fault_injection)


def _rows(pairs, staleness=0):
    return [{"step": s, "prompt_id": p, "staleness": staleness} for s, p in pairs]


def test_on_policy_accounting_flags_a_duplicated_and_a_missing_prompt():
    reference = _rows([(1, "a"), (1, "b"), (2, "c"), (2, "d")])
    assert fault_injection.on_policy_discrepancy(reference, reference) == {
        "lost": 0, "duplicated": 0}
    resumed = _rows([(1, "a"), (1, "b"), (2, "c"), (2, "c")])  # d skipped, c trained twice
    assert fault_injection.on_policy_discrepancy(resumed, reference) == {
        "lost": 1, "duplicated": 1}
    rerun_step = _rows([(1, "a"), (1, "b"), (1, "a"), (1, "b"), (2, "c"), (2, "d")])
    assert fault_injection.on_policy_discrepancy(rerun_step, reference)["duplicated"] == 2


def test_pipeline_accounting_flags_stale_missing_and_extra_samples():
    rows = _rows([(1, "a"), (1, "b"), (2, "c")]) + _rows([(2, "d"), (2, "e")], staleness=3)
    assert fault_injection.pipeline_discrepancy(rows, max_lag=2, per_step=2) == {
        "too_stale": 2, "lost": 0, "duplicated": 1}
    assert fault_injection.pipeline_discrepancy(rows[:3], max_lag=2, per_step=2)["lost"] == 1
    # against the reference's steps: a step with no rows at all is lost, one not expected extra
    only_step_1 = _rows([(1, "a"), (1, "b")])
    assert fault_injection.pipeline_discrepancy(only_step_1, max_lag=2, per_step=2,
                                                steps={1, 2, 3})["lost"] == 4
    assert fault_injection.pipeline_discrepancy(rows[:3], max_lag=2, per_step=2,
                                                steps={1}) == {
        "too_stale": 0, "lost": 0, "duplicated": 1}


def test_failpoint_spec_parses_and_rejects_bad_entries():
    from scalerl.utils.failpoints import parse_failpoints

    assert parse_failpoints("checkpoint_write:chunk4.partial@2=stop, x@1=raise") == {
        ("checkpoint_write", "chunk4.partial", 2): "stop", ("x", None, 1): "raise"}
    for bad in ("checkpoint_write@0=stop", "checkpoint_write@2=pause", "@1=kill", "a:b=stop"):
        with pytest.raises(ValueError, match="NAME"):
            parse_failpoints(bad)


def test_failpoint_fires_on_the_nth_hit_of_its_context_only(monkeypatch):
    from scalerl.utils import failpoints

    monkeypatch.setenv(failpoints.ENV, "checkpoint_write:chunk4.partial@2=raise")
    monkeypatch.setattr(failpoints, "_hits", failpoints.Counter())
    failpoints.failpoint("checkpoint_write", "chunk4.partial")  # 1st: nothing
    for _ in range(3):
        failpoints.failpoint("checkpoint_write", "chunk3.partial")  # other context: nothing
    with pytest.raises(failpoints.FailpointError):
        failpoints.failpoint("checkpoint_write", "chunk4.partial")
    failpoints.failpoint("checkpoint_write", "chunk4.partial")  # 3rd: nothing


def test_a_killed_writers_temp_directories_are_removed(tmp_path):
    from scalerl.utils.io import remove_stale_temps

    out = tmp_path / "chunk4.partial"
    for name in (".chunk4.partial.tmp-abc", ".chunk4.partial.old-12", ".chunk4.tmp-x",
                 "chunk4.partial"):
        (tmp_path / name).mkdir()
    removed = remove_stale_temps(out)
    assert sorted(p.name for p in removed) == [".chunk4.partial.old-12", ".chunk4.partial.tmp-abc"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".chunk4.tmp-x", "chunk4.partial"]


@pytest.mark.slow
def test_sigkill_during_a_checkpoint_write_resumes_cleanly(tmp_path):
    """One trial (reference run + kill + rerun: ~6 min on 2 cores); the benchmark runs more.

    The trainer freezes itself in the middle of an intra-chunk save whose predecessor is
    complete (a failpoint), and the harness kills the workflow then: the state this test
    asserts is arranged, not waited for, so it holds on a fast or a loaded machine."""
    summary = fault_injection.run_benchmark(1, seed=0, out=tmp_path,
                                            stages=["checkpoint_write"])
    record = summary["records"][0]
    failures = [r for r in summary["records"] if not r["resumed_cleanly"]]
    assert not failures, failures
    assert record["killed"] and record["save_at"] >= 2, record
    assert record["partial_saves_at_kill"], record  # the previous save, complete
    assert any(".partial.tmp-" in name for name in record["temp_dirs_at_kill"]), record
    assert record["temp_dirs_after_rerun"] == [], record
    assert summary["outputs_verified"] == 1
    assert summary["prompts_lost_or_duplicated"] == 0
    assert summary["recomputed_steps_beyond_last_save"] == 0
