"""The planner's trainer activation estimate against a measurement, on CPU.

For a few small transformers models (the tiny sizes, a Llama with a 16k vocabulary, a
Qwen3-shaped model with GQA, q/k norms and head_dim != hidden/heads), with and without
gradient checkpointing, this runs the trainer's forward/backward path
(`scalerl.models.logprobs.sequence_logprobs` with the float32 head and the entropy, a masked
sum as the loss, backward) on right-padded rows, and measures the peak of live tensor bytes
created during it (`scalerl.plan.measure.LiveBytes`: every storage an aten op returns, views
deduplicated, weights and gradient buffers excluded because they exist before, subtracted when
freed). That is what `torch.cuda.max_memory_allocated` would show minus
the static terms; allocator caching and fragmentation are not in it. It prints the planner's
figure (`kept_activation_bytes + backward_peak_bytes`: the trainer's terms without weights,
gradients, AdamW and margin) next to the measurement and the parameter count next to
`ModelArch.n_params`; first, the bytes per token one decoder layer keeps after the forward
(2 layers minus 1) next to `layer_activation_bytes`.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_plan.py [--tokens 256 --rows 4]

CUDA kernels (memory-efficient SDPA, cuBLAS) may save or allocate differently; this is the
CPU check only. Deliberately left out: vLLM (its memory is an estimate the planner labels so).
"""

from __future__ import annotations

import argparse


def models():
    """(label, transformers config, planner arch) of each measured model."""
    from transformers import LlamaConfig, Qwen3Config

    from scalerl.models.config import ModelConfig
    from scalerl.models.loading import tiny_hf_config
    from scalerl.plan.arch import arch_from_hf_config

    out = []
    for name in ("tiny-s", "tiny-m", "tiny-l"):
        cfg = tiny_hf_config(ModelConfig(name=name))
        out.append((name, cfg))
    out.append(("llama-v16k", LlamaConfig(
        vocab_size=16384, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, intermediate_size=512, tie_word_embeddings=True)))
    out.append(("qwen3-gqa", Qwen3Config(
        vocab_size=4096, hidden_size=128, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=64, intermediate_size=384, tie_word_embeddings=True)))
    return [(label, cfg, arch_from_hf_config(cfg.to_dict(), label)) for label, cfg in out]


def measure(hf_config, dtype, checkpointing: bool, rows: int, tokens: int) -> tuple[int, int]:
    """(peak live bytes of forward + backward, parameters) of one micro-batch."""
    import torch
    from transformers import AutoModelForCausalLM

    from scalerl.models.logprobs import sequence_logprobs
    from scalerl.plan.measure import LiveBytes

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hf_config, dtype=dtype, attn_implementation="sdpa")
    if checkpointing:
        model.gradient_checkpointing_enable()
    model.train()
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    exclude = [t.untyped_storage() for t in (*model.parameters(), *model.buffers())]
    exclude += [p.grad.untyped_storage() for p in model.parameters()]
    ids = torch.randint(0, hf_config.vocab_size, (rows, tokens))  # [R, T]
    mask = torch.ones(rows, tokens, dtype=torch.long)  # [R, T]
    mask[1:, tokens // 2:] = 0  # right padding, as scalerl.rl.batch pads
    with LiveBytes(exclude) as mode:
        logp, entropy = sequence_logprobs(model, ids, mask, fp32_lm_head=True,
                                          return_entropy=True)  # [R, T], [R, T]
        (logp * mask).sum().backward()
        del logp, entropy
    return mode.peak, sum(p.numel() for p in model.parameters())


def per_layer_measured(hf_config, rows: int, tokens: int) -> float:
    """Bytes per token one more decoder layer keeps after the forward (float32, padded)."""
    import torch
    from transformers import AutoModelForCausalLM

    from scalerl.plan.measure import LiveBytes

    kept = []
    for layers in (1, 2):
        fields = {k: v for k, v in hf_config.to_dict().items() if k != "layer_types"}
        cfg = hf_config.__class__(**{**fields, "num_hidden_layers": layers})
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32,
                                                 attn_implementation="sdpa").train()
        exclude = [t.untyped_storage() for t in (*model.parameters(), *model.buffers())]
        ids = torch.randint(0, cfg.vocab_size, (rows, tokens))  # [R, T]
        mask = torch.ones(rows, tokens, dtype=torch.long)  # [R, T]
        mask[1:, tokens // 2:] = 0
        with LiveBytes(exclude) as mode:
            hidden = model.base_model(input_ids=ids, attention_mask=mask,
                                      use_cache=False).last_hidden_state  # [R, T, H]
            kept.append(mode.live)
            del hidden
    return (kept[1] - kept[0]) / (rows * tokens)


def predicted(arch, dtype: str, checkpointing: bool, rows: int, tokens: int) -> int:
    from scalerl.plan.memory import PlanInputs, backward_peak_bytes, kept_activation_bytes

    inp = PlanInputs(arch=arch, prompts_per_step=rows, generations_per_prompt=1,
                     prompt_tokens=tokens // 2, generation_tokens=tokens - tokens // 2,
                     param_dtype=dtype, compute_dtype=dtype, gradient_checkpointing=checkpointing,
                     micro_batch_tokens=rows * tokens)
    return kept_activation_bytes(inp) + backward_peak_bytes(inp)[0]


def main() -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=256, help="tokens per row")
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{args.rows} rows x {args.tokens} tokens, right-padded, fp32 head + entropy")
    from scalerl.plan.memory import PlanInputs, layer_activation_bytes

    for label, hf_config, arch in models():
        inp = PlanInputs(arch=arch, prompt_tokens=args.tokens // 2,
                         generation_tokens=args.tokens - args.tokens // 2)
        print(f"{label:<11} one layer, float32: measured "
              f"{per_layer_measured(hf_config, args.rows, args.tokens):,.0f} B/token, "
              f"plan {layer_activation_bytes(inp):,} B/token")
    print()
    print(f"{'model':<11} {'dtype':<9} {'ckpt':<5} {'params':>10} {'plan params':>11} "
          f"{'measured MiB':>12} {'plan MiB':>9} {'plan/meas':>9}")
    for label, hf_config, arch in models():
        for dtype in args.dtypes:
            for ckpt in (False, True):
                peak, n = measure(hf_config, getattr(torch, dtype), ckpt, args.rows,
                                  args.tokens)
                plan = predicted(arch, dtype, ckpt, args.rows, args.tokens)
                print(f"{label:<11} {dtype:<9} {str(ckpt):<5} {n:>10,} {arch.n_params():>11,} "
                      f"{peak / 2**20:>12.2f} {plan / 2**20:>9.2f} {plan / peak:>9.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
