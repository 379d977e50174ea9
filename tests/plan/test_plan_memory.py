"""Memory terms against hand-derived byte counts for a 2-layer architecture."""

from scalerl.plan.arch import ModelArch
from scalerl.plan.memory import (
    GiB,
    PlanInputs,
    backward_peak_bytes,
    kept_activation_bytes,
    kv_capacity_tokens,
    layer_activation_bytes,
    logprob_bytes,
    outside_activation_bytes,
    trainer_terms,
    vllm_kv_bytes,
)

# h 8, q 8 (2 heads x 4), k 4 (1 KV head), i 16, V 10, Qwen3 q/k norms; 1,368 parameters.
SMALL = ModelArch(name="small", hidden=8, layers=2, heads=2, kv_heads=1, head_dim=4,
                  intermediate=16, vocab=10, tied_embeddings=False, qk_norm=True)


def inputs(**changes) -> PlanInputs:
    """4 prompts x 2 samples of 8 + 8 tokens (s = 16), micro-batches of 4 rows (64 tokens)."""
    base = dict(arch=SMALL, prompts_per_step=4, generations_per_prompt=2, prompt_tokens=8,
                generation_tokens=8, micro_batch_tokens=64, device_memory_bytes=GiB)
    return PlanInputs(**{**base, **changes})


def test_layer_bytes_per_token_by_hand():
    # fp32: norms 2*(4*8 + 4*8 + 4) = 136, projection inputs 4*(2*8 + 16) = 128, SwiGLU
    # 3*4*16 = 192, q/k norms (4 + 4)*(8 + 4) + 4*(2 + 1) = 108, SDPA 4*(2*8 + 2*8) + 4*2 =
    # 136 (K/V repeated to q width under a padding mask), float mask bias 4*16 = 64
    assert layer_activation_bytes(inputs()) == 764
    # no padding: K/V keep their width 4 -> SDPA 4*(2*8 + 2*4) + 8 = 104, no mask bias
    assert layer_activation_bytes(inputs(padded_rows=False)) == 764 - 136 - 64 + 104
    # bfloat16: norms 2*(32 + 16 + 4) + 2*32 + 2*48 + (4 + 2)*12 + 12 + (2*32 + 8) + 2*16
    assert layer_activation_bytes(inputs(param_dtype="bfloat16",
                                         compute_dtype="bfloat16")) == 452


def test_kept_activations_with_and_without_checkpointing():
    # outside the layers: final norm 4*8 + 4*8, body output 4*8, RoPE 8*4 / 4 rows, loss 64
    assert outside_activation_bytes(inputs()) == 96 + 8 + 64
    assert kept_activation_bytes(inputs()) == 64 * (2 * 764 + 168)
    # checkpointing keeps each layer's input (4*8) and the boolean mask (16 bytes/token)
    assert kept_activation_bytes(inputs(gradient_checkpointing=True)) == 64 * (2 * 32 + 16 + 168)


def test_log_prob_chunks_and_backward_peak():
    assert logprob_bytes(inputs()) == 16 * 64 * 10  # 4 float32 [64, 10] tensors
    assert logprob_bytes(inputs(logprob_chunk_tokens=16)) == 16 * 16 * 10
    assert logprob_bytes(inputs(logprob_chunk_tokens=1000)) == 16 * 64 * 10  # <= micro-batch
    # one layer's backward: 64 tokens x (c*i + 3*p*h = 64 + 96); larger than a 16-token chunk
    peak, what = backward_peak_bytes(inputs(logprob_chunk_tokens=16))
    assert (peak, what.startswith("one layer")) == (64 * 160, True)
    # with checkpointing the layer is recomputed first: + its 764 bytes per token
    peak, _ = backward_peak_bytes(inputs(logprob_chunk_tokens=16, gradient_checkpointing=True))
    assert peak == 64 * (160 + 764)


def test_mixed_precision_static_terms():
    terms = {t.label.split(":")[0]: t.bytes for t in
             trainer_terms(inputs(param_dtype="float32", compute_dtype="bfloat16"))}
    n = SMALL.n_params()
    assert terms["weights float32"] == 4 * n
    assert terms["gradients float32"] == 4 * n
    assert terms["AdamW state float32"] == 8 * n
    assert terms["bfloat16 weight copies (autocast)"] == 2 * 600 * 2  # L x layer params x 2


def test_micro_batch_shapes_and_tokens_per_step():
    whole = inputs(micro_batch_tokens=0)
    assert (whole.micro_tokens, whole.micro_batches) == (4 * 2 * 16, 1)
    assert inputs(micro_batch_tokens=0, micro_batch_groups=1).micro_tokens == 2 * 16
    assert inputs(micro_batch_tokens=10).micro_tokens == 16  # never below one sequence
    assert inputs(micro_batch_tokens=100).micro_batches == 2  # ceil(128 / 100)
    assert inputs().tokens_per_step() == (128, 8 * (8 + 4))


def test_kv_capacity_in_whole_blocks():
    inp = inputs(generator_dtype="bfloat16")  # 32 B/token -> 512 B per 16-token block
    assert kv_capacity_tokens(inp, 512 * 10 + 100) == 9 * 16  # vLLM holds one block back
    assert kv_capacity_tokens(inp.replace(engine="hf"), 512 * 10 + 100) == 10 * 16


def test_vllm_kv_from_the_utilisation_by_hand():
    inp = inputs(generator_dtype="bfloat16", vllm_gpu_memory_utilization=0.5, gen_batch=8)
    weights = 1368 * 2
    forward = 8192 * 2 * (3 * 16 + 2 * 8 + 2 * 4 + 2 * 8)  # device < 70 GiB: 8192 tokens
    sampler = 3 * 4 * 8 * 10
    head = 10 * 8 * 4  # fp32 head cast of a bfloat16 head
    assert vllm_kv_bytes(inp, 8) == GiB // 2 - weights - forward - sampler - head
    assert vllm_kv_bytes(inp.replace(vllm_kv_cache_bytes=12345), 8) == 12345


def _forward_kept_bytes(hf_config, rows: int, tokens: int) -> int:
    """Live bytes a real transformers body keeps after a padded float32 forward."""
    import torch
    from transformers import AutoModelForCausalLM

    from scalerl.plan.measure import LiveBytes

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32,
                                             attn_implementation="sdpa").train()
    exclude = [t.untyped_storage() for t in (*model.parameters(), *model.buffers())]
    ids = torch.randint(0, hf_config.vocab_size, (rows, tokens))  # [R, T]
    mask = torch.ones(rows, tokens, dtype=torch.long)  # [R, T]
    mask[1:, tokens // 2:] = 0  # right padding
    with LiveBytes(exclude) as mode:
        out = model.base_model(input_ids=ids, attention_mask=mask, use_cache=False)
        kept = mode.live
        del out
    return kept


def test_layer_bytes_equal_a_measured_qwen3_layer():
    """One more Qwen3 layer (GQA, q/k norms, head_dim != hidden/heads) keeps exactly A."""
    from transformers import Qwen3Config

    from scalerl.plan.arch import arch_from_hf_config

    def config(layers):
        return Qwen3Config(vocab_size=64, hidden_size=64, num_hidden_layers=layers,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                           intermediate_size=96, tie_word_embeddings=True)

    rows, tokens = 2, 64
    per_token = (_forward_kept_bytes(config(2), rows, tokens)
                 - _forward_kept_bytes(config(1), rows, tokens)) / (rows * tokens)
    inp = PlanInputs(arch=arch_from_hf_config(config(2).to_dict(), "q"), prompt_tokens=32,
                     generation_tokens=32)
    assert per_token == layer_activation_bytes(inp)
