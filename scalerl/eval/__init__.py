"""scalerl.eval (see README file tree)."""
