"""Fault injection for sweep configs: a grid whose runs collide on one run id is refused, at
load time (repeated list entry) and, for a grid built past load_sweep, by expand."""
import dataclasses

import pytest

from scalerl.config import ConfigError
from scalerl.sweep import expand, load_sweep

DATA = {"models": {"m": {"config": {}}}, "sweep": {"models": ["m"], "gen_lens": [4096]}}


def test_repeated_seed_is_refused_at_load_time():
    data = {**DATA, "sweep": {**DATA["sweep"], "seeds": [3, 3]}}
    with pytest.raises(ConfigError, match=r"sweep.seeds: \[3, 3\] lists an entry twice"):
        load_sweep(data)


def test_expand_names_the_colliding_run_id():
    sweep = load_sweep({**DATA, "sweep": {**DATA["sweep"], "seeds": [3]}})
    sweep = dataclasses.replace(sweep, grid=dataclasses.replace(sweep.grid, seeds=(3, 3)))
    with pytest.raises(ConfigError) as err:
        expand(sweep)
    assert "m_L4096_scalerl_b48x16_s3" in str(err.value) and "distinct" in str(err.value)
