"""Data-parallel (FSDP2) training of the policy across trainer ranks under torchrun.

Modules (docs/design.md, "Scale-out"):

- `scalerl.dist.env`: process-group init from the torchrun environment (nccl on CUDA, gloo on
  CPU), the 1-D device mesh, and the torchrun relaunch command of `scalerl train`;
- `scalerl.dist.shard`: FSDP2 `fully_shard` of each decoder layer and of the root (master
  weights fp32; bf16 compute of the layers on CUDA);
- `scalerl.dist.reduce`: the batch-wide quantities exact across ranks: zero-variance decision,
  batch-level advantage statistics and the loss normaliser, by all-reduces over the global
  sorted prompt ids;
- `scalerl.dist.batch`: prompt groups split across ranks and the rank's share of the batch;
- `scalerl.dist.step`: the distributed optimizer step (same loss as `scalerl.rl.update`);
- `scalerl.dist.checkpoint`: sharded trainer state (`torch.distributed.checkpoint`) plus the
  full HF model directory gathered on rank 0.

Deliberately left out: tensor/pipeline/sequence parallelism. Multi-node jobs are launched as
`srun torchrun` by `scalerl.dist.env.launch_command`; an outside torchrun/srun is joined.
"""
