"""scalerl.tasks (see README file tree)."""
