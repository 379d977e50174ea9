"""Architecture numbers: hand-derived counts, the published Qwen3 counts, real tiny models."""

import json

import pytest

from scalerl.config import ConfigError
from scalerl.plan.arch import PUBLIC_ARCHS, ModelArch, arch_from_hf_config, resolve_arch

# 2 layers, h 8, 2 heads of 4 (q 8), 1 KV head (k 4), i 16, V 10, untied, Qwen3 q/k norms.
SMALL = ModelArch(name="small", hidden=8, layers=2, heads=2, kv_heads=1, head_dim=4,
                  intermediate=16, vocab=10, tied_embeddings=False, qk_norm=True)


def test_small_parameter_count_by_hand():
    # per layer: q 8*8 + k,v 2*8*4 + o 8*8 = 192, q/k norms 2*4 = 8, MLP 3*8*16 = 384,
    # norms 2*8 = 16 -> 600; 2 layers 1200 + embedding and head 2*10*8 = 160 + final norm 8
    assert SMALL.layer_params() == 600
    assert SMALL.n_params() == 1368
    assert SMALL.replace(tied_embeddings=True).n_params() == 1368 - 80
    assert SMALL.replace(qkv_bias=True).n_params() == 1368 + 2 * (8 + 2 * 4)


def test_kv_bytes_per_token_by_hand():
    # 2 (K, V) x 2 layers x 1 KV head x 4 dims x 2 bytes (bfloat16)
    assert SMALL.kv_bytes_per_token(2) == 32
    # Qwen3-1.7B in bfloat16: 2 x 28 x 8 x 128 x 2
    assert PUBLIC_ARCHS["Qwen/Qwen3-1.7B"].kv_bytes_per_token(2) == 114_688


@pytest.mark.parametrize("hub_id, published", [
    ("Qwen/Qwen3-0.6B", 596_049_920),
    ("Qwen/Qwen3-1.7B", 1_720_574_976),
    ("Qwen/Qwen3-4B", 4_022_468_096),
])
def test_qwen3_counts_match_the_published_ones(hub_id, published):
    assert PUBLIC_ARCHS[hub_id].n_params() == published


def test_qwen3_1p7b_total_and_non_embedding_within_one_percent_of_the_model_card():
    arch = PUBLIC_ARCHS["Qwen/Qwen3-1.7B"]
    assert abs(arch.n_params() / 1.7e9 - 1) < 0.015  # card: 1.7B (1.72B exactly)
    non_embedding = arch.n_params() - arch.embedding_params()
    assert abs(non_embedding / 1.4e9 - 1) < 0.01  # card: 1.4B non-embedding
    eight = PUBLIC_ARCHS["Qwen/Qwen3-8B"]
    assert not eight.tied_embeddings and abs(eight.n_params() / 8.2e9 - 1) < 0.01


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_tiny_counts_equal_the_built_models(kind):
    from scalerl.models.config import ModelConfig
    from scalerl.models.loading import build_tiny_model, count_parameters

    model = build_tiny_model(ModelConfig(name="tiny-s", arch=kind))
    assert resolve_arch("tiny-s", tiny_kind=kind).n_params() == count_parameters(model)


def test_model_directory_config_json(tmp_path):
    from scalerl.models.config import ModelConfig
    from scalerl.models.loading import tiny_hf_config

    (tmp_path / "config.json").write_text(json.dumps(
        tiny_hf_config(ModelConfig(name="tiny-m")).to_dict()))
    arch = resolve_arch(tmp_path)
    assert (arch.hidden, arch.layers, arch.heads, arch.head_dim, arch.vocab) == \
        (128, 4, 4, 32, 103)
    assert arch.n_params() == 1_062_912  # the tiny-m count in scalerl.models.config


def test_labels_resolve_to_the_table():
    assert resolve_arch("qwen3-1.7b") is PUBLIC_ARCHS["Qwen/Qwen3-1.7B"]
    assert resolve_arch("Qwen/Qwen3-0.6B") is PUBLIC_ARCHS["Qwen/Qwen3-0.6B"]


def test_unknown_model_and_type_are_errors(tmp_path):
    with pytest.raises(ConfigError, match="--model"):
        resolve_arch("someone/unknown-model-xyz")
    with pytest.raises(ConfigError, match="model_type 'mixtral'"):
        arch_from_hf_config({"model_type": "mixtral"}, "moe")
    with pytest.raises(ConfigError, match="no config.json"):
        resolve_arch(tmp_path)
    with pytest.raises(ConfigError, match="multiple of kv_heads"):
        SMALL.replace(heads=3, kv_heads=2)
