"""Does a run fit its devices? `check_fits(inputs) -> PlanReport`, with the knobs to turn.

Placement follows `scalerl.rl.trainer.resolve_devices` (`PlanInputs.placement`, printed): one
device per trainer rank (cuda:0 the main rank); in pipeline mode each generator on its own
device(s) after the main rank's node's ranks when that node holds them, else all on cuda:0;
the in-process modes (on-policy, PPO) run the engine inside the main rank (an HF engine runs
between optimizer steps, so the larger of generation and training counts; it samples in the
model's dtype: from the trainer's own model at one rank when the parameters are in that dtype,
else from a copy that stays between steps; a vLLM engine keeps its cache, so both count). With several ranks the other ranks' devices hold the
trainer terms alone. `scalerl eval` runs one engine alone on one device.

Problems (each one line, naming the knob): a device whose terms exceed its memory; a vLLM
context (`max_model_len`) shorter than prompt + generation; a vLLM KV cache that cannot hold
one `max_model_len` sequence (vLLM refuses to start) or that gets no memory at all; vLLM on a
shared device that would not find its utilisation share free when it starts. A KV cache that
holds fewer than `gen_batch` full sequences is a note (vLLM queues the rest: time, not memory).

Knobs for a trainer that does not fit are searched, not guessed: each candidate change
(`logprob_chunk_tokens`, `gradient_checkpointing`, `gradient_sync`, `trainer_ranks`,
`micro_batch_tokens` / `train_micro_batch`) is re-planned and reported only if it makes the
device fit; when no single change does, the
combination is reported, and when even one sequence with all of them does not fit, the
structural knobs (generation length, generators on their own devices, the dtype).

Deliberately left out: choosing the fix for the user, and anything outside device memory.
"""

from __future__ import annotations

import dataclasses

from scalerl.plan.memory import (
    DTYPE_BYTES,
    HEAD_GEMM_TEXT,
    VLLM_BLOCK_TOKENS,
    GiB,
    MiB,
    PlanInputs,
    Term,
    generator_terms,
    kv_capacity_tokens,
    trainer_terms,
    vllm_activation_bytes,
    vllm_kv_bytes,
)

__all__ = ["DeviceUse", "PlanReport", "check_fits"]


@dataclasses.dataclass(frozen=True)
class DeviceUse:
    """What one device holds during one stage."""

    stage: str
    device: str
    terms: tuple[Term, ...]
    capacity: int

    @property
    def need(self) -> int:
        return sum(t.bytes for t in self.terms)

    @property
    def fits(self) -> bool:
        return self.need <= self.capacity


@dataclasses.dataclass(frozen=True)
class PlanReport:
    """Per-device memory of a run and every problem found (empty: it fits)."""

    title: str
    inputs: PlanInputs
    devices: tuple[DeviceUse, ...]
    problems: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def fits(self) -> bool:
        return not self.problems

    def format(self, *, detail: bool = True) -> str:
        """The plan as text: header, one row per stage and device, then the terms."""
        inp, a = self.inputs, self.inputs.arch
        upper, expected = inp.tokens_per_step()
        ckpt = "with" if inp.gradient_checkpointing else "without"
        chunk = inp.logprob_chunk_tokens or "whole micro-batch"
        lines = [
            f"plan {self.title}: {a.name} ({a.n_params() / 1e9:.3f}B params), "
            f"{inp.prompts_per_step} x {inp.generations_per_prompt} = "
            f"{inp.sequences_per_step} sequences of {inp.prompt_tokens:,} prompt + "
            f"{inp.generation_tokens:,} generated tokens",
            f"  tokens/step: {upper:,} upper bound, {expected:,} expected (mean completion "
            f"{inp.expected_generation_fraction:g} x cap)",
            f"  trainer: {inp.param_dtype} params, {inp.compute_dtype} compute, "
            f"{inp.micro_tokens:,} tokens x {inp.micro_batches} micro-batches"
            f"{' per rank' if inp.trainer_ranks > 1 else ''}, {ckpt} "
            f"checkpointing, log-prob chunk {chunk}",
            f"  FP32 head GEMM: {HEAD_GEMM_TEXT[inp.head_gemm]}" if inp.fp32_lm_head else
            "  LM head in the compute dtype (fp32_lm_head off)",
            f"  trainer ranks: {inp.trainer_ranks} (FSDP2 over {inp.nodes} node(s) x "
            f"{inp.devices} device(s))" if inp.trainer_ranks > 1 else
            f"  trainer ranks: 1 ({inp.devices} device(s))",
            *(f"    {line}" for line in inp.placement()),
            f"  generation: {inp.engine}, {inp.generators if inp.pipeline else 'in-process'} "
            f"generator(s), {inp.generator_dtype}, {inp.gen_batch} seqs, KV "
            f"{a.kv_bytes_per_token(DTYPE_BYTES[inp.generator_dtype]):,} B/token"
            + (f", max_model_len {inp.max_model_len:,}" if inp.engine == "vllm" else ""),
            "",
            f"  {'stage':<22} {'device':<9} {'need GiB':>9} {'of GiB':>8}  verdict",
        ]
        for use in self.devices:
            verdict = "fits" if use.fits else "DOES NOT FIT"
            lines.append(f"  {use.stage:<22} {use.device:<9} {use.need / GiB:>9.2f} "
                         f"{use.capacity / GiB:>8.2f}  {verdict}")
        if detail:
            for use in self.devices:
                lines += ["", f"  {use.device} ({use.stage}):"]
                lines += [f"    {t.process:<11} {t.bytes / GiB:>9.2f} GiB  {t.label}"
                          for t in use.terms]
        lines += [""] + [f"  note: {n}" for n in self.notes]
        lines.append(f"  verdict: {'fits' if self.fits else 'DOES NOT FIT'}")
        return "\n".join(lines).replace("\n\n\n", "\n\n")


# -- trainer knobs -------------------------------------------------------------------------
def _trainer_need(inp: PlanInputs) -> int:
    return sum(t.bytes for t in trainer_terms(inp))


def _largest_fitting_tokens(inp: PlanInputs, available: int) -> int | None:
    """Largest micro-batch token budget in [s, t) that fits `available`, or None."""
    lo, hi = inp.seq_tokens, inp.micro_tokens - 1
    if hi < lo or _trainer_need(inp.replace(micro_batch_tokens=lo)) > available:
        return None
    while lo < hi:  # the need grows with the tokens: bisect for the last one that fits
        mid = (lo + hi + 1) // 2
        if _trainer_need(inp.replace(micro_batch_tokens=mid)) <= available:
            lo = mid
        else:
            hi = mid - 1
    rounded = lo - lo % 256
    return rounded if rounded >= inp.seq_tokens else lo


def _micro_knob(inp: PlanInputs, tokens: int) -> str:
    group = inp.generations_per_prompt * inp.seq_tokens
    if not inp.micro_batch_tokens and tokens >= group:
        return (f"train_micro_batch: lower to <= {tokens // group} (or micro_batch_tokens: "
                f"<= {tokens:,})")
    return f"micro_batch_tokens: lower to <= {tokens:,}"


def _chunk_knob(inp: PlanInputs, available: int) -> str | None:
    now = inp.logprob_chunk_tokens or inp.micro_tokens
    for chunk in (8192, 4096, 2048, 1024, 512, 256):
        if chunk < now and _trainer_need(inp.replace(logprob_chunk_tokens=chunk)) <= available:
            return f"logprob_chunk_tokens: set to {chunk}"
    return None


def _ranks_knob(inp: PlanInputs, available: int) -> str | None:
    """More FSDP2 trainer ranks (smaller shards), if the nodes have the devices for them; with
    the gradients reduce-scattered per micro-batch when waiting unsharded does not fit."""
    gen_devices = inp.generators_per_node * inp.generator_devices if inp.pipeline else 0
    most = inp.nodes * max(0, inp.devices - gen_devices)
    ranks = inp.trainer_ranks * 2
    while ranks <= most:
        if ranks % inp.nodes == 0:
            more = inp.replace(trainer_ranks=ranks)
            what = f"trainer_ranks: raise to {ranks} (parameters, gradients and AdamW sharded)"
            if _trainer_need(more) <= available:
                return what
            if more.gradient_sync == "step" and \
                    _trainer_need(more.replace(gradient_sync="micro_batch")) <= available:
                return what + " + gradient_sync: micro_batch"
        ranks *= 2
    return None


def trainer_fixes(inp: PlanInputs, available: int) -> tuple[list[str], str | None]:
    """(options, why none) for the trainer to fit `available` bytes (module docstring): every
    single change that suffices, then checkpointing + 2048-token log-prob chunks (+ gradients
    reduce-scattered per micro-batch at several ranks) + the largest micro-batch that fits
    with them; when nothing does, the reason."""
    if _trainer_need(inp) <= available:
        return [], None
    options = [_chunk_knob(inp, available)]
    if not inp.gradient_checkpointing and \
            _trainer_need(inp.replace(gradient_checkpointing=True)) <= available:
        options.append("gradient_checkpointing: true")
    if inp.trainer_ranks > 1 and inp.gradient_sync == "step" and \
            _trainer_need(inp.replace(gradient_sync="micro_batch")) <= available:
        options.append("gradient_sync: micro_batch (gradients reduce-scattered per "
                       "micro-batch, not held unsharded)")
    options.append(_ranks_knob(inp, available))
    tokens = _largest_fitting_tokens(inp, available)
    options.append(_micro_knob(inp, tokens) if tokens else None)
    combo, changes = inp, []
    if not inp.gradient_checkpointing:
        combo = combo.replace(gradient_checkpointing=True)
        changes.append("gradient_checkpointing: true")
    if (combo.logprob_chunk_tokens or combo.micro_tokens) > 2048:
        combo = combo.replace(logprob_chunk_tokens=2048)
        changes.append("logprob_chunk_tokens: set to 2048")
    if combo.trainer_ranks > 1 and combo.gradient_sync == "step":
        combo = combo.replace(gradient_sync="micro_batch")
        changes.append("gradient_sync: micro_batch")
    combo_tokens = _largest_fitting_tokens(combo, available)
    if changes and _trainer_need(combo) <= available:
        options.append(" + ".join(changes))
    elif changes and combo_tokens and combo_tokens > (tokens or 0):
        options.append(" + ".join(changes + [_micro_knob(combo, combo_tokens)]))
    options = [o for o in options if o]
    if options:
        return options, None
    one = combo.replace(micro_batch_tokens=combo.seq_tokens)
    tried = " + ".join(changes) or "as set"
    return [], (f"even one sequence of {inp.seq_tokens:,} tokens ({tried}) needs "
            f"{_trainer_need(one) / GiB:.1f} GiB of {available / GiB:.1f} GiB available "
            "to the trainer: lower the generation length (max_new_tokens / sweep.gen_lens), "
            "free the device (generators on their own devices), lower param_dtype or use a "
            "device with more memory")


# -- the check -----------------------------------------------------------------------------
def _generator_problems(inp: PlanInputs, max_seqs: int, where: str) -> tuple[list, list]:
    """Context and KV-cache problems of one engine (not its device total)."""
    problems, notes = [], []
    s, a = inp.seq_tokens, inp.arch
    if s > a.max_positions:
        problems.append(f"{where}: prompt + generation = {s:,} tokens exceed the model's "
                        f"context {a.max_positions:,}: lower max_new_tokens (sweep.gen_lens) "
                        f"or the longest prompt (prompt_tokens {inp.prompt_tokens:,}: "
                        "scalerl plan --prompt-tokens)")
    if inp.engine != "vllm":
        return problems, notes
    if inp.vllm_max_model_len and inp.vllm_max_model_len < s:
        problems.append(f"{where}: vllm.max_model_len = {inp.vllm_max_model_len:,} < prompt + "
                        f"generation = {s:,}: raise it to >= {s:,}")
    kv = vllm_kv_bytes(inp, max_seqs)
    tokens = kv_capacity_tokens(inp, max(0, kv))
    need_len = inp.max_model_len
    if tokens < need_len:
        fixes = [_kv_fix(inp, max_seqs, need_len)]
        if need_len > s:
            fixes.append(f"vllm.max_model_len: set to {s:,}"
                         + ("" if tokens >= s else f" + {_kv_fix(inp, max_seqs, s)}"))
        what = "no KV cache at all" if kv <= 0 else f"a KV cache of {tokens:,} tokens"
        problems.append(f"{where}: vLLM gets {what} < max_model_len {need_len:,} (vLLM refuses "
                        f"to start): {'; or '.join(fixes)}")
    elif tokens // s < max_seqs:
        per_token = a.kv_bytes_per_token(DTYPE_BYTES[inp.generator_dtype])
        notes.append(f"{where}: the KV cache holds {tokens // s} of the {max_seqs} sequences "
                     f"at once ({max_seqs} x {s:,} tokens would need "
                     f"{max_seqs * s * per_token / GiB:,.1f} GiB); vLLM queues the rest "
                     "(throughput, not memory)")
    return problems, notes


def _kv_fix(inp: PlanInputs, max_seqs: int, length: int) -> str:
    """The KV knob that gives vLLM room for one `length`-token sequence."""
    a, g = inp.arch, DTYPE_BYTES[inp.generator_dtype]
    kv = (length + 2 * VLLM_BLOCK_TOKENS) * a.kv_bytes_per_token(g)  # + held-back block
    if inp.vllm_kv_cache_bytes:
        return f"vllm.kv_cache_mb: raise to >= {-(-kv // MiB):,}"
    graphs = 0 if inp.vllm_enforce_eager else inp.vllm_cuda_graph_bytes
    rest = a.n_params() * g + vllm_activation_bytes(inp, max_seqs) + graphs + kv
    return (f"vllm.gpu_memory_utilization: raise to >= "
            f"{-(-100 * rest // inp.device_memory_bytes) / 100:.2f}")


def _device_fix(inp: PlanInputs, use: DeviceUse) -> str:
    """Knobs for a device over capacity, each checked to suffice: the trainer's, a smaller
    vLLM share, the generators on their own devices (with the trainer's knobs if needed)."""
    cap = use.capacity
    trainer = sum(t.bytes for t in use.terms if t.process == "trainer")
    engines = len({t.process for t in use.terms if t.process != "trainer"})
    others = use.need - trainer
    fixes, why = trainer_fixes(inp, cap - others) if trainer else ([], None)
    if engines and inp.engine == "vllm" and trainer < cap:
        fixes += _vllm_share_fix(inp, cap - trainer, engines, others)
    if engines and inp.engine == "hf":
        fixes.append("gen_batch: lower it (the HF engine's KV cache grows with it)")
    if trainer and engines and inp.pipeline:
        want = inp.ranks_per_node + inp.generators * inp.generator_devices
        move = f"give the train job >= {want} devices per node (each generator on its own)"
        if trainer <= cap:
            fixes.append(move)
        elif not fixes:  # only with the device to itself can the trainer fit
            alone, why_alone = trainer_fixes(inp, cap)
            fixes += [f"{option} + {move}" for option in alone]
            why = why_alone
    return "; or ".join(fixes) or why or "use a device with more memory"


def _vllm_share_fix(inp: PlanInputs, free: int, engines: int, others: int) -> list[str]:
    """A smaller vLLM KV size / utilisation that fits `free` and still holds max_model_len."""
    if inp.vllm_kv_cache_bytes:
        kv = (free - (others - inp.vllm_kv_cache_bytes * engines)) // engines
        if kv > 0 and kv_capacity_tokens(inp, kv) >= inp.max_model_len:
            return [f"vllm.kv_cache_mb: lower to <= {kv // MiB:,}"]
        return []
    share = int(100 * (free - inp.process_overhead_bytes * engines)
                / (engines * inp.device_memory_bytes)) / 100
    if share <= 0:
        return []
    smaller = inp.replace(vllm_gpu_memory_utilization=share)
    if kv_capacity_tokens(smaller, max(0, vllm_kv_bytes(smaller, inp.gen_batch))) >= \
            inp.max_model_len:
        return [f"vllm.gpu_memory_utilization: lower to <= {share:.2f}"]
    return []


def check_fits(inp: PlanInputs, title: str = "run") -> PlanReport:
    """Every device of the train and eval stages, the problems, and notes (module docstring)."""
    capacity = inp.device_memory_bytes
    trainer = trainer_terms(inp)
    gens = [generator_terms(inp, inp.gen_batch, process=f"generator {k}")
            for k in range(inp.generators)]
    uses = []
    rpn, width = inp.ranks_per_node, inp.generator_devices
    others = (DeviceUse(f"train (ranks 1-{inp.trainer_ranks - 1})" if inp.trainer_ranks > 2
                        else "train (rank 1)", "each", tuple(trainer), capacity)
              if inp.trainer_ranks > 1 else None)
    if inp.pipeline and not inp.shared_device:
        uses.append(DeviceUse("train (each rank)" if inp.trainer_ranks > 1 else "train",
                              f"cuda:0-{rpn - 1}" if rpn > 1 else "cuda:0", tuple(trainer),
                              capacity))
        uses += [DeviceUse("generate" if inp.nodes == 1 else "generate (each node)",
                           f"cuda:{rpn + k * width}" if width == 1 else
                           f"cuda:{rpn + k * width}-{rpn + (k + 1) * width - 1}", tuple(g),
                           capacity) for k, g in enumerate(gens[:inp.generators_per_node])]
    elif inp.pipeline:
        uses.append(DeviceUse("train + generate", "cuda:0",
                              tuple(trainer + [t for g in gens[:inp.generators_per_node]
                                               for t in g]), capacity))
        uses += [others] if others else []
    else:
        uses.append(_in_process_use(inp, trainer, capacity))
        uses += [others] if others else []
    uses.append(DeviceUse("eval", "cuda:0",
                          tuple(generator_terms(inp, inp.eval_batch, process="eval engine")),
                          capacity))
    problems, notes = [], []
    if inp.ranks_per_node > inp.devices:
        problems.append(f"trainer_ranks = {inp.trainer_ranks} puts {inp.ranks_per_node} ranks "
                        f"on each of {inp.nodes} node(s), which have {inp.devices} device(s): "
                        "lower trainer_ranks or give the train job more GPUs per node "
                        "(resources.train.gpu)")
    for use in uses:
        if not use.fits:
            problems.append(f"{use.stage} {use.device}: needs {use.need / GiB:.1f} GiB of "
                            f"{use.capacity / GiB:.1f} GiB; fix: {_device_fix(inp, use)}")
    for where, seqs in (("generate", inp.gen_batch), ("eval", inp.eval_batch)):
        found, said = _generator_problems(inp, seqs, where)
        problems += found
        notes += said
    problems += _startup_problems(inp, uses)
    return PlanReport(title, inp, tuple(uses), tuple(problems), tuple(notes))


def _in_process_use(inp: PlanInputs, trainer: list[Term], capacity: int) -> DeviceUse:
    """Trainer + in-process engine: HF runs between steps (larger counts), vLLM stays."""
    static_labels = ("process margin", "weights", "gradients", "AdamW")
    static = [t for t in trainer if t.label.startswith(static_labels)]
    step = [t for t in trainer if t not in static]
    if inp.engine == "vllm":
        engine = [t for t in generator_terms(inp, inp.gen_batch, process="engine")
                  if not t.label.startswith("process margin")]
        return DeviceUse("train + generate", "cuda:0", tuple(trainer + engine), capacity)
    engine = generator_terms(inp, inp.gen_batch,
                             shares_trainer_model=inp.engine_shares_trainer_model,
                             process="engine")
    copy = [t for t in engine if t.label.startswith("weights") and t.bytes]  # stays
    engine = [t for t in engine if not t.label.startswith("weights")]
    larger = max(step, engine, key=lambda terms: sum(t.bytes for t in terms))
    return DeviceUse("train | generate", "cuda:0", tuple(static + copy + larger), capacity)


def _startup_problems(inp: PlanInputs, uses: list[DeviceUse]) -> list[str]:
    """vLLM needs utilisation x device free when it starts (checked even with a fixed KV
    size); on a shared device the trainer already holds its margin, weights and (resumed
    chunks) AdamW state then."""
    if inp.engine != "vllm" or not inp.vllm_kv_cache_bytes or not inp.shared_device:
        return []
    use = uses[0]
    held = sum(t.bytes for t in use.terms if t.process == "trainer" and
               t.label.startswith(("process margin", "weights", "AdamW")))
    wanted = int(inp.vllm_gpu_memory_utilization * inp.device_memory_bytes)
    if held + wanted <= inp.device_memory_bytes:
        return []
    share = (inp.device_memory_bytes - held) / inp.device_memory_bytes
    return [f"{use.stage} {use.device}: vLLM starts only with vllm.gpu_memory_utilization x "
            f"device = {wanted / GiB:.1f} GiB free, but the trainer holds {held / GiB:.1f} GiB "
            f"then: vllm.gpu_memory_utilization: lower to <= {int(share * 100) / 100:.2f}"]
