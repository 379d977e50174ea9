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


@pytest.mark.slow
def test_sigkill_during_a_checkpoint_write_resumes_cleanly(tmp_path):
    """One trial (reference run + kill + rerun: ~6 min on 2 cores); the benchmark runs more."""
    summary = fault_injection.run_benchmark(1, seed=0, out=tmp_path,
                                            stages=["checkpoint_write"])
    failures = [r for r in summary["records"] if not r["resumed_cleanly"]]
    assert not failures, failures
    assert summary["outputs_verified"] == 1
    assert summary["prompts_lost_or_duplicated"] == 0
    assert summary["recomputed_steps_beyond_last_save"] == 0
    assert summary["faults_by_stage"], "no trial killed the run"
    assert summary["records"][0]["partial_saves_at_kill"], "killed before any save: no resume tested"
