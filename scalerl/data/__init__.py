"""scalerl.data (see README file tree)."""
