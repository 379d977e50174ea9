"""Tiny model factory, model directories, HF model resolution and prompt formatting."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from scalerl.basemodel.cli import copy_hf_base
from scalerl.config import ConfigError
from scalerl.models.config import TINY_SIZES, ModelConfig
from scalerl.models.loading import (
    ModelNotFoundError,
    build_tiny_model,
    count_parameters,
    format_prompt,
    load_model,
    load_tokenizer,
    new_tiny_tokenizer,
    resolve_model_path,
    save_model_dir,
)


def _expected_params(hidden: int, layers: int, mlp: int, vocab: int = 103) -> int:
    # tied embedding V*H; per layer q,k,v,o (4*H*H) + gate,up,down (3*H*M) + 2 RMSNorms (2*H);
    # final RMSNorm H.
    return vocab * hidden + layers * (4 * hidden * hidden + 3 * hidden * mlp + 2 * hidden) + hidden


@pytest.mark.parametrize("name", sorted(TINY_SIZES))
def test_tiny_sizes_have_the_documented_parameter_counts(name):
    size = TINY_SIZES[name]
    model = build_tiny_model(ModelConfig(name=name))
    assert count_parameters(model) == _expected_params(size.hidden, size.layers, size.intermediate)
    assert model.config.head_dim == 32  # vLLM's CPU attention needs head sizes >= 32


def test_sizes_span_more_than_ten_times():
    counts = [_expected_params(s.hidden, s.layers, s.intermediate) for s in TINY_SIZES.values()]
    assert counts == [137984, 1062912, 3561216]  # tiny-s, tiny-m, tiny-l
    assert max(counts) / min(counts) > 10


def test_init_is_deterministic_in_the_seed():
    a = build_tiny_model(ModelConfig(name="tiny-s", seed=3))
    b = build_tiny_model(ModelConfig(name="tiny-s", seed=3))
    c = build_tiny_model(ModelConfig(name="tiny-s", seed=4))
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.model.layers[0].mlp.up_proj.weight, c.model.layers[0].mlp.up_proj.weight)
    # building does not disturb the global RNG
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    build_tiny_model(ModelConfig(name="tiny-s", seed=9))
    assert torch.equal(torch.rand(3), expected)


def test_qwen2_arch_builds():
    model = build_tiny_model(ModelConfig(name="tiny-s", arch="qwen2"))
    assert model.config.model_type == "qwen2"
    assert model.model.layers[0].self_attn.q_proj.bias is not None


def test_model_directory_round_trip(tmp_path):
    model = build_tiny_model(ModelConfig(name="tiny-s", seed=1))
    save_model_dir(model, new_tiny_tokenizer(), tmp_path)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in tmp_path.iterdir()}
    again = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert all(torch.equal(x, y) for x, y in zip(model.parameters(), again.parameters()))
    bf16 = load_model(tmp_path, ModelConfig(name=str(tmp_path), dtype="bfloat16"))
    assert next(bf16.parameters()).dtype == torch.bfloat16
    assert len(load_tokenizer(tmp_path)) == 103


def test_config_errors():
    with pytest.raises(ConfigError, match="unknown tiny size"):
        ModelConfig(name="tiny-xl")
    with pytest.raises(ConfigError, match="not one of"):
        ModelConfig.from_dict({"dtype": "float8"})
    with pytest.raises(ModelNotFoundError, match="neither a tiny size"):
        resolve_model_path(ModelConfig(name="/no/such/dir"))
    with pytest.raises(ModelNotFoundError, match="allow_download"):
        resolve_model_path(ModelConfig(name="no-such-org/no-such-model-xyz"))


def test_copy_local_hf_model_as_base(tmp_path):
    src = tmp_path / "hf"
    save_model_dir(build_tiny_model(ModelConfig(name="tiny-s")), new_tiny_tokenizer(), src)
    info = copy_hf_base(ModelConfig(name=str(src)), tmp_path / "base")
    assert info["kind"] == "hf" and info["steps"] == 0
    assert json.loads((tmp_path / "base" / "base_info.json").read_text())["source"] == str(src)
    AutoModelForCausalLM.from_pretrained(tmp_path / "base")  # loads


def test_format_prompt_raw_and_chat():
    tok = new_tiny_tokenizer()
    assert format_prompt(tok, "1+2=", ModelConfig(prompt_format="raw")) == [1, 25, 19, 26, 37]
    assert format_prompt(tok, "1+2=", ModelConfig()) == [1, 25, 19, 26, 37]  # auto: no template
    with pytest.raises(ValueError, match="no chat template"):
        format_prompt(tok, "1+2=", ModelConfig(prompt_format="chat"))
    tok.chat_template = "{% for m in messages %}U:{{ m['content'] }}\n{% endfor %}A:"
    ids = format_prompt(tok, "1+2=", ModelConfig(prompt_format="auto"))
    assert tok.decode(ids) == "U:1+2=\nA:"
