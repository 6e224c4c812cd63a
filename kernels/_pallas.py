"""The one place that imports version-specific Pallas names (the Pallas API moves between JAX releases).

Checked against jax 0.10.2: ``jax.experimental.pallas`` provides ``pallas_call``, ``BlockSpec`` and
``program_id``. Kernel modules import them from here, never from Pallas directly.
"""

from jax.experimental import pallas as _pl

pallas_call = _pl.pallas_call
BlockSpec = _pl.BlockSpec
program_id = _pl.program_id

__all__ = ["BlockSpec", "pallas_call", "program_id"]
