"""Fault injection for fit inputs: an infinite reward or compute value is refused with an error
naming the file and the row; the input files are left unchanged."""
import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scalerl.fit.inputs import InputError, load_groups


def _checksums(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("column", ["reward", "compute"])
def test_inf_in_second_file_names_file_and_row(tmp_path, column):
    good = pd.DataFrame({"gpu_hours": [1.0, 2.0], "mean_reward": [0.1, 0.2]})
    bad = pd.DataFrame({"gpu_hours": [3.0, 4.0, 5.0], "mean_reward": [0.3, 0.4, 0.5]})
    bad.loc[2, "gpu_hours" if column == "compute" else "mean_reward"] = np.inf
    good.to_csv(tmp_path / "a.csv", index=False)
    bad.to_csv(tmp_path / "b.csv", index=False)
    before = _checksums(tmp_path)
    with pytest.raises(InputError) as err:
        load_groups([tmp_path / "a.csv", tmp_path / "b.csv"],
                    compute_col="gpu_hours", reward_col="mean_reward")
    assert f"{tmp_path / 'b.csv'} row 2" in str(err.value) and "infinite" in str(err.value)
    assert _checksums(tmp_path) == before
