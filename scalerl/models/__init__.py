"""scalerl.models (see README file tree)."""
