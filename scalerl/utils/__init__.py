"""Small shared helpers: atomic file output and progress logging."""
