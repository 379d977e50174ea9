"""PipelineRL on the fixed schedule (`RunConfig.pipeline_fixed_lag`) is reproducible.

Two runs of the same config, each two chunks (2 + 3 steps) of the real trainer, HF engine,
generator process and verifiers on the micro base, end in bit-identical weights and the same
samples; every sample's staleness is the schedule's, s − max(s − d, the chunk's first step).
The schedule's independence of timing is checked with a fake engine in test_pipeline.py.
"""

import pytest
import torch
from test_trainer_helpers import cache_dir, micro_base, run_config_dict

from scalerl.config import ConfigError
from scalerl.rl.rollout_log import read_rollouts
from scalerl.rl.run_config import RunConfig
from scalerl.rl.trainer import train_chunk

pytestmark = pytest.mark.slow  # ~4 pipeline chunks, each starting a generator process


@pytest.fixture(scope="module")
def micro(request, tmp_path_factory):
    return micro_base(cache_dir(request, tmp_path_factory))


def _run_twice_chunks(micro, root, cfg):
    for chunk, init in ((1, micro / "base"), (2, root / "c1")):
        train_chunk(cfg, chunk=chunk, init=init, prompts=micro / "prompts.parquet",
                    out=root / f"c{chunk}")


def _weights(path):
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def test_two_runs_on_the_fixed_schedule_are_identical(micro, tmp_path):
    cfg = RunConfig.from_dict({**run_config_dict(), "chunk_steps": [2, 3],
                               "pipeline_fixed_lag": 1})
    assert cfg.recipe.off_policy == "pipeline"
    for name in ("a", "b"):
        _run_twice_chunks(micro, tmp_path / name, cfg)
    for chunk in (1, 2):
        a, b = (_weights(tmp_path / name / f"c{chunk}") for name in ("a", "b"))
        assert a.keys() == b.keys()
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)
        ra, rb = (read_rollouts(tmp_path / name / f"c{chunk}").to_pandas() for name in "ab")
        assert ra.equals(rb)
    rows = read_rollouts(tmp_path / "a" / "c2").to_pandas()
    # chunk 2 starts at step 2: batch s (trained at step s + 1) made by max(s − 1, 2)
    assert rows.groupby("step")["staleness"].agg(set).to_dict() == {3: {0}, 4: {1}, 5: {1}}


def test_fixed_lag_above_max_lag_is_a_config_error():
    with pytest.raises(ConfigError, match="exceeds the recipe's max_lag = 2"):
        RunConfig.from_dict({**run_config_dict(), "pipeline_fixed_lag": 3})
