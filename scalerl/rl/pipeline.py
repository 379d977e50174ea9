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

Processes (CPU and CUDA alike): generators are `torch.multiprocessing` processes that share
nothing with the trainer's interpreter state: *forkserver* on Linux (a fresh server process,
which pre-imports torch/transformers once, forks them), *spawn* elsewhere; either way the
caller's main module must be import-safe (`if __name__ == "__main__"`). Each process sets its
own torch thread count (the caller splits the cores, e.g. one thread each on a 2-core
machine). A generator exits when the trainer closes the pipeline or dies (it polls its
parent's pid), so a SIGKILLed trainer leaves no orphans. The other way round, a generator that
dies (SIGKILL, out of memory) stops the trainer within about a second with a `GeneratorError`
naming it (name, pid, exit code): the trainer checks the generators whenever it has waited a
second for completions, for acknowledgements or for a weight slot's readers.

Weights (`scalerl.rollout.weight_transfer`, transport `transport`): one push sends every
parameter once, in the generators' dtype (`dtype`: the trainer's float32 masters are cast
while written), a tied embedding/head once; `push_weights` takes a state dict or a stream of
tensors gathered one at a time (`scalerl.rl.weights.PolicyWeights`). With `shm` the trainer
writes a host shared-memory slot (version v in slot v mod n_slots: 2 slots free-running, a
double buffer, fixed_lag + 1 on the fixed schedule) and publishes its version; a generator that
sees a newer version loads it into its engine with `Engine.update_weights(slot, version)`. No
lock is held while bytes move: K generators load the same slot at once and the trainer writes
the next version into the other slot meanwhile; it waits only for a slot a generator still
reads (`HostSlots.write`). With `nccl` / `ipc` (vLLM's asynchronous engine on CUDA) the
trainer drives vLLM's weight-transfer round trip (`scalerl.rollout.vllm_transfer.VllmPusher`)
through `_GeneratorClient`: each call goes to every generator as a control message on its
request queue, runs there (`AsyncVLLMEngine.transfer_rpc`) and is acknowledged. Every load is
reported (`load_stats`: loads, seconds, bytes). `pause_for_update` / the next push put
generators that share the trainer's device to sleep and wake them (`sleep_during_update`).

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
of the same config give the same samples and weights (bit-identical on CPU; docs/design.md,
"Reproducibility"). The cost: a generator cannot start the next batch while the tail of the
current one decodes, and with d = 1 generation of batch s overlaps the trainer's step on batch
s − 1 only (BENCHMARKS.md, "Default sweep", S7). `fixed_lag` None is the free-running pipeline
above.

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

Deliberately left out: weight transfer between nodes (each node's first rank runs its node's
pipeline, `scalerl.rl.rollouts.PipelineRollouts`), generator-side prompt sampling (the trainer owns the data order
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
from scalerl.rollout.weight_transfer import HostSlots, WeightStream, as_stream

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
    # seconds the generator may take to become ready (build its engine: model load, and for
    # vLLM memory profiling, compilation, CUDA graphs; load the first weights), counted from
    # when the previous generator became ready (`Pipeline`); vLLM's: VllmSettings.start_timeout
    start_timeout_s: float = 300.0
    # optional grader built in the generator: `grader(**grader_kwargs)(completions) -> scores`;
    # each finished completion leaves with its verdict in `Completion.score`
    grader: Callable[..., Callable[[list[Completion]], list[Any]]] | None = None
    grader_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)


def staleness(trainer_version: int, completion: Completion) -> int:
    """Policy lag of a sample: trainer version − the oldest version among its tokens."""
    return trainer_version - completion.min_version


def _load(engine: Engine, slots: HostSlots, version: int | None, results: Any,
          rank: int) -> None:
    """Load `version` (None: the newest) from its host slot into the engine; no lock is held
    while it loads (the slot's reader count keeps the trainer off it)."""
    with slots.reading(version) as weights:
        if weights is None:
            return
        start = time.perf_counter()
        engine.update_weights(weights, weights.version)
        results.put(("loaded", rank, (weights.version, time.perf_counter() - start,
                                      weights.nbytes), 0, 0.0))


def _generator_main(
    rank: int,
    spec: EngineSpec,
    slots: HostSlots | None,
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
    stream completions; run the trainer's weight-transfer calls as they come."""
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
        if slots is not None:
            _load(engine, slots, start_version, results, rank)
        else:  # weights come by the trainer's transfer calls: no policy until the first
            engine.version = -1
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
                    if msg[0] == "rpc":  # a weight-transfer call (Pipeline._rpc): run, ack
                        _, method, payload, version = msg
                        start = time.perf_counter()
                        engine.transfer_rpc(method, payload, version)
                        results.put(("ack", rank, method, 0, 0.0))
                        if method == "finish_weight_update":
                            results.put(("loaded", rank, (version, time.perf_counter() - start,
                                                          0), 0, 0.0))
                    else:
                        _, batch_index, reqs = msg
                        pending.extend((batch_index, r) for r in reqs)
                    msg = requests.get_nowait()
            except queue.Empty:
                pass
            if fixed_lag is None:
                admit = _admit_free(engine, pending, slots, results, rank, max_lag,
                                    max_concurrent, admit_min, start_version)
            else:
                admit = _admit_fixed(engine, pending, slots, results, rank, fixed_lag,
                                     start_version)
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


def _admit_free(engine: Engine, pending: deque, slots: HostSlots | None, results: Any,
                rank: int, max_lag: int, max_concurrent: int, admit_min: int,
                start_version: int) -> list[Request]:
    """Free-running: switch to the newest pushed weights (in-flight rows too), then admit
    pending requests within the lag bound, in cohorts of at least `admit_min` rows."""
    if slots is not None and slots.newest > engine.version:
        _load(engine, slots, None, results, rank)
    if engine.version < start_version:  # transfer transports: the first push is not in yet
        return []
    admit: list[Request] = []
    room = max_concurrent - engine.num_in_flight()
    if engine.num_in_flight() and room < min(admit_min, len(pending)):
        room = 0  # refill in cohorts: see Pipeline's admit_min
    while pending and room > 0 and pending[0][0] <= engine.version + max_lag:
        admit.append(pending.popleft()[1])
        room -= 1
    return admit


def _admit_fixed(engine: Engine, pending: deque, slots: HostSlots, results: Any, rank: int,
                 fixed_lag: int, start_version: int) -> list[Request]:
    """Fixed schedule: once the previous batch has finished decoding, the next batch s whole,
    with policy version max(s − fixed_lag, start_version) loaded (none until it is pushed)."""
    if engine.num_in_flight() or not pending:
        return []
    batch_index = pending[0][0]
    need = max(batch_index - fixed_lag, start_version)
    if slots.newest < need:
        return []  # the trainer has not pushed it yet: wait (the caller polls)
    if engine.version != need:
        _load(engine, slots, need, results, rank)
    admit: list[Request] = []
    while pending and pending[0][0] == batch_index:
        admit.append(pending.popleft()[1])
    return admit


class _GeneratorClient:
    """vLLM's `VLLMWeightSyncClient` over this pipeline's generators
    (`scalerl.rollout.vllm_transfer`): each call runs in every generator, acknowledged."""

    def __init__(self, pipe: Pipeline, workers_per_generator: int) -> None:
        self.pipe, self.workers = pipe, workers_per_generator
        self.version = pipe.version

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        per = []
        for k in range(len(self.pipe._procs)):  # NCCL: generator k's workers after k's
            info = dict(init_info, aliases=[list(a) for a in self.pipe.layout.aliases])
            if "rank_offset" in info:
                info["rank_offset"] = int(info["rank_offset"]) + k * self.workers
            per.append(info)
        self.pipe._rpc("init_weight_transfer_engine", per, self.version)

    def start_weight_update(self) -> None:
        self.pipe._rpc("start_weight_update", None, self.version)

    def update_weights(self, update_info: Any) -> None:
        self.pipe._rpc("update_weights", update_info, self.version)

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.pipe._rpc("finish_weight_update", None, self.version)


class Pipeline:
    """Trainer-side handle of the generator processes (see the module docstring)."""

    def __init__(
        self,
        specs: Sequence[EngineSpec],
        weights: Mapping[str, torch.Tensor] | WeightStream,
        version: int,
        max_lag: int,
        max_concurrent: int,
        admit_min: int | None = None,
        start_timeout_s: float | None = None,
        fixed_lag: int | None = None,
        *,
        dtype: str | None = None,
        transport: str = "shm",
        workers_per_generator: int = 1,
        sleep_during_update: bool = False,
        transfer_timeout_s: float = 300.0,
    ) -> None:
        """`start_timeout_s`: seconds each generator may take to become ready after the
        previous one did (None: each spec's `start_timeout_s`; see `_wait_ready`);
        `transfer_timeout_s`: seconds each weight-transfer call may take in every generator."""
        if not specs:
            raise ValueError("Pipeline needs at least one EngineSpec (one generator)")
        if max_lag < 0 or max_concurrent < 1:
            raise ValueError(f"need max_lag >= 0 and max_concurrent >= 1, got {max_lag}, "
                             f"{max_concurrent}")
        if fixed_lag is not None and not 0 <= fixed_lag <= max_lag:
            raise ValueError(f"fixed_lag = {fixed_lag} must be in [0, max_lag = {max_lag}] "
                             "(or None: free-running)")
        if transport not in ("shm", "nccl", "ipc"):
            raise ValueError(f"transport {transport!r}: shm, nccl or ipc")
        if fixed_lag is not None and transport != "shm":
            raise ValueError("the fixed schedule keeps past versions in host slots: transport "
                             f"shm, not {transport}")
        ctx = _context()
        admit_min = max(1, max_concurrent // 2) if admit_min is None else admit_min
        self.max_lag = max_lag
        self.fixed_lag = fixed_lag
        self.version = version
        self.start_version = version
        self.transport = transport
        self.sleep_during_update = sleep_during_update
        self._asleep = False
        self._dtype = dtype
        stream = as_stream(weights, dtype)
        self.layout = stream.layout
        self.bytes_pushed = 0  # bytes the last push sent
        self._slots: HostSlots | None = None
        self._pusher = None
        self._procs: list = []
        self._stop = ctx.Event()
        self._results = ctx.Queue()
        self._request_queues = [ctx.Queue() for _ in specs]
        self._buffer: dict[int, list[Completion]] = defaultdict(list)
        self._gen_tokens = [0] * len(specs)
        self._gen_busy = [0.0] * len(specs)
        self._loads = [[0, 0.0, 0] for _ in specs]  # per generator: loads, seconds, bytes
        self._acks: dict[str, int] = defaultdict(int)
        self._next_queue = 0
        self._last_check = 0.0
        self._timeout_s = transfer_timeout_s  # of each weight-transfer call
        try:
            if transport == "shm":  # two slots free-running; the last fixed_lag + 1 versions
                n_slots = 2 if fixed_lag is None else fixed_lag + 1
                self._slots = HostSlots.create(self.layout, n_slots, ctx)
                self.bytes_pushed = self._slots.write(version, stream)
            for rank, spec in enumerate(specs):
                proc = ctx.Process(
                    target=_generator_main,
                    args=(rank, spec, self._slots, self._request_queues[rank], self._results,
                          self._stop, max_lag, max_concurrent, admit_min, fixed_lag, version),
                    daemon=True,
                    name=f"scalerl-generator-{rank}",
                )
                proc.start()
                self._procs.append(proc)
            self._ready: set[int] = set()
            self._wait_ready(specs, start_timeout_s)
            if self._slots is not None:
                self._slots.unlink()  # every process has mapped the files
            else:
                from scalerl.rollout.vllm_transfer import VllmPusher

                self._pusher = VllmPusher(transport, _GeneratorClient(self, workers_per_generator),
                                          self.layout, len(specs) * workers_per_generator)
                self._pusher.start()
                self.bytes_pushed = self._pusher.push(stream, version)
        except BaseException:
            self.close()
            raise

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

    def push_weights(self, weights: Mapping[str, torch.Tensor] | WeightStream,
                     version: int) -> None:
        """Publish the trainer's weights (a state dict, or a stream in the layout's order:
        consumed once) as policy `version`; free-running generators switch at their next step,
        fixed-schedule ones load it for the batch that needs it. Wakes sleeping generators
        first."""
        if version <= self.version:
            raise ValueError(f"version {version} must increase (current {self.version})")
        if self._asleep:
            self._rpc("wake_up", None, self.version)
            self._asleep = False
        stream = as_stream(weights, self._dtype)
        if self._slots is not None:
            self.bytes_pushed = self._slots.write(version, stream, wait=self._poll_alive)
        else:
            self.bytes_pushed = self._pusher.push(stream, version)
        self.version = version

    def pause_for_update(self) -> None:
        """Before an optimizer step: generators that share the trainer's device sleep (free
        their KV cache) when `sleep_during_update`; the next push wakes them."""
        if self.sleep_during_update and not self._asleep:
            self._rpc("sleep", None, self.version)
            self._asleep = True

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

    def load_stats(self) -> tuple[int, float, int]:
        """(weight loads, seconds loading, bytes loaded) summed over generators, so far (the
        loads reported by the messages drained up to now)."""
        return (sum(n for n, _, _ in self._loads), sum(s for _, s, _ in self._loads),
                sum(b for _, _, b in self._loads))

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
        if self._slots is not None:
            self._slots.unlink()
        if self._pusher is not None:
            self._pusher.close()
            self._pusher = None

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------
    def _wait_ready(self, specs: Sequence[EngineSpec], allowance_s: float | None) -> None:
        """Until every generator is ready. The deadline follows what is starting: the longest
        allowance among the generators not yet ready (`allowance_s`, else their specs'),
        renewed whenever one becomes ready, so K engines that start one after another on a
        shared device (vLLM compiling, capturing CUDA graphs) get K allowances, while a
        generator that makes no progress fails after one, naming itself."""
        def allowance() -> float:
            if allowance_s is not None:
                return allowance_s
            return max(s.start_timeout_s for k, s in enumerate(specs) if k not in self._ready)

        deadline = time.monotonic() + allowance()
        while len(self._ready) < len(specs):
            before = len(self._ready)
            try:
                self._drain(deadline)
            except TimeoutError:
                waiting = [self._procs[k].name for k in range(len(specs))
                           if k not in self._ready]
                raise TimeoutError(
                    f"{', '.join(waiting)} not ready {allowance():.0f} s after the last "
                    "progress (building its engine and loading the first weights); raise "
                    "the start timeout (vllm.start_timeout_s for vLLM generators) if the "
                    "engine is only slow to start") from None
            if before < len(self._ready) < len(specs):
                deadline = time.monotonic() + allowance()

    def _rpc(self, method: str, payload: Any, version: int) -> None:
        """Run one weight-transfer call in every generator (`payload` a list: one each) and
        wait for all of them to acknowledge it."""
        before = self._acks[method]
        for k, q in enumerate(self._request_queues):
            q.put(("rpc", method, payload[k] if isinstance(payload, list) else payload,
                   version))
        deadline = time.monotonic() + self._timeout_s
        while self._acks[method] < before + len(self._request_queues):
            self._drain(deadline)

    def _drain(self, deadline: float) -> None:
        """Take one message from the generators and file it."""
        self._file(self._get(deadline))

    def _file(self, msg: tuple) -> None:
        kind, rank, payload, tokens, busy = msg
        if kind == "done":
            for c in payload:
                batch_index = c.request.tag[0]
                self._buffer[batch_index].append(c)
            self._gen_tokens[rank] = tokens
            self._gen_busy[rank] = busy
        elif kind == "loaded":
            _, seconds, nbytes = payload
            stats = self._loads[rank]
            stats[0], stats[1], stats[2] = stats[0] + 1, stats[1] + seconds, stats[2] + nbytes
        elif kind == "ack":
            self._acks[payload] += 1
        elif kind == "ready":
            self._ready.add(rank)

    def _check_alive(self) -> None:
        """GeneratorError naming the first generator process that has exited."""
        dead = [p for p in self._procs if not p.is_alive()]
        if dead:
            name, pid, code = dead[0].name, dead[0].pid, dead[0].exitcode
            self.close()
            raise GeneratorError(f"generator process {name} (pid {pid}) exited with code {code} "
                                 "before finishing its work")

    def _poll_alive(self) -> None:
        """While waiting for a weight slot: the generators' liveness at most once a second
        (one killed while loading would hold the slot forever), and their messages."""
        now = time.monotonic()
        if now - self._last_check >= 1.0:
            self._last_check = now
            try:  # file what came in (an error message explains a death best)
                while True:
                    msg = self._results.get_nowait()
                    if msg[0] == "error":
                        self._raise(msg)
                    self._file(msg)
            except queue.Empty:
                pass
            self._check_alive()

    def _raise(self, msg: tuple) -> None:
        self.close()
        raise GeneratorError(f"generator {msg[1]} failed:\n{msg[2]}")

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
                self._raise(msg)
            return msg
