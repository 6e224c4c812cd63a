"""Layer 0, what fpemu knows of JAX itself: the catalogue of JAX's primitives (`primitives`: how
`fpemu.emulate` and `fpemu.scalify` treat each one), the shim for JAX's internals and the
differences between its releases (`compat`), `jnp.where`/`jnp.clip` without their per-call ``jit``
for the rounding cores (`elementwise`), and the maxima of magnitudes in the form XLA:CPU compiles
best (`reduce`). None imports any other part of fpemu."""
