"""Fault injection for trainer checkpoints: missing optimizer state or a truncated state file
gives an error naming the file and the fix; the checkpoint dir is left unchanged."""
import hashlib
from pathlib import Path

import pytest
import torch

from scalerl.rl.checkpoint import STATE_FILE, STATE_FORMAT, load_trainer_state


def _checksums(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_state_without_optimizer_names_file_and_fix(tmp_path):
    torch.save({"format": STATE_FORMAT, "scheduler": {}}, tmp_path / STATE_FILE)  # no dcp/
    before = _checksums(tmp_path)
    with pytest.raises(ValueError) as err:
        load_trainer_state(tmp_path)
    assert str(tmp_path / STATE_FILE) in str(err.value) and "optimizer" in str(err.value)
    assert "re-run its chunk" in str(err.value)
    assert _checksums(tmp_path) == before


def test_truncated_state_file_names_file_and_fix(tmp_path):
    torch.save({"format": STATE_FORMAT, "optimizer": {"w": torch.zeros(64)}},
               tmp_path / STATE_FILE)
    data = (tmp_path / STATE_FILE).read_bytes()
    (tmp_path / STATE_FILE).write_bytes(data[: len(data) // 2])
    before = _checksums(tmp_path)
    with pytest.raises(ValueError) as err:
        load_trainer_state(tmp_path)
    assert str(tmp_path / STATE_FILE) in str(err.value) and "damaged" in str(err.value)
    assert _checksums(tmp_path) == before


def test_the_optimizer_state_is_in_dcp(tmp_path):
    # as `write_state_files` writes it: no optimizer entry, dcp/ beside it
    (tmp_path / "dcp").mkdir()
    torch.save({"format": STATE_FORMAT, "step": 3}, tmp_path / STATE_FILE)
    assert load_trainer_state(tmp_path)["step"] == 3
    (tmp_path / "dcp").rmdir()  # a state whose dcp/ is gone cannot resume
    with pytest.raises(ValueError, match="no optimizer state"):
        load_trainer_state(tmp_path)
