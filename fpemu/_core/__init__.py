"""Layer 1, formats: the `Format` descriptor, the registry (the single source of format facts), the rounding-mode names."""
