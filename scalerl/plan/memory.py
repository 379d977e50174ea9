"""Device memory of one run, term by term: the planner's inputs (`PlanInputs`) and formulas.

Notation: N parameters, L layers, h hidden, q = heads x head_dim, k = kv_heads x head_dim,
i MLP inner size, V vocab, s = prompt + generation tokens (one sequence), t tokens of one
trainer micro-batch (padding included), r = t / s rows; p, c, g bytes of the parameter,
compute and generator dtypes (4 float32, 2 bfloat16/float16). All figures are bytes.

Trainer (one process; `trainer_terms`):

- weights N*p; gradients N*p (torch grads take the parameter dtype: fp32 with fp32 params);
  AdamW state 2*N*p (exp_avg, exp_avg_sq); the optimizer step's temporaries N*p
  (foreach AdamW's sqrt(exp_avg_sq) buffers), alive only while activations are not.
- compute-dtype weight copies when c != p: (L * layer params) * c (autocast casts each block
  weight once per forward and the matmul keeps the copy for backward), plus V*h*c for the head
  when it is not computed in fp32.
- fp32 LM-head copies when the head runs in fp32 and p != 4: 2*V*h*4 (weight.float() and the
  gradient of that copy), alive during the head's backward (below).
- activations saved for backward, per token and layer (transformers Llama/Qwen3 block with
  SDPA, no dropout, RMSNorm, SwiGLU, GQA; counted tensor by tensor after Korthikanti et al.
  2022, "Reducing Activation Recomputation in Large Transformer Models", Sec. 4.1, whose 34*h
  for a GPT block assumes dropout, GeLU and LayerNorm):

      A = 2*(4h + p*h + 4)      two RMSNorms: fp32 upcast of the input, normalised value,
                                fp32 rsqrt
        + c*(2h + i)            inputs of the q/k/v, gate/up and down projections
        + c*(2q + 2k') + 4*heads  SDPA saves q, k, v, out (o_proj reads out in place) + lse;
                                k' = q when a padding mask is passed (transformers then
                                repeats K/V to every head), else k
        + 3*c*i                 gate, SiLU and up outputs
        + (4 + c)*(q + k)       Qwen3 q_norm/k_norm (fp32 upcast, normalised value,
          + 4*(heads + kv_heads)  rsqrt per head)
        + c*s                   padded rows: SDPA turns the boolean mask into a float bias
                                [r, 1, s, s] and keeps it for backward in every layer
        + heads*s*(4 + c)       eager attention only (probabilities fp32 + compute copy)

  flash / memory-efficient SDPA has no other s^2 term. Outside the layers, per token:
  final norm 4h + p*h, the body output p*h, the head input 4h (fp32 head, p != 4), RoPE
  tables 8*head_dim / r and 64 bytes of batch and loss tensors.
  Kept for backward: t*(L*A + outside) without checkpointing, t*(L*p*h + s + outside) with
  it (layer inputs and the 1-byte boolean mask).
- backward peak on top of that, the larger of (they never overlap):
  the head's backward: 16*C*V for C = min(logprob_chunk_tokens or t, t) tokens at a time
  (four float32 [C, V] tensors: logits, log-softmax, the entropy's exp, their gradient;
  measured 4.1x on `scalerl.models.logprobs.sequence_logprobs`; + 2*C*V, the gradient's
  bf16 copy, with bf16 head operands) + the fp32 head copies (+ V*h*2 for the bf16 copy of
  the weight with bf16 operands; + V*h*4 and 4*C*V where those operands are upcast to float32
  for want of `torch.mm(..., out_dtype=float32)`: `lm_head_gemm` upcast);
  one layer's backward: t*(c*i + 3*p*h) of gradients (measured), + t*A with checkpointing
  (the layer is recomputed first).
  `benchmarks/bench_plan.py` measures the live tensors of this path on CPU (tiny Llama and
  Qwen3-shaped models, float32 and bfloat16, with and without checkpointing): the estimate is
  within -5%..+4% of the measurement, and the per-layer terms match byte for byte in float32.
  CUDA kernels' workspaces and allocator fragmentation are not in it (the process margin
  stands for them: an estimate).
- process margin (CUDA context, cuBLAS workspaces, allocator slack): a fixed estimate.

Peak = margin + weights + grads + AdamW + max(step temporaries, copies + kept activations +
backward peak).

Several trainer ranks (`trainer_ranks` R > 1, FSDP2: `scalerl.parallel.shard`), per rank:
weights, gradients, AdamW state and the step temporaries are 1/R of the above (sharded); during
the step a rank also holds the root parameters unsharded from the forward to the end of the
backward (embeddings, final norm and the tied head: the root's parameters are not resharded
after its forward) and their full gradient, and the all-gathered parameters of two decoder
layers (the one computing and the one FSDP2 prefetches) plus one layer's unsharded gradient
before its reduce-scatter, all in the parameter dtype (the all-gather keeps it: compute is
autocast, as at one rank). With several micro-batches per rank the gradients are
reduce-scattered once, after the last one (`gradient_sync: step`, `scalerl.rl.update`): until
then every layer's gradient stays unsharded on each rank, (N - root - one layer) x p more
(none with `gradient_sync: micro_batch`). Activations are per
micro-batch as above: each rank runs micro-batches of the same token budget over its 1/R of
the step's sequences.

Generator (`generator_terms`), K = 2 * L * kv_heads * head_dim * g bytes of KV per token:

- vLLM: weights N*g; activations of its profiling forward ~ T_b * g*(3i + 2q + 2k + 2h) for
  T_b = max_num_batched_tokens, plus the sampler's 3 float32 [max_num_seqs, V] tensors and
  an fp32 head cast V*h*4 (estimates); CUDA graphs a fixed estimate unless enforce_eager.
  KV cache = vllm_kv_cache bytes if set, else utilisation * device - weights - activations -
  graphs; the process then holds utilisation * device (vLLM sizes the cache to fill it and
  refuses to start when less is free). It must hold max_model_len tokens (vLLM refuses to
  start otherwise); KV / (K * s) sequences decode at once, the rest wait (time, not memory).
- HF engine (`scalerl.rollout.hf_engine`): weights N*g (none when the in-process engine
  shares the trainer's model: one rank, parameters in the generation dtype), KV rows * s * K for rows = gen_batch (the cache grows, nothing caps it),
  plus the larger of a prefill of rows * prompt tokens (activations as above, boolean and float
  masks rows * prompt^2 * (1 + g)) and a decode step (3 float32 [rows, V], the fp32 head copy,
  one layer's KV copy while the cache grows).

Tokens per step: B*G*s (upper bound, memory uses it) and B*G*(prompt + f*generation) for the
mean completion length f (a stated assumption; shown, never used for memory).

Devices (`placement`): the R ranks split evenly over `nodes`, one device each; in pipeline
mode the generators split evenly over the nodes too, each node's after its ranks,
`generator_devices` (vLLM tensor parallelism) each, when the node's `devices` hold them all,
else a node's generators share its first device (`scalerl.rl.trainer.resolve_devices`).

Deliberately left out: tensor parallelism of the trainer, prefix caching (it reuses KV blocks,
it needs none), CPU memory, and measured CUDA figures (no GPU here): margins are named
estimates.
"""

from __future__ import annotations

import dataclasses

from scalerl.config import Config, field_
from scalerl.plan.arch import ModelArch

__all__ = ["DTYPE_BYTES", "GiB", "HEAD_GEMMS", "HEAD_GEMM_TEXT", "PlanInputs", "Term",
           "backward_peak_bytes", "generator_terms",
           "kept_activation_bytes", "kv_capacity_tokens", "trainer_terms"]

GiB = 1 << 30
MiB = 1 << 20
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
DTYPES = tuple(DTYPE_BYTES)
HEAD_GEMMS = ("mm_out_dtype", "upcast", "float32")  # = scalerl.models.logprobs.HEAD_GEMMS
HEAD_GEMM_TEXT = {
    "mm_out_dtype": "torch.mm(bf16, bf16, out_dtype=float32), tensor cores",
    "upcast": "bf16 operands upcast to float32 (no out_dtype mm in this torch), CUDA cores",
    "float32": "float32 x float32, CUDA cores",
}
LOSS_BYTES_PER_TOKEN = 64  # ids, masks, old/new log-probs, advantages, loss terms (estimate)
LOGPROB_LIVE_COPIES = 4  # float32 [C, V] tensors at the backward peak (measured 4.1)
VLLM_BLOCK_TOKENS = 16  # vLLM's default KV block size; one block is held back (null block)
VLLM_SAMPLER_COPIES = 3  # float32 [max_num_seqs, V]: logits, probabilities, log-probs


@dataclasses.dataclass(frozen=True)
class Term:
    """One named share of a device's memory."""

    process: str
    label: str
    bytes: int


@dataclasses.dataclass(frozen=True)
class PlanInputs(Config):
    """Everything the memory of one run depends on (see the module docstring)."""

    arch: ModelArch = field_(default_factory=ModelArch, doc="model architecture numbers")
    prompts_per_step: int = field_(48, "prompts per optimizer step B", ge=1)
    generations_per_prompt: int = field_(16, "completions per prompt G", ge=1)
    prompt_tokens: int = field_(1024, "longest prompt in tokens (an assumption unless "
                                "measured on the prompt set)", ge=1)
    generation_tokens: int = field_(8192, "generation cap per completion in tokens", ge=1)
    expected_generation_fraction: float = field_(
        0.5, "mean completion length as a share of the cap; only for the expected tokens per "
        "step (memory always uses the cap)", gt=0, le=1)
    param_dtype: str = field_("float32", "trainer parameter (and grad, AdamW) dtype",
                              choices=DTYPES)
    compute_dtype: str = field_("float32", "trainer matmul dtype (autocast when it differs "
                                "from param_dtype)", choices=DTYPES)
    fp32_lm_head: bool = field_(True, "LM head and log-softmax in float32 (ScaleRL)")
    lm_head_operands: str = field_("float32", "the FP32 head's GEMM operands (bfloat16: a "
                                   "bf16 copy of the head weight and of the logits' gradient "
                                   "chunk)", choices=("float32", "bfloat16"))
    lm_head_gemm: str = field_(
        "auto", "the GEMM the FP32 head runs (scalerl.models.logprobs.head_gemm): mm_out_dtype "
        "= torch.mm(bf16, bf16, out_dtype=float32), tensor cores; upcast = the bf16 operands "
        "upcast to float32 first (an fp32 copy of the V x h weight and of the gradient chunk, "
        "CUDA cores); float32 = fp32 x fp32 (CUDA cores); auto = mm_out_dtype with bf16 "
        "operands, else float32 (scalerl.plan.adapters asks this torch)",
        choices=("auto", *HEAD_GEMMS))
    gradient_checkpointing: bool = field_(False, "recompute each layer in backward")
    gradient_sync: str = field_("step", "FSDP2 gradient reduce-scatter: once per step (the "
                                "gradients wait unsharded) or per micro-batch",
                                choices=("step", "micro_batch"))
    logprob_chunk_tokens: int = field_(0, "tokens whose head + log-softmax run at once "
                                       "(0 = the whole micro-batch)", ge=0)
    micro_batch_tokens: int = field_(0, "tokens per trainer forward/backward (token budget; "
                                     "0 = use micro_batch_groups)", ge=0)
    micro_batch_groups: int = field_(0, "prompts (x G rows of s tokens) per forward/backward "
                                     "when micro_batch_tokens is 0; 0 = the whole step", ge=0)
    padded_rows: bool = field_(True, "training rows are right-padded, so SDPA gets a mask "
                               "(K/V repeated, float mask bias per layer)")
    attention: str = field_("sdpa", "trainer attention kernel", choices=("sdpa", "eager"))
    engine: str = field_("vllm", "generation engine", choices=("hf", "vllm"))
    pipeline: bool = field_(True, "generators are separate processes (PipelineRL); False: "
                            "the engine runs inside the trainer process")
    generators: int = field_(1, "generator processes (pipeline)", ge=1)
    generator_dtype: str = field_("float32", "generator weight and KV dtype", choices=DTYPES)
    gen_batch: int = field_(768, "sequences a generator decodes together (max_num_seqs)",
                            ge=1)
    eval_batch: int = field_(768, "sequences the eval engine decodes together", ge=1)
    vllm_gpu_memory_utilization: float = field_(0.5, "vLLM: share of the device it takes "
                                                "(and needs free at start)", gt=0, le=1)
    vllm_kv_cache_bytes: int = field_(0, "vLLM KV cache size (0: fill the utilisation)",
                                      ge=0)
    vllm_max_model_len: int = field_(0, "vLLM context length (0: the model's)", ge=0)
    vllm_enforce_eager: bool = field_(True, "vLLM without CUDA graphs")
    vllm_prefix_caching: bool = field_(True, "vLLM shares a prompt's KV among its G samples "
                                       "(prefill time only; scalerl.plan.timing)")
    vllm_max_num_batched_tokens: int = field_(0, "vLLM tokens per forward (0: vLLM's default, "
                                              "16384 on devices >= 70 GiB, else 8192)", ge=0)
    device_memory_bytes: int = field_(80 * GiB, "memory of one device", ge=1)
    devices: int = field_(1, "devices the train job holds on each node", ge=1)
    trainer_ranks: int = field_(1, "FSDP2 trainer ranks (one device each): parameters, "
                                "gradients and AdamW state sharded over them", ge=1)
    nodes: int = field_(1, "nodes the train job spans (the trainer ranks split evenly)", ge=1)
    generator_devices: int = field_(1, "devices of one generator (vLLM tensor parallelism)",
                                    ge=1)
    process_overhead_bytes: int = field_(GiB, "per process: CUDA context, library workspaces, "
                                         "allocator slack (estimate)", ge=0)
    vllm_cuda_graph_bytes: int = field_(GiB, "vLLM CUDA graphs when not enforce_eager "
                                        "(estimate)", ge=0)

    # -- derived shapes --------------------------------------------------------------------
    @property
    def seq_tokens(self) -> int:
        """s: prompt + generation tokens of one sequence."""
        return self.prompt_tokens + self.generation_tokens

    @property
    def sequences_per_step(self) -> int:
        return self.prompts_per_step * self.generations_per_prompt

    @property
    def micro_tokens(self) -> int:
        """t: tokens of one trainer forward/backward, padding included (at least one row)."""
        s = self.seq_tokens
        if self.micro_batch_tokens:
            return max(s, self.micro_batch_tokens)
        groups = self.micro_batch_groups or self.prompts_per_step
        return min(groups, self.prompts_per_step) * self.generations_per_prompt * s

    @property
    def engine_shares_trainer_model(self) -> bool:
        """The in-process HF engine samples from the trainer's own model: at one rank, with the
        parameters in the generation dtype (`scalerl.rl.trainer.in_process_generator_model`);
        otherwise from a copy in the generation dtype."""
        return self.trainer_ranks == 1 and self.param_dtype == self.generator_dtype

    @property
    def micro_batches(self) -> int:
        """Forward/backward passes of one step on each trainer rank (its 1/R of the step)."""
        step = -(-self.sequences_per_step // self.trainer_ranks) * self.seq_tokens
        return -(-step // self.micro_tokens)

    @property
    def head_gemm(self) -> str:
        """The FP32 head's GEMM, `lm_head_gemm` resolved (auto: mm_out_dtype with bf16
        operands, float32 otherwise)."""
        if self.lm_head_gemm != "auto":
            return self.lm_head_gemm
        return "mm_out_dtype" if self.lm_head_operands == "bfloat16" else "float32"

    @property
    def max_model_len(self) -> int:
        return self.vllm_max_model_len or self.arch.max_positions

    @property
    def ranks_per_node(self) -> int:
        return -(-self.trainer_ranks // self.nodes)

    @property
    def generators_per_node(self) -> int:
        return -(-self.generators // self.nodes)

    @property
    def shared_device(self) -> bool:
        """A node's generators share its first device (as `scalerl.rl.trainer.resolve_devices`
        places them: their own devices only when the node holds its trainer ranks + its
        generators x generator_devices)."""
        return not self.pipeline or self.devices < (
            self.ranks_per_node + self.generators_per_node * self.generator_devices)

    def placement(self) -> list[str]:
        """One line per node: which device does what (module docstring)."""
        rpn, lines = self.ranks_per_node, []
        for node in range(self.nodes):
            first = node * rpn
            ranks = list(range(first, min(first + rpn, self.trainer_ranks)))
            parts = [f"cuda:{_span(0, len(ranks))} trainer rank{'s' if len(ranks) > 1 else ''} "
                     f"{_span(ranks[0], len(ranks))}"]
            used = len(ranks)
            gens = self.generators_per_node
            if self.pipeline:
                first_gen = node * gens
                if self.shared_device:
                    parts.append(f"generators {_span(first_gen, gens)} share cuda:0"
                                 if gens > 1 else f"generator {first_gen} shares cuda:0")
                else:
                    width = gens * self.generator_devices
                    parts.append(f"cuda:{_span(used, width)} generator{'s' if gens > 1 else ''} "
                                 f"{_span(first_gen, gens)} ({self.generator_devices} "
                                 "device(s) each)")
                    used += width
            if used < self.devices:
                parts.append(f"cuda:{_span(used, self.devices - used)} unused")
            lines.append(f"node {node}: " + ", ".join(parts))
        return lines

    def tokens_per_step(self) -> tuple[int, int]:
        """(upper bound, expected) tokens of one step's B x G sequences."""
        upper = self.sequences_per_step * self.seq_tokens
        mean_gen = self.expected_generation_fraction * self.generation_tokens
        return upper, round(self.sequences_per_step * (self.prompt_tokens + mean_gen))


def _span(first: int, count: int) -> str:
    return str(first) if count == 1 else f"{first}-{first + count - 1}"


# -- trainer ---------------------------------------------------------------------------------
def layer_activation_bytes(inp: PlanInputs) -> int:
    """A: bytes one token saves for backward in one decoder layer (module docstring)."""
    a = inp.arch
    h, q, k, i, s = a.hidden, a.q_width, a.kv_width, a.intermediate, inp.seq_tokens
    p, c = DTYPE_BYTES[inp.param_dtype], DTYPE_BYTES[inp.compute_dtype]
    masked = inp.padded_rows
    total = 2 * (4 * h + p * h + 4) + c * (2 * h + i) + 3 * c * i
    total += (4 + c) * (q + k) + 4 * (a.heads + a.kv_heads) if a.qk_norm else 0
    if inp.attention == "eager":  # q, k, v repeated, out copied for o_proj, probabilities
        return total + 4 * c * q + a.heads * s * (4 + c)
    total += c * (2 * q + 2 * (q if masked else k)) + 4 * a.heads
    return total + (c * s if masked else 0)


def outside_activation_bytes(inp: PlanInputs) -> int:
    """Per token outside the layers: final norm, body output, head input, RoPE, loss."""
    a, p = inp.arch, DTYPE_BYTES[inp.param_dtype]
    rows = max(1, inp.micro_tokens // inp.seq_tokens)
    head_input = 4 * a.hidden if inp.fp32_lm_head and p != 4 else 0
    mask = DTYPE_BYTES[inp.compute_dtype] * inp.seq_tokens if inp.attention == "eager" else 0
    return (4 * a.hidden + 2 * p * a.hidden + head_input + 8 * a.head_dim // rows
            + LOSS_BYTES_PER_TOKEN + mask)


def backward_working_bytes(inp: PlanInputs) -> int:
    """Per token: gradients live while one layer runs backward (measured: c*i + 3*p*h)."""
    a = inp.arch
    return (DTYPE_BYTES[inp.compute_dtype] * a.intermediate
            + 3 * DTYPE_BYTES[inp.param_dtype] * a.hidden)


def kept_activation_bytes(inp: PlanInputs) -> int:
    """Bytes one micro-batch keeps for backward: every layer's set, or (checkpointing) each
    layer's input and the boolean mask; plus the terms outside the layers."""
    t, a = inp.micro_tokens, inp.arch
    if inp.gradient_checkpointing:
        kept = a.layers * DTYPE_BYTES[inp.param_dtype] * a.hidden
        kept += inp.seq_tokens if inp.padded_rows else 0  # the boolean mask, 1 byte
    else:
        kept = a.layers * layer_activation_bytes(inp)
    return t * (kept + outside_activation_bytes(inp))


def _bf16_upcast(inp: PlanInputs) -> bool:
    """bf16 head operands without the out_dtype GEMM: each GEMM upcasts both to float32."""
    return inp.fp32_lm_head and inp.lm_head_operands == "bfloat16" and inp.head_gemm == "upcast"


def logprob_bytes(inp: PlanInputs) -> int:
    """float32 [C, V] tensors of the chunked (or whole) LM head + log-softmax (and the bf16
    copy of the logits' gradient with bf16 operands; its float32 upcast on the upcast path)."""
    chunk = min(inp.logprob_chunk_tokens or inp.micro_tokens, inp.micro_tokens)
    bf16 = 2 if inp.fp32_lm_head and inp.lm_head_operands == "bfloat16" else 0
    bf16 += 4 if _bf16_upcast(inp) else 0
    return (LOGPROB_LIVE_COPIES * 4 + bf16) * chunk * inp.arch.vocab


def head_copy_bytes(inp: PlanInputs) -> int:
    """fp32 copies of a non-fp32 LM-head weight and of its gradient (2 * V * h * 4), the bf16
    copy of the weight the head's GEMMs take with bf16 operands (V * h * 2), and on the upcast
    path (no out_dtype GEMM) the float32 copy of that bf16 copy each GEMM makes (V * h * 4)."""
    fp32_copy = inp.fp32_lm_head and DTYPE_BYTES[inp.param_dtype] != 4
    bf16 = inp.fp32_lm_head and inp.lm_head_operands == "bfloat16"
    vh = inp.arch.vocab * inp.arch.hidden
    return ((2 * vh * 4 if fp32_copy else 0) + (vh * 2 if bf16 else 0)
            + (vh * 4 if _bf16_upcast(inp) else 0))


def backward_peak_bytes(inp: PlanInputs) -> tuple[int, str]:
    """(bytes, what) on top of the kept activations: the head's backward (log-prob tensors,
    fp32 head copies) or one layer's backward (recomputed first with checkpointing), which
    never overlap."""
    layer = backward_working_bytes(inp)
    layer += layer_activation_bytes(inp) if inp.gradient_checkpointing else 0
    layer *= inp.micro_tokens
    head = logprob_bytes(inp) + head_copy_bytes(inp)
    chunk = min(inp.logprob_chunk_tokens or inp.micro_tokens, inp.micro_tokens)
    if head >= layer:
        what = f"log-probs: {chunk:,} tokens x V x 4 x {LOGPROB_LIVE_COPIES}"
        return head, what + (" + head weight copies" if head_copy_bytes(inp) else "")
    recompute = "recomputed " if inp.gradient_checkpointing else ""
    return layer, f"one {recompute}layer's backward ({inp.micro_tokens:,} tokens)"


def trainer_terms(inp: PlanInputs) -> list[Term]:
    """One trainer rank's peak, term by term (activation terms are per micro-batch; module
    docstring for the sharded terms at several ranks)."""
    a, n, r = inp.arch, inp.arch.n_params(), inp.trainer_ranks
    p, c = DTYPE_BYTES[inp.param_dtype], DTYPE_BYTES[inp.compute_dtype]
    pd = inp.param_dtype
    shard = f" / {r} ranks" if r > 1 else ""
    terms = [
        Term("trainer", "process margin (CUDA context, workspaces; estimate)",
             inp.process_overhead_bytes),
        Term("trainer", f"weights {pd}: N={n:,} x {p}{shard}", -(-n * p // r)),
        Term("trainer", f"gradients {pd}: N x {p}{shard}", -(-n * p // r)),
        Term("trainer", f"AdamW state {pd}: 2 x N x {p}{shard}", -(-2 * n * p // r)),
    ]
    copies = a.layers * a.layer_params() * c if c != p else 0
    copies += a.vocab * a.hidden * c if c != p and not inp.fp32_lm_head else 0
    ckpt = "with" if inp.gradient_checkpointing else "without"
    peak, what = backward_peak_bytes(inp)
    during_step = [
        Term("trainer", f"{inp.compute_dtype} weight copies (autocast)", copies),
        Term("trainer", f"activations kept: {inp.micro_tokens:,} tokens, {ckpt} "
             "checkpointing", kept_activation_bytes(inp)),
        Term("trainer", f"backward peak: {what}", peak),
    ]
    if r > 1:
        root = n - a.layers * a.layer_params()
        during_step += [
            Term("trainer", f"FSDP2 root unsharded: embeddings/head/norm ({root:,}) x {p}, "
                 "with its full gradient", 2 * root * p),
            Term("trainer", f"FSDP2 all-gathered layers: 2 x {a.layer_params():,} x {p} + one "
                 "unsharded layer gradient", 3 * a.layer_params() * p),
        ]
        if inp.micro_batches > 1 and inp.gradient_sync == "step":  # gradients wait unsharded
            during_step.append(Term(
                "trainer", f"FSDP2 gradients unsharded until the last of {inp.micro_batches} "
                f"micro-batches: the other {a.layers - 1} layers x {a.layer_params():,} x {p}",
                (a.layers - 1) * a.layer_params() * p))
    optimizer_temp = -(-n * p // r)
    if optimizer_temp > sum(t.bytes for t in during_step):
        return terms + [Term("trainer", f"optimizer step temporaries N x p{shard}",
                             optimizer_temp)]
    return terms + [t for t in during_step if t.bytes]


# -- generator -------------------------------------------------------------------------------
def _inference_bytes_per_token(arch: ModelArch, g: int) -> int:
    """One layer's transient tensors per token in a no-grad forward (estimate)."""
    return g * (3 * arch.intermediate + 2 * arch.q_width + 2 * arch.kv_width + 2 * arch.hidden)


def _vllm_batched_tokens(inp: PlanInputs) -> int:
    if inp.vllm_max_num_batched_tokens:
        return inp.vllm_max_num_batched_tokens
    return 16384 if inp.device_memory_bytes >= 70 * GiB else 8192


def vllm_activation_bytes(inp: PlanInputs, max_seqs: int) -> int:
    a, g = inp.arch, DTYPE_BYTES[inp.generator_dtype]
    forward = _vllm_batched_tokens(inp) * _inference_bytes_per_token(a, g)
    sampler = VLLM_SAMPLER_COPIES * 4 * max_seqs * a.vocab
    head = a.vocab * a.hidden * 4 if inp.fp32_lm_head and g != 4 else 0
    return forward + sampler + head


def vllm_kv_bytes(inp: PlanInputs, max_seqs: int) -> int:
    """Bytes of vLLM's KV cache (may be <= 0 when the utilisation leaves none)."""
    if inp.vllm_kv_cache_bytes:
        return inp.vllm_kv_cache_bytes
    graphs = 0 if inp.vllm_enforce_eager else inp.vllm_cuda_graph_bytes
    budget = int(inp.vllm_gpu_memory_utilization * inp.device_memory_bytes)
    weights = inp.arch.n_params() * DTYPE_BYTES[inp.generator_dtype]
    return budget - weights - vllm_activation_bytes(inp, max_seqs) - graphs


def kv_capacity_tokens(inp: PlanInputs, kv_bytes: int) -> int:
    """Tokens a KV cache of `kv_bytes` holds: whole 16-token blocks, one held back."""
    per_block = VLLM_BLOCK_TOKENS * inp.arch.kv_bytes_per_token(DTYPE_BYTES[inp.generator_dtype])
    blocks = kv_bytes // per_block - 1 if inp.engine == "vllm" else kv_bytes // per_block
    return max(0, blocks) * VLLM_BLOCK_TOKENS


def generator_terms(inp: PlanInputs, max_seqs: int, *, shares_trainer_model: bool = False,
                    process: str = "generator") -> list[Term]:
    """A generator's (or the eval engine's) device memory, term by term, in the generation
    dtype. An in-process HF engine that `shares_trainer_model` uses the trainer's weights and
    process (`PlanInputs.engine_shares_trainer_model`)."""
    a = inp.arch
    g = DTYPE_BYTES[inp.generator_dtype]
    kv_per_token = a.kv_bytes_per_token(g)
    weights = 0 if shares_trainer_model else a.n_params() * g
    margin = 0 if shares_trainer_model else inp.process_overhead_bytes
    terms = [Term(process, "process margin (estimate)", margin),
             Term(process, f"weights {inp.generator_dtype}: N x {g}", weights)]
    if inp.engine == "vllm":
        kv = max(0, vllm_kv_bytes(inp, max_seqs))
        graphs = 0 if inp.vllm_enforce_eager else inp.vllm_cuda_graph_bytes
        terms += [
            Term(process, f"vLLM activations: {_vllm_batched_tokens(inp):,} tokens, sampler "
                 f"x {max_seqs} (estimate)", vllm_activation_bytes(inp, max_seqs)),
            Term(process, "vLLM CUDA graphs (estimate)", graphs),
            Term(process, f"KV cache: {kv_capacity_tokens(inp, kv):,} tokens x "
                 f"{kv_per_token:,} B", kv),
        ]
        return [t for t in terms if t.bytes]
    rows, s = max_seqs, inp.seq_tokens
    prefill_tokens = rows * inp.prompt_tokens
    prefill = prefill_tokens * _inference_bytes_per_token(a, g)
    prefill += rows * inp.prompt_tokens ** 2 * (1 + g)
    decode = 3 * 4 * rows * a.vocab + rows * s * 2 * a.kv_heads * a.head_dim * g
    decode += a.vocab * a.hidden * 4 if inp.fp32_lm_head and g != 4 else 0
    terms += [Term(process, f"KV cache: {rows} rows x {s:,} tokens x {kv_per_token:,} B",
                   rows * s * kv_per_token),
              Term(process, "prefill or decode transients (estimate)", max(prefill, decode))]
    return [t for t in terms if t.bytes]
