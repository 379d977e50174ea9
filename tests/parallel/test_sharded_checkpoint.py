"""Checkpoints of 2 gloo ranks: the HF model dir holds the full weights, a resume with the same
world size takes a bit-identical next step, one process resumes the 2-rank state (DCP
resharding) within 1e-6, and a directory without dcp/ names the problem."""

import pytest
import torch
from test_sharded_step import WORKER, _run, _torchrun

from scalerl.models.config import ModelConfig
from scalerl.models.loading import load_model


@pytest.mark.slow
def test_sharded_checkpoint_resumes_exactly(tmp_path):
    _run(_torchrun(2, "checkpoint", str(tmp_path)), tmp_path)
    got = torch.load(tmp_path / "ckpt_w2.pt")
    ckpt = tmp_path / "ckpt"
    assert sorted(p.name for p in (ckpt / "dcp").iterdir()) == [
        ".metadata", "__0_0.distcp", "__1_0.distcp"]
    hf = dict(load_model(ckpt, ModelConfig(name=str(ckpt))).named_parameters())
    assert sorted(hf) == sorted(got["after_1"])
    for name, w in got["after_1"].items():
        torch.testing.assert_close(hf[name].detach(), w, atol=0, rtol=0, msg=name)
        torch.testing.assert_close(got["b"][name], got["a"][name], atol=0, rtol=0, msg=name)
    moved = max(float((got["a"][n] - got["after_1"][n]).abs().max()) for n in hf)
    assert moved > 1e-4  # step 2 changed the weights: A == B is not trivially true
    _run([str(WORKER), "resume-alone", str(tmp_path)], tmp_path)
    alone = torch.load(tmp_path / "resume_w1.pt")["b"]
    for name, w in got["a"].items():
        torch.testing.assert_close(alone[name], w, atol=1e-6, rtol=0, msg=name)


def test_a_checkpoint_without_dcp_is_refused_clearly(tmp_path):
    from scalerl.parallel.checkpoint import load_checkpoint_state

    with pytest.raises(FileNotFoundError, match="has no dcp/.*start the chunk over"):
        load_checkpoint_state(tmp_path, None, None)
