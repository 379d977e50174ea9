"""scalerl: predictable RL post-training of language models (the ScaleRL recipe).

Subpackages: fit (sigmoid fits), rl (objective + trainer), tasks, rewards, data, models,
rollout, eval. Importing `scalerl` is cheap: nothing heavy (torch, transformers) loads here.
"""

__version__ = "0.1.0"
