"""The emulate layer: `fpemu.emulate`, `fpemu.Policy`, `fpemu.DotPolicy`, `fpemu.stats_summary`.

Modules, lowest first (each imports only the ones above it in this list):

- `registry`: the primitive names of each kind (from the catalogue, `fpemu._jax.primitives`), the
  rule table. JAX's internals and version differences come from `fpemu._jax.compat`.
- `policy`: `Policy` (its dots' `DotPolicy` is the ops layer's, `fpemu._ops.dot_policy`).
- `stats`: the range statistics of one rounding, and their summary table.
- `rounding`: one array rounded to a policy's format; the keys of rounding sites.
- `interpreter`: the context a rule sees, and the loop over a jaxpr's equations.
- `gemm_roles`: the pre-pass that classifies every dot of a training step as forward, dgrad or
  wgrad (docs/training.md).
- `gemm`: a training recipe's GEMMs (the forward dot's VJP, the backward dots, operand statistics).
- `inputs`: the function traced with its array arguments as inputs, and which of them
  ``Policy.round_inputs`` rounds.
- `training_state`: the delayed-scaling state (`fpemu.init_training_state`), and `fpemu.gemm_roles`.
- `rules_plain`, `rules_dot`, `rules_calls`, `rules_control`: the rules, by kind; importing one
  registers its rules.
- `transform`: `emulate`, which imports every rule module.
"""
