"""The base model of a run (`scalerl base`): a tiny model warm-started by SFT, or a HF model.

It sits above both `scalerl.models` (architecture, loading, log-probs) and `scalerl.rollout`
(the engines SFT measures pass rates with), so neither of those imports the other's users:
models ← rollout ← basemodel (docs/design.md, "Package layout").
"""
