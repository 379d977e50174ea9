"""scalerl.rewards (see README file tree)."""
