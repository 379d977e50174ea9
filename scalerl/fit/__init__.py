"""scalerl.fit (see README file tree)."""
