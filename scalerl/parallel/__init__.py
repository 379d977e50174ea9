"""What several trainer ranks need beyond the one trainer (docs/design.md, "Scale-out").

The training loop, batch assembly, advantages, filters, loss and optimizer step are the same at
every world size (`scalerl.rl`); this package holds only the parts that exist because there
are several ranks:

- `scalerl.parallel.world`: `World` (rank, size, device, collectives; the identity at one
  rank), process-group setup from the torchrun environment (gloo on CPU, `cpu:gloo,cuda:nccl`
  on CUDA) and the torchrun / srun launch commands of `scalerl train`;
- `scalerl.parallel.shard`: `ScoringPolicy` (the policy as one root module) and FSDP2
  `fully_shard` of each decoder layer and the root (fp32 master weights, fp32 reduction);
- `scalerl.parallel.checkpoint`: DCP-sharded model and AdamW state, the full HF model dir and
  the generators' weights gathered to the main rank's CPU memory.

Deliberately left out: tensor/pipeline/sequence parallelism.
"""
