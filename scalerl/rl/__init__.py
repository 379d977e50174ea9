"""scalerl.rl: the RL recipe and the trainer that runs it, one chunk of one run at a time.

The recipe and the run:
- `recipe`: `RecipeConfig` (every algorithmic choice; defaults = ScaleRL §4), the presets, and
  `recipe_from_preset`, the one merge of a recipe;
- `run_config`: `RunConfig` (run.yaml: model, typed recipe, chunking, task mix, engine,
  devices), `load_run_config`;
- `numerics`: `StepNumerics` (param/compute dtype, chunked FP32 head, micro-batches,
  checkpointing).

One training step, bottom up:
- `losses` (CISPO, DAPO, GRPO, GSPO, PPO-clip; aggregation; the IS/mismatch metrics),
  `advantages`, `filters` (zero variance), `length_penalty`, `curriculum` (NPR);
- `prompts` (the train split as a resumable prompt source), `grading` (verdicts),
  `rollouts` (on-policy, PPO-off-policy-k, PipelineRL-k through `pipeline`'s generator
  processes), `batch` (rewards → filter → advantages → each rank's tensors), `update` (one
  optimizer step at any world size);
- `trainer`: `train_chunk`, the loop of a chunk; `checkpoint`, `steps` (steps.parquet),
  `rollout_log` (rollouts.parquet), `compute` (FLOPs and device-hours).

Submodules are imported explicitly (nothing is imported here). The `scalerl train` command is
`scalerl.train`; several trainer ranks add only `scalerl.parallel`.
"""
