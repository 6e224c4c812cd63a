"""Layer 3, the rounding engine: exact conversion between formats on bit patterns, and counter-based random bits."""
