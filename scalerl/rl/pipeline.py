"""PipelineRL-k: generator processes that stream completions while the trainer trains.

Piché et al. 2025 (PipelineRL), as used by ScaleRL (paper §3.1, A.11) with k = 8: generators
generate continuously; after every optimizer step the trainer pushes its weights and the
generators switch to them at their next decode step, *keeping the in-flight sequences and
their KV cache* (each token's `versions` entry records the policy that sampled it); the trainer
takes a full batch when it is ready and waits when it is k versions ahead.

How the lag bound holds by construction. Batches are numbered by the optimizer step that
consumes them: batch s is trained on when the trainer holds policy version s (s optimizer
steps done). The trainer issues batch s's requests early (up to k batches ahead of the one it
is waiting for), but a generator *starts* a request of batch s only when its own policy
version is >= s − k. Every token of batch s therefore comes from a version >= s − k, and the
staleness of every sample, s − min(token versions), is <= k. The trainer consumes exactly the
samples of batch s (`collect(s)`), never later ones, so the bound cannot be broken by
reordering; `collect` asserts it. When generation is slower than training, the trainer waits
in `collect`; when it is faster, generators finish batch s + k and idle until the next weight
push: "the trainer waits when k steps ahead" and "generators wait when k batches ahead" are
the same condition seen from both sides.

Processes and weights (CPU and CUDA alike): generators are `torch.multiprocessing` processes
that share nothing with the trainer's interpreter state: *forkserver* on Linux (a fresh server
process, which pre-imports torch/transformers once, forks them), *spawn* elsewhere; either way
the caller's main module must be import-safe (`if __name__ == "__main__"`). The trainer copies its parameters into one set of shared-memory CPU tensors
(free-running; fixed_lag + 1 sets on the fixed schedule, below) under a lock and bumps a shared version counter; a generator that sees a newer version loads
the tensors under the same lock (so it never reads half a push) into its engine with
`Engine.update_weights(state, version)`. Each process sets its own torch thread count (the
caller splits the cores, e.g. one thread each on a 2-core machine). A generator exits when
the trainer closes the pipeline or dies (it polls its parent's pid), so a SIGKILLed trainer
leaves no orphans (it watches the trainer's liveness sentinel). The other way round, a
generator that dies (SIGKILL, out of memory) stops the trainer within about a second with a
`GeneratorError` naming it (name, pid, exit code): the trainer checks the generators whenever
it has waited a second for completions or for the weights lock (which a generator killed
while loading a push would otherwise hold forever).

Fixed schedule (`fixed_lag` = d, 0 <= d <= k; `RunConfig.pipeline_fixed_lag`): the policy
version of every sample follows the step count instead of the wall clock. Batch s is
generated whole, as one cohort, by version v(s) = max(s − d, v0) (v0: the version the
pipeline started with, i.e. the chunk's first step); a generator takes the batches in order,
starts batch s only when the previous one has finished decoding, and waits until the trainer
has pushed v(s). No in-flight switch happens, so every token of a sample carries v(s) and its
staleness is s − v(s) <= d <= k. The trainer keeps the last d + 1 versions in d + 1
shared-memory slots (version v in slot v mod (d + 1)): when it pushes version V it has
consumed every batch below V, so no generator still needs a version below V − d, the one the
slot held. With per-sample seeds (`scalerl.rollout.hf_engine`) and one thread per process, a
batch's completions are then a function of the weights and the requests alone, and two runs
of the same config give the same samples and weights (bit-identical on CPU). The cost: a
generator cannot start the next batch while the tail of the current one decodes, and with
d = 1 generation of batch s overlaps the trainer's step on batch s − 1 only (BENCHMARKS.md,
"PipelineRL fixed schedule"). `fixed_lag` None is the free-running pipeline above.

Admission in cohorts: a generator that has sequences in flight admits new ones only when at
least `admit_min` rows are free (default half of `max_concurrent`) or the work left is
smaller. Topping the batch up every time a few sequences finish costs the HF engine a cache
merge and a small prefill per decode step and widens the left-padded cache
(`benchmarks/bench_admission.py`, the engine alone on the default mix, 512 samples, 1 thread:
3,372 tok/s topping up one row at a time, 4,149 tok/s in cohorts of 64); sequence lengths
here vary little, so there is little tail to fill.

Grading: a generator given a grader (`EngineSpec.grader`) attaches each finished sample's
verdict before streaming it, so verification overlaps the trainer's optimizer step; the
verdicts are computed on the grader's threads (`scalerl.rl.grading.GradedStream`) while the
engine keeps decoding, and a sample is streamed once its verdict is in.

Deliberately left out: NCCL/IPC weight broadcast for multi-GPU clusters (weights travel
through host shared memory), generator-side prompt sampling (the trainer owns the data order
and the No-Positive-Resampling state, so both are checkpointed in one place) and
re-generation of samples that a crash lost (the trainer re-issues their prompts on resume).
"""

from __future__ import annotations

import dataclasses
import queue
import time
import traceback
from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.multiprocessing as mp

from scalerl.rollout.base import Completion, Engine, Request

__all__ = ["EngineSpec", "GeneratorError", "Pipeline", "staleness"]

_POLL_S = 0.01  # idle generator's wait for new work or weights
_PRELOAD = ("torch", "transformers", "scalerl.rollout.hf_engine", "scalerl.rl.trainer",
            "scalerl.rl.grading")


def _context() -> Any:
    """forkserver on Linux (a clean server process that pre-imports torch and transformers once
    and forks each generator from there: no parent state is forked and later generators start
    in a fraction of a second), spawn elsewhere."""
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["__main__", *_PRELOAD])
        return ctx
    return mp.get_context("spawn")


class GeneratorError(RuntimeError):
    """A generator process failed or exited; the message carries its traceback."""


@dataclasses.dataclass(frozen=True)
class EngineSpec:
    """How a generator process builds its engine: `factory(**kwargs)`, picklable by reference."""

    factory: Callable[..., Engine]  # a module-level function
    kwargs: dict[str, Any]
    threads: int = 1  # torch threads in the generator process
    # optional grader built in the generator: `grader(**grader_kwargs)(completions) -> scores`;
    # each finished completion leaves with its verdict in `Completion.score`
    grader: Callable[..., Callable[[list[Completion]], list[Any]]] | None = None
    grader_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)


def staleness(trainer_version: int, completion: Completion) -> int:
    """Policy lag of a sample: trainer version − the oldest version among its tokens."""
    return trainer_version - completion.min_version


def _load_version(engine: Engine, slots: list[dict[str, torch.Tensor]], slot_versions: Any,
                  lock: Any, version: int) -> None:
    """Load policy `version` from its shared slot into the engine, under the weights lock."""
    slot = version % len(slots)
    with lock:  # never read a half-written push
        held = int(slot_versions[slot])
        if held != version:  # the slot ring's invariant (module docstring) was broken
            raise RuntimeError(f"weights slot {slot} holds version {held}, not the version "
                               f"{version} this generator needs")
        engine.update_weights(slots[slot], version)


def _generator_main(
    rank: int,
    spec: EngineSpec,
    slots: list[dict[str, torch.Tensor]],
    slot_versions: Any,
    shared_version: Any,
    lock: Any,
    requests: Any,
    results: Any,
    stop: Any,
    max_lag: int,
    max_concurrent: int,
    admit_min: int,
    fixed_lag: int | None,
    start_version: int,
) -> None:
    """Generator process: admit work within the lag bound (or on the fixed schedule), decode,
    stream completions."""
    torch.set_num_threads(max(1, spec.threads))
    # The trainer starts generators as daemons (they die with it); an engine may need its own
    # child process (vLLM's AsyncLLM engine core), which a daemon may not start: lift the flag
    # in this process only (the trainer still terminates it; vLLM's core exits with it).
    mp.current_process().daemon = False
    try:
        engine = spec.factory(**spec.kwargs)
        from scalerl.rl.grading import GradedStream

        graded = (GradedStream(spec.grader(**spec.grader_kwargs)) if spec.grader is not None
                  else None)
        _load_version(engine, slots, slot_versions, lock, start_version)
        results.put(("ready", rank, None, 0, 0.0))
        pending: deque[tuple[int, Request]] = deque()
        generated_tokens, busy_s = 0, 0.0
        trainer = mp.parent_process()
        while not stop.is_set():
            if trainer is not None and not trainer.is_alive():  # trainer SIGKILLed: stop too
                return
            busy = engine.num_in_flight() > 0
            try:  # drain new work; block briefly only when there is nothing to decode
                msg = requests.get(timeout=_POLL_S) if not busy else requests.get_nowait()
                while True:
                    if msg[0] == "stop":
                        return
                    _, batch_index, reqs = msg
                    pending.extend((batch_index, r) for r in reqs)
                    msg = requests.get_nowait()
            except queue.Empty:
                pass
            if fixed_lag is None:
                admit = _admit_free(engine, pending, slots, slot_versions, shared_version, lock,
                                    max_lag, max_concurrent, admit_min)
            else:
                admit = _admit_fixed(engine, pending, slots, slot_versions, shared_version, lock,
                                     fixed_lag, start_version)
            if admit:
                engine.submit(admit)
            done: list[Completion] = []
            if engine.num_in_flight():
                t0 = time.perf_counter()
                done = engine.step()
                busy_s += time.perf_counter() - t0
                generated_tokens += sum(c.n_tokens for c in done)
            if graded is not None:  # verdicts on worker threads, off the decode loop
                graded.put(done)
                done = graded.ready()
            if done:
                results.put(("done", rank, done, generated_tokens, busy_s))
    except BaseException:  # report, then exit: the trainer raises GeneratorError
        results.put(("error", rank, traceback.format_exc(), 0, 0.0))
    finally:
        if "graded" in locals() and graded is not None:
            graded.close()
        if "engine" in locals():
            engine.close()


def _admit_free(engine: Engine, pending: deque, slots: list, slot_versions: Any,
                shared_version: Any, lock: Any, max_lag: int, max_concurrent: int,
                admit_min: int) -> list[Request]:
    """Free-running: switch to the newest pushed weights (in-flight rows too), then admit
    pending requests within the lag bound, in cohorts of at least `admit_min` rows."""
    if int(shared_version.value) > engine.version:
        with lock:  # one slot: whatever version it holds now (never a half-written push)
            engine.update_weights(slots[0], int(slot_versions[0]))
    admit: list[Request] = []
    room = max_concurrent - engine.num_in_flight()
    if engine.num_in_flight() and room < min(admit_min, len(pending)):
        room = 0  # refill in cohorts: see Pipeline's admit_min
    while pending and room > 0 and pending[0][0] <= engine.version + max_lag:
        admit.append(pending.popleft()[1])
        room -= 1
    return admit


def _admit_fixed(engine: Engine, pending: deque, slots: list, slot_versions: Any,
                 shared_version: Any, lock: Any, fixed_lag: int,
                 start_version: int) -> list[Request]:
    """Fixed schedule: once the previous batch has finished decoding, the next batch s whole,
    with policy version max(s − fixed_lag, start_version) loaded (none until it is pushed)."""
    if engine.num_in_flight() or not pending:
        return []
    batch_index = pending[0][0]
    need = max(batch_index - fixed_lag, start_version)
    if int(shared_version.value) < need:
        return []  # the trainer has not pushed it yet: wait (the caller polls)
    if engine.version != need:
        _load_version(engine, slots, slot_versions, lock, need)
    admit: list[Request] = []
    while pending and pending[0][0] == batch_index:
        admit.append(pending.popleft()[1])
    return admit


class Pipeline:
    """Trainer-side handle of the generator processes (see the module docstring)."""

    def __init__(
        self,
        specs: Sequence[EngineSpec],
        weights: Mapping[str, torch.Tensor],
        version: int,
        max_lag: int,
        max_concurrent: int,
        admit_min: int | None = None,
        start_timeout_s: float = 300.0,
        fixed_lag: int | None = None,
    ) -> None:
        if not specs:
            raise ValueError("Pipeline needs at least one EngineSpec (one generator)")
        if max_lag < 0 or max_concurrent < 1:
            raise ValueError(f"need max_lag >= 0 and max_concurrent >= 1, got {max_lag}, "
                             f"{max_concurrent}")
        if fixed_lag is not None and not 0 <= fixed_lag <= max_lag:
            raise ValueError(f"fixed_lag = {fixed_lag} must be in [0, max_lag = {max_lag}] "
                             "(or None: free-running)")
        ctx = _context()
        admit_min = max(1, max_concurrent // 2) if admit_min is None else admit_min
        self.max_lag = max_lag
        self.fixed_lag = fixed_lag
        self.version = version
        self.start_version = version
        # one slot free-running; the fixed schedule keeps the last fixed_lag + 1 versions
        n_slots = 1 if fixed_lag is None else fixed_lag + 1
        self._slots = [{k: v.detach().to("cpu", copy=True).contiguous().share_memory_()
                        for k, v in weights.items()} for _ in range(n_slots)]
        self._slot_versions = ctx.Array("q", [version] * n_slots)
        self._version = ctx.Value("q", version)
        self._lock = ctx.Lock()
        self._stop = ctx.Event()
        self._results = ctx.Queue()
        self._request_queues = [ctx.Queue() for _ in specs]
        self._buffer: dict[int, list[Completion]] = defaultdict(list)
        self._gen_tokens = [0] * len(specs)
        self._gen_busy = [0.0] * len(specs)
        self._next_queue = 0
        self._procs = []
        for rank, spec in enumerate(specs):
            proc = ctx.Process(
                target=_generator_main,
                args=(rank, spec, self._slots, self._slot_versions, self._version, self._lock,
                      self._request_queues[rank], self._results, self._stop, max_lag,
                      max_concurrent, admit_min, fixed_lag, version),
                daemon=True,
                name=f"scalerl-generator-{rank}",
            )
            proc.start()
            self._procs.append(proc)
        ready = 0
        deadline = time.monotonic() + start_timeout_s
        while ready < len(specs):
            kind, rank, payload, _, _ = self._get(deadline)
            if kind == "ready":
                ready += 1

    # -- trainer side ----------------------------------------------------------------------
    def submit(self, batch_index: int, requests: Sequence[Request]) -> None:
        """Queue the requests of batch `batch_index` (consumed at trainer version batch_index).

        A batch is spread over the generators whole groups at a time (requests of one prompt id
        stay together), round-robin. Each request travels with tag (batch_index, tag); `collect`
        gives the completions back with the caller's tag restored.
        """
        groups: dict[str, list[Request]] = defaultdict(list)
        for r in requests:
            groups[r.prompt_id].append(dataclasses.replace(r, tag=(batch_index, r.tag)))
        per_queue: list[list[Request]] = [[] for _ in self._request_queues]
        for reqs in groups.values():
            per_queue[self._next_queue].extend(reqs)
            self._next_queue = (self._next_queue + 1) % len(self._request_queues)
        for q, reqs in zip(self._request_queues, per_queue):
            if reqs:
                q.put(("work", batch_index, reqs))

    def push_weights(self, weights: Mapping[str, torch.Tensor], version: int) -> None:
        """Publish the trainer's weights as policy `version`; free-running generators switch at
        their next step, fixed-schedule ones load it for the batch that needs it."""
        if version <= self.version:
            raise ValueError(f"version {version} must increase (current {self.version})")
        slot = version % len(self._slots)
        self._acquire_lock()
        try:
            with torch.no_grad():
                for name, tensor in weights.items():
                    self._slots[slot][name].copy_(tensor.detach())
            self._slot_versions[slot] = version
            self._version.value = version
        finally:
            self._lock.release()
        self.version = version

    def collect(self, batch_index: int, n: int, timeout_s: float = 3600.0) -> list[Completion]:
        """Wait for the `n` completions of batch `batch_index`; others stay buffered."""
        deadline = time.monotonic() + timeout_s
        while len(self._buffer[batch_index]) < n:
            self._drain(deadline)
        got = self._buffer.pop(batch_index)
        if len(got) != n:
            raise RuntimeError(f"batch {batch_index}: expected {n} completions, got {len(got)}")
        for c in got:
            c.request = dataclasses.replace(c.request, tag=c.request.tag[1])
            lag = staleness(self.version, c)
            assert 0 <= lag <= self.max_lag, (
                f"sample of batch {batch_index} has staleness {lag} outside [0, {self.max_lag}] "
                f"at trainer version {self.version}: token versions "
                f"{min(c.versions)}..{max(c.versions)}"
            )
            if self.fixed_lag is not None:
                want = max(batch_index - self.fixed_lag, self.start_version)
                assert set(c.versions) <= {want}, (
                    f"fixed schedule: a sample of batch {batch_index} has token versions "
                    f"{sorted(set(c.versions))}, not only {want}")
        return got

    def generator_stats(self) -> tuple[int, float]:
        """(tokens generated, seconds spent decoding) summed over generators, so far."""
        return sum(self._gen_tokens), sum(self._gen_busy)

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the generators (discarding work in flight) and join them."""
        self._stop.set()
        for q in self._request_queues:
            q.put(("stop",))
        deadline = time.monotonic() + timeout_s
        # Keep draining: a child cannot exit while its queue still holds unsent completions.
        while any(p.is_alive() for p in self._procs) and time.monotonic() < deadline:
            try:
                while True:
                    self._results.get_nowait()
            except queue.Empty:
                pass
            for proc in self._procs:
                proc.join(0.02)
        for proc in self._procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout_s)
        self._procs = []

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------
    def _drain(self, deadline: float) -> None:
        kind, rank, payload, tokens, busy = self._get(deadline)
        if kind == "done":
            for c in payload:
                batch_index = c.request.tag[0]
                self._buffer[batch_index].append(c)
            self._gen_tokens[rank] = tokens
            self._gen_busy[rank] = busy

    def _check_alive(self) -> None:
        """GeneratorError naming the first generator process that has exited."""
        dead = [p for p in self._procs if not p.is_alive()]
        if dead:
            name, pid, code = dead[0].name, dead[0].pid, dead[0].exitcode
            self.close()
            raise GeneratorError(f"generator process {name} (pid {pid}) exited with code {code} "
                                 "before finishing its work")

    def _acquire_lock(self) -> None:
        """The weights lock; a generator killed while holding it (loading a push) would block
        the trainer forever, so wait in slices and check the generators between them."""
        while not self._lock.acquire(timeout=1.0):
            self._check_alive()

    def _get(self, deadline: float) -> tuple:
        while True:
            try:
                msg = self._results.get(timeout=1.0)
            except queue.Empty:
                self._check_alive()
                if time.monotonic() > deadline:
                    raise TimeoutError("timed out waiting for the generator processes") from None
                continue
            if msg[0] == "error":
                self.close()
                raise GeneratorError(f"generator {msg[1]} failed:\n{msg[2]}")
            return msg
