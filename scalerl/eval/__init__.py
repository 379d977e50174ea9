"""scalerl.eval: a checkpoint's validation pass rate, one Parquet file per checkpoint.

- `schema`: `EVAL_SCHEMA`, the one definition of eval/chunk{k}.parquet (one row per sampled
  completion), its writer, reader and invariants;
- `runner`: `run_eval` (k samples per held-out or downstream prompt with the run's own
  generation budget, graded by `scalerl.rewards`), `EvalSettings`;
- `cli`: `scalerl eval --config run.yaml --checkpoint DIR --chunk K ...`.

Submodules are imported explicitly (nothing is imported here).
"""
