"""scalerl.rollout (see README file tree)."""
