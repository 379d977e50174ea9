"""How long a run takes and what it costs, before paying for it: `estimate_time(inputs, device)`.

The same `PlanInputs` as the memory plan (`scalerl.plan.memory`: notation there), a device
from `DEVICES` (datasheet figures, sources below) and a few stated efficiencies. All figures
are estimates from arithmetic; `--calibration` replaces the efficiencies by what
benchmarks/gpu_check.sh measured on the device. Per optimizer step of S = B x G sequences of
P prompt and E = f x cap generated tokens on average (f = expected_generation_fraction):

Generation (per generator, vLLM decoding is memory-bandwidth bound): the KV cache holds
K_tok tokens (`kv_capacity_tokens` of the memory plan); a sequence holds P + E/2 tokens on
average while it decodes, so c = min(gen_batch, S / generators, K_tok / (P + E/2)) sequences
decode at once. One decode iteration reads the weights once and every running sequence's KV:

    t_iter = max((N x g + c x (P + E/2) x kv) / (HBM x eta_hbm), 2 x N x c / (peak16 x eta_mm))
    tokens/s per generator = c / t_iter,   generate_s = S x E / (generators x c / t_iter)

plus the prefill, 2 x N x S x P FLOPs at peak16 x eta_mm (B x P with prefix caching: the G
samples of a prompt share it). Sequences finishing at different times (the tail of a batch)
and scheduling overheads are left out, so generate_s is a lower bound for a given K_tok.

Trainer: every rank trains its S/R of the step's S x (P + E) tokens. FLOPs per token, forward:
2 x N_body (N without the embedding and head matrices) + 4 x L x q x (P + E)/2 (causal
attention: QK^T and AV over half the sequence on average); training is 3 x forward, 4 x with
gradient checkpointing (the body is recomputed); the FP32 head adds 4 GEMMs of 2 x V x h per
scored token (forward, the chunked backward's recomputed forward, two gradients) on the loss
positions (S x E; all positions without log-prob chunks), at the bf16 tensor-core peak where
the head runs `torch.mm(bf16, bf16, out_dtype=float32)` (`PlanInputs.head_gemm` mm_out_dtype,
what `lm_head_operands` bfloat16 takes on CUDA) or the fp32 CUDA-core peak where it multiplies
fp32 x fp32 (float32 operands, or bf16 operands upcast for want of that op). Then

    train_s = FLOPs / (peak x MFU) + AdamW (about 28 bytes per parameter at HBM x eta_hbm) / R

MFU defaults to 0.11, prime-rl's measured Qwen3-0.6B RL trainer on one H100 at 16k tokens
(11.9k tokens/s, i.e. 9.2 GFLOP per token: 6 N + attention; the count above gives 9.5, the
chunked head recomputing its forward, so its MFU is comparable: BENCHMARKS.md).

Weight push: the payload N x g (each parameter once, the generators' dtype) over the transport
the placement gets (`scalerl.rollout.weight_transfer.choose_transport`): nccl at
eta_link x NVLink, ipc at eta_hbm x HBM / 2 (a device-to-device copy), host slots at
eta_pcie x PCIe twice (down and up), plus a fixed 50 ms for pause, reload and resume; at
several ranks the per-tensor gather (N x p over eta_link x NVLink) first.

Step: PipelineRL with generators on devices of their own overlaps generation with training,
so step_s = max(generate_s, train_s + push_s); generators that share the trainer's device
time-slice with it, and the in-process modes alternate: step_s = generate_s + train_s +
push_s. The bottleneck is the largest part. Run: steps x step_s wall-clock, x the devices the
train job holds (nodes x devices) GPU-hours; evaluation: each chunk's checkpoint scored on the
held-out prompts (`eval_prompts` x `eval_samples`) by one engine on one device.

Devices (dense, no sparsity; SXM parts unless named; memory is about what CUDA reports, e.g.
79.2 GiB for an "80GB" part): H100-80GB 3.35 TB/s HBM3, 989 TFLOP/s
bf16, 67 TFLOP/s fp32, NVLink 900 GB/s, PCIe 5 64 GB/s (NVIDIA H100 datasheet); H200-141GB
4.8 TB/s, otherwise as H100 (H200 datasheet); A100-80GB 2.04 TB/s, 312 / 19.5 TFLOP/s, NVLink
600 GB/s, PCIe 4 32 GB/s (A100 datasheet); B200-180GB 8 TB/s, 2,250 / 75 TFLOP/s, NVLink
1.8 TB/s, PCIe 6 128 GB/s (DGX B200 datasheet, per GPU; fp32 from NVIDIA's Blackwell
brief); L40S-48GB 864 GB/s GDDR6, 362 / 91.6 TFLOP/s, no NVLink (PCIe 4 32 GB/s, used for
every transfer), (L40S datasheet).

Deliberately left out: queueing, checkpoint writes, grading time, network between nodes, and
any price (give `usd_per_gpu_hour`; prices vary by provider and contract).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scalerl.config import ConfigError
from scalerl.plan.memory import (
    DTYPE_BYTES,
    PlanInputs,
    kv_capacity_tokens,
    vllm_kv_bytes,
)

__all__ = ["DEFAULT_MFU", "DEVICES", "DeviceSpec", "Efficiency", "TimeEstimate",
           "estimate_time", "load_calibration", "resolve_device", "sweep_summary"]

DEFAULT_MFU = 0.11  # prime-rl, Qwen3-0.6B RL trainer, 1 x H100, 16k tokens (module docstring)
ADAMW_BYTES_PER_PARAM = 28  # fp32 param, grad, 2 moments read; param, 2 moments written
PUSH_OVERHEAD_S = 0.05  # pause, layerwise reload, resume (estimate)


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """Datasheet figures of one accelerator (module docstring for the sources)."""

    name: str
    memory_bytes: int
    hbm_bytes_per_s: float
    bf16_flops: float  # dense tensor-core peak
    fp32_flops: float  # non-tensor-core fp32 peak
    link_bytes_per_s: float  # NVLink per GPU (0: none, PCIe used)
    pcie_bytes_per_s: float


_GIB = 1 << 30
DEVICES: dict[str, DeviceSpec] = {d.name: d for d in (  # memory: what CUDA reports, about
    DeviceSpec("H100-80GB", int(79.2 * _GIB), 3.35e12, 989e12, 67e12, 900e9, 64e9),
    DeviceSpec("H200-141GB", int(139.8 * _GIB), 4.8e12, 989e12, 67e12, 900e9, 64e9),
    DeviceSpec("A100-80GB", int(79.2 * _GIB), 2.039e12, 312e12, 19.5e12, 600e9, 32e9),
    DeviceSpec("B200-180GB", int(178.4 * _GIB), 8.0e12, 2250e12, 75e12, 1800e9, 128e9),
    DeviceSpec("L40S-48GB", int(44.4 * _GIB), 0.864e12, 362e12, 91.6e12, 0.0, 32e9),
)}


@dataclasses.dataclass(frozen=True)
class Efficiency:
    """Shares of the datasheet figures reached (estimates unless calibrated)."""

    mfu: float = DEFAULT_MFU  # trainer FLOPs / peak
    hbm: float = 0.7  # achieved HBM bandwidth in decode and AdamW
    mm: float = 0.5  # achieved share of the tensor-core peak in prefill / batched decode
    link: float = 0.25  # NVLink share a weight broadcast or gather reaches
    pcie: float = 0.7  # PCIe share a host copy reaches
    source: str = "defaults (module docstring)"


def resolve_device(name: str) -> DeviceSpec:
    """A device of the table by name, case-insensitive, with or without the memory suffix."""
    wanted = name.lower()
    for key, spec in DEVICES.items():
        if wanted in (key.lower(), key.split("-")[0].lower()):
            return spec
    raise ConfigError(f"--gpu {name!r}: not in the device table; choose one of "
                      f"{', '.join(DEVICES)}")


def load_calibration(path: str | Path, device: DeviceSpec) -> Efficiency:
    """Efficiencies from benchmarks/gpu_check.sh's gpu_check.json: measured copy bandwidth,
    bf16 GEMM rate and trainer MFU, as shares of `device`'s datasheet figures."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ConfigError(f"--calibration {path}: cannot read it: {err}") from None
    got = data.get("device_rates") or {}
    mfu = (data.get("throughput") or {}).get("mfu")
    eff = Efficiency()
    changes: dict[str, Any] = {"source": f"calibrated from {path} ({data.get('device', '?')})"}
    if mfu:
        changes["mfu"] = float(mfu)
    if got.get("copy_bytes_per_s"):
        changes["hbm"] = min(1.0, float(got["copy_bytes_per_s"]) / device.hbm_bytes_per_s)
    if got.get("bf16_flops"):
        changes["mm"] = min(1.0, float(got["bf16_flops"]) / device.bf16_flops)
    if len(changes) == 1:
        raise ConfigError(f"--calibration {path}: no measurements in it (run "
                          "benchmarks/gpu_check.sh on the device first)")
    return dataclasses.replace(eff, **changes)


@dataclasses.dataclass(frozen=True)
class TimeEstimate:
    """One run's step time, its parts and its GPU-hours (module docstring)."""

    device: str
    concurrency: int  # sequences one generator decodes at once
    gen_tokens_per_s: float  # per generator
    generate_s: float
    train_s: float
    push_s: float
    transport: str
    step_s: float
    bottleneck: str
    steps: int
    devices_held: int
    train_gpu_hours: float
    eval_gpu_hours: float
    efficiency: Efficiency
    trainer_tokens_per_s: float  # per rank

    @property
    def gpu_hours(self) -> float:
        return self.train_gpu_hours + self.eval_gpu_hours

    def format(self, usd_per_gpu_hour: float | None = None) -> str:
        wall_h = self.steps * self.step_s / 3600
        cost = (f", ~${self.gpu_hours * usd_per_gpu_hour:,.0f} at "
                f"${usd_per_gpu_hour:g}/GPU-h" if usd_per_gpu_hour else "")
        return "\n".join([
            f"  time on {self.device} (estimate; {self.efficiency.source}):",
            f"    generation {self.generate_s:,.0f} s/step: {self.concurrency} sequences at "
            f"once per generator, {self.gen_tokens_per_s:,.0f} tokens/s each (roofline)",
            f"    trainer {self.train_s:,.0f} s/step at MFU {self.efficiency.mfu:.2f} "
            f"({self.trainer_tokens_per_s:,.0f} tokens/s per rank)",
            f"    weight push {self.push_s:.2f} s/step ({self.transport})",
            f"    step {self.step_s:,.0f} s, bottleneck: {self.bottleneck}",
            f"    run: {self.steps:,} steps, {wall_h:,.1f} h wall, {self.devices_held} GPU(s): "
            f"{self.train_gpu_hours:,.0f} GPU-h training + {self.eval_gpu_hours:,.0f} GPU-h "
            f"evaluation = {self.gpu_hours:,.0f} GPU-h{cost}",
        ])


def _mean_tokens(inp: PlanInputs) -> tuple[float, float]:
    """(P, E): prompt tokens and mean generated tokens of one sequence."""
    return float(inp.prompt_tokens), inp.expected_generation_fraction * inp.generation_tokens


def _generator_rate(inp: PlanInputs, dev: DeviceSpec, eff: Efficiency, work: float,
                    batch: int) -> tuple[int, float]:
    """(sequences at once, tokens/s) of one engine decoding `work` sequences (roofline)."""
    a, g = inp.arch, DTYPE_BYTES[inp.generator_dtype]
    prompt, gen = _mean_tokens(inp)
    context = prompt + gen / 2
    kv = a.kv_bytes_per_token(g)
    if inp.engine == "vllm":
        capacity = kv_capacity_tokens(inp, max(0, vllm_kv_bytes(inp, batch)))
    else:  # the HF engine's cache grows with its batch (memory plan)
        capacity = batch * inp.seq_tokens
    concurrency = int(max(0, min(batch, work, capacity // max(1.0, context))))
    if concurrency == 0:
        return 0, 0.0
    memory_s = (a.n_params() * g + concurrency * context * kv) / (dev.hbm_bytes_per_s * eff.hbm)
    compute_s = 2 * a.n_params() * concurrency / (dev.bf16_flops * eff.mm)
    return concurrency, concurrency / max(memory_s, compute_s)


def _train_flops(inp: PlanInputs) -> float:
    """FLOPs of one step's training over all ranks (module docstring)."""
    a = inp.arch
    prompt, gen = _mean_tokens(inp)
    seq = prompt + gen
    tokens = inp.sequences_per_step * seq
    head = a.vocab * a.hidden
    body = 2 * (a.n_params() - a.embedding_params()) + 4 * a.layers * a.q_width * seq / 2
    passes = 4 if inp.gradient_checkpointing else 3
    scored = inp.sequences_per_step * (gen if inp.logprob_chunk_tokens else seq)
    return tokens * body * passes, scored * 4 * 2 * head


def _push_s(inp: PlanInputs, dev: DeviceSpec, eff: Efficiency) -> tuple[float, str]:
    """(seconds, transport) of one push (module docstring)."""
    payload = inp.arch.n_params() * DTYPE_BYTES[inp.generator_dtype]
    gather = 0.0
    link = dev.link_bytes_per_s or dev.pcie_bytes_per_s
    if inp.trainer_ranks > 1:
        gather = inp.arch.n_params() * DTYPE_BYTES[inp.param_dtype] / (link * eff.link)
    if not inp.pipeline:
        return 0.0, "in-process (none)"
    if inp.engine != "vllm":
        transport, seconds = "shm", 2 * payload / (dev.pcie_bytes_per_s * eff.pcie)
    elif inp.shared_device:
        transport, seconds = "ipc", payload / (dev.hbm_bytes_per_s * eff.hbm / 2)
    else:
        transport, seconds = "nccl", payload / (link * eff.link)
    return gather + seconds + PUSH_OVERHEAD_S, transport


def estimate_time(inp: PlanInputs, dev: DeviceSpec, *, steps: int, eval_prompts: int = 0,
                  eval_samples: int = 0, evals: int = 0,
                  efficiency: Efficiency | None = None) -> TimeEstimate:
    """Step time and GPU-hours of a run of `steps` steps with `evals` evaluations of
    `eval_prompts` x `eval_samples` samples (module docstring)."""
    eff = efficiency or Efficiency()
    prompt, gen = _mean_tokens(inp)
    s = inp.sequences_per_step
    gens = inp.generators if inp.pipeline else 1
    concurrency, rate = _generator_rate(inp, dev, eff, s / gens, inp.gen_batch)
    if rate <= 0:
        raise ConfigError("the generators' KV cache cannot hold one sequence: the time "
                          "estimate needs a run that fits (see the memory plan)")
    prefill_tokens = (inp.prompts_per_step if inp.vllm_prefix_caching else s) * prompt
    prefill_s = 2 * inp.arch.n_params() * prefill_tokens / (dev.bf16_flops * eff.mm)
    generate_s = (s * gen / rate + prefill_s) / gens
    body_flops, head_flops = _train_flops(inp)
    head_peak = dev.bf16_flops if inp.head_gemm == "mm_out_dtype" else dev.fp32_flops
    compute_s = (body_flops / dev.bf16_flops + head_flops / head_peak) / eff.mfu
    adamw_s = inp.arch.n_params() * ADAMW_BYTES_PER_PARAM / (dev.hbm_bytes_per_s * eff.hbm)
    train_s = (compute_s + adamw_s) / inp.trainer_ranks
    push_s, transport = _push_s(inp, dev, eff)
    overlap = inp.pipeline and not inp.shared_device
    step_s = max(generate_s, train_s + push_s) if overlap else generate_s + train_s + push_s
    parts = {"generation": generate_s, "trainer": train_s, "weight push": push_s}
    bottleneck = max(parts, key=parts.get)
    held = inp.nodes * inp.devices
    eval_s = 0.0
    if evals and eval_prompts and eval_samples:
        work = eval_prompts * eval_samples
        _, eval_rate = _generator_rate(inp, dev, eff, work, inp.eval_batch)
        eval_s = evals * work * gen / eval_rate if eval_rate > 0 else float("inf")
    tokens_per_rank = s * (prompt + gen) / inp.trainer_ranks
    return TimeEstimate(
        device=dev.name, concurrency=concurrency, gen_tokens_per_s=rate,
        generate_s=generate_s, train_s=train_s, push_s=push_s, transport=transport,
        step_s=step_s, bottleneck=bottleneck, steps=steps, devices_held=held,
        train_gpu_hours=steps * step_s * held / 3600, eval_gpu_hours=eval_s / 3600,
        efficiency=eff, trainer_tokens_per_s=tokens_per_rank / train_s)


def sweep_summary(estimates: Mapping[str, TimeEstimate],
                  usd_per_gpu_hour: float | None = None) -> str:
    """One line: the sweep's GPU-hours (and cost when a price is given)."""
    total = sum(e.gpu_hours for e in estimates.values())
    cost = f", ~${total * usd_per_gpu_hour:,.0f}" if usd_per_gpu_hour else ""
    wall = max((e.steps * e.step_s for e in estimates.values()), default=0.0) / 3600
    return (f"sweep: {len(estimates)} run(s), {total:,.0f} GPU-h in all{cost}; the longest run "
            f"{wall:,.1f} h wall (estimates)")

