"""Layer 0, what fpemu knows of JAX itself: the catalogue of JAX's primitives (`primitives`: how
`fpemu.emulate` and `fpemu.scalify` treat each one) and the shim for JAX's internals and the
differences between its releases (`compat`). Neither imports any other part of fpemu."""
