"""rollouts.parquet: schema, policy versions and staleness from completions whose per-token
versions are known (as a PipelineRL generator that switched weights mid-sequence records them),
the filter reason, the response cap, and a partial save's rows read back on resume."""

import pytest

from scalerl.rl.rollout_log import (
    ROLLOUT_SCHEMA,
    RolloutLog,
    RolloutLogConfig,
    RolloutSchemaError,
    read_rollouts,
)
from scalerl.rollout.base import Completion, Request


def _completion(pid, sample, group, versions, text):
    n = len(versions)
    return Completion(Request(prompt_id=pid, prompt_ids=(1, 2, 3), sample_idx=sample, tag=group),
                      [5] * n, [-0.5] * n, [True] * n, versions, text, "stop", False, False)


def test_rows_carry_versions_staleness_and_reasons(tmp_path):
    log = RolloutLog(RolloutLogConfig(max_response_chars=4), run="r", chunk=1, config_hash="h")
    step_a = [_completion("p0", 0, 0, [3, 3, 4, 5], "abcdefgh"),  # switched 3 -> 5 mid-sequence
              _completion("p0", 1, 0, [5, 5], "xy"),
              _completion("p1", 2, 1, [4], "zz")]
    log.add(5, step_a, tasks=["math", "math", "code"], rewards=[1.0, -1.0, 1.0],
            correct=[True, False, True], kept=[True, True, False], npr_retired=["p1"])
    log.add(6, [_completion("p2", 3, 2, [6], "q")], tasks=["math"], rewards=[-1.0],
            correct=[False], kept=[False], npr_retired=[])
    log.write(tmp_path)
    table = read_rollouts(tmp_path)
    assert table.schema.remove_metadata() == ROLLOUT_SCHEMA
    cols = table.to_pydict()
    assert cols["step"] == [6, 6, 6, 7]
    assert cols["version_started"] == [3, 5, 4, 6]
    assert cols["version_finished"] == [5, 5, 4, 6]
    assert cols["staleness"] == [2, 0, 1, 0]
    assert cols["filter_reason"] == ["kept", "kept", "zero_variance", "zero_variance"]
    assert cols["npr_retired"] == [False, False, True, False]
    assert cols["response"] == ["abcd", "xy", "zz", "q"]
    assert cols["response_chars"] == [8, 2, 2, 1]
    assert cols["task"] == ["math", "math", "code", "math"]
    resumed = RolloutLog(RolloutLogConfig(max_response_chars=4), run="r", chunk=1,
                         config_hash="h")
    resumed.load(tmp_path, up_to_step=6)
    assert [r["sample_idx"] for r in resumed.rows] == [0, 1, 2]


def test_inconsistent_versions_are_rejected(tmp_path):
    log = RolloutLog(RolloutLogConfig(), run="r", chunk=1, config_hash="h")
    # a sample finished by a newer policy than the trainer's: impossible, must not be written
    log.add(2, [_completion("p0", 0, 0, [2, 3], "t")], tasks=["math"], rewards=[1.0],
            correct=[True], kept=[True], npr_retired=[])
    with pytest.raises(RolloutSchemaError, match="inconsistent"):
        log.write(tmp_path)


def test_disabled_log_writes_nothing(tmp_path):
    log = RolloutLog(RolloutLogConfig(enabled=False), run="r", chunk=1, config_hash="h")
    log.add(0, [_completion("p0", 0, 0, [0], "t")], tasks=["math"], rewards=[1.0],
            correct=[True], kept=[True], npr_retired=[])
    assert log.write(tmp_path) is None and not (tmp_path / "rollouts.parquet").exists()
