"""scalerl.rl (see README file tree)."""
