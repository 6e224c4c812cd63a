"""The catalogue of JAX's primitives: how `fpemu.emulate` and `fpemu.scalify` treat each one.

Every primitive that a supported JAX release defines (jax 0.10.0 to 0.12.x: the README's window) has
one row here, with its *kind* for each transform. The two rule registries read it: a rule is
registered under the kind its row gives (`check_kind` refuses any other), `Policy.overrides` accepts
the names whose results `emulate` rounds, and docs/emulate.md's rule table lists exactly these names
(tests/jax/test_primitives.py checks both, and walks every primitive the installed JAX defines: a new
one fails that test until it has a row here). A name that the installed JAX lacks is kept for the
releases that have it.

Kinds under `emulate` (`EMULATE_KINDS`): ``rounded`` (bind, round the floating-point results),
``exact`` (bind: the results are input values), ``dot``, ``conv``, ``convert``, ``inline`` (the body
interpreted in place), ``call`` (nested ``jit``), ``control`` (a combinator rebuilt around the
emulated body), ``bound`` (no floating-point result: bound unchanged), ``unsupported`` (no rule: a
``NotImplementedError`` naming it, unless ``Policy(passthrough_unknown=True)`` or ``exclude``) and
``kernel`` (only found inside a kernel's body, which neither transform enters; treated as
``unsupported``).

Kinds under `scalify` (`SCALIFY_KINDS`): the scale rules (``rule``, ``same scale``, ``max scale``,
``data``, ``unscaled values``), the fallback ``unscale`` (unscale, compute, scale 1), the bodies
(``inline``, ``call``, ``control``, ``custom derivative``), ``callback``, ``plain`` (no
floating-point operand, so never scaled), ``unsupported`` and ``kernel``.

What differs across releases (docs/emulate.md says it to users): ``one_minus_square`` (jax >=
0.11.2: the derivative of ``tanh``) and ``polynomial`` (jax >= 0.12: the derivatives of ``erf`` and
exact ``gelu``, ``sinc``) are single primitives that `emulate` rounds once, where older releases
emitted ``sub``/``mul`` chains that it rounds at every step; ``eval_jaxpr`` (jax >= 0.11.1) replaces
``closed_call`` in ``jax.checkpoint``'s partial evaluation; ``tile`` and ``stage`` exist from jax
0.12; a few primitives lost a ``_p`` suffix in their names in jax 0.12 (``reduced_vary_cast_p``,
``debug_barrier_p``...).
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

__all__ = [
    "CATALOGUE",
    "EMULATE_KINDS",
    "SCALIFY_KINDS",
    "Treatment",
    "check_kind",
    "names_of",
]

#: The kinds of `emulate`, each with what it does (docs/emulate.md's rule table, one row each).
EMULATE_KINDS: MappingProxyType[str, str] = MappingProxyType({
    "rounded": "bind, then round every floating-point result to the policy's format",
    "exact": "bind unchanged: the results are input values (or their negations)",
    "dot": "fpemu.dot_general under the policy's DotPolicy or training recipe",
    "conv": "fpemu.conv_general_dilated under the policy's DotPolicy or training recipe",
    "convert": "convert_element_type: rounded where it creates new values",
    "inline": "the body interpreted in place",
    "call": "nested jit: jax.jit around the emulated body",
    "control": "the public combinator rebuilt around the emulated body",
    "bound": "no floating-point result: bound unchanged",
    "unsupported": "no rule: NotImplementedError, unless passthrough_unknown=True or excluded",
    "kernel": "only inside a kernel's body, which emulate does not enter (as unsupported)",
})  # fmt: skip

#: The kinds of `scalify` (``jsa.core.rule_table()``), each with what it does.
SCALIFY_KINDS: MappingProxyType[str, str] = MappingProxyType({
    "rule": "a scale rule (its formula in the table of docs/scalify.md)",
    "same scale": "the data transformed, the scale unchanged",
    "max scale": "operands re-scaled to the largest scale",
    "data": "computed on the data: an unscaled result (a positive scale changes no order)",
    "unscaled values": "computed on the unscaled values: an unscaled result",
    "unscale": "fallback: unscale, compute, scale 1",
    "inline": "body scalified in place",
    "call": "nested jit around the scalified body",
    "control": "combinator around the scalified body",
    "custom derivative": "scalified primal, original derivative rule (scalified)",
    "callback": "callback sees ScaledArrays",
    "plain": "no floating-point operand, so never scaled: bound unchanged",
    "unsupported": "no rule: NotImplementedError naming the primitive",
    "kernel": "only inside a kernel's body, which scalify does not enter (as unsupported)",
})  # fmt: skip


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Treatment:
    """How the two transforms treat one primitive: its kind under each."""

    emulate: str
    scalify: str


# (emulate kind, scalify kind, names). Groups of the same pair of kinds stay apart where they say
# different things; docs/emulate.md's rule table uses the same groups in its prose.
_ROWS: tuple[tuple[str, str, str], ...] = (
    # -- rounded: new values in the dtype, then rounded ----------------------------------------------
    # arithmetic with a scale law
    ("rounded", "rule", "add add_any sub mul div integer_pow square sqrt rsqrt log reduce_sum cumsum reduce_prod"),
    # arithmetic without one (one_minus_square: jax >= 0.11.2, polynomial: jax >= 0.12)
    ("rounded", "unscale", "rem pow cbrt nextafter floor ceil round one_minus_square polynomial"),
    # transcendental and special functions
    ("rounded", "unscale", """
        exp exp2 expm1 log1p log2 tanh logistic sin cos tan asin acos atan atan2 sinh cosh asinh acosh atanh
        erf erfc erf_inv lgamma digamma igamma igammac igamma_grad_a random_gamma_grad polygamma zeta
        bessel_i0e bessel_i1e regularized_incomplete_beta
    """),
    # reductions, scans and scatters that compute: their result is rounded, partial sums are not
    ("rounded", "unscale", "reduce cumprod cumlogsumexp reduce_window select_and_scatter_add scatter-mul ragged_dot_general"),
    ("rounded", "same scale", "reduce_window_sum reduce_precision"),
    ("rounded", "max scale", "scatter-add scatter-sub"),
    # collectives that add
    ("rounded", "unscale", "psum psum_invariant reduce_scatter unreduced_psum unreduced_reduce_scatter"),
    # new values from non-float data, reinterpretation
    ("rounded", "unscale", "iota bitcast_convert_type rng_uniform random_gamma real imag"),
    # linear algebra: computed at the dtype's precision, results rounded
    ("rounded", "unscale", """
        cholesky cholesky_update triangular_solve eigh eig svd qr householder_product geqrf geqp3 ormqr lu
        schur hessenberg tridiagonal tridiagonal_solve symmetric_product fft
    """),
    # host callbacks: the host function is not emulated, its results are rounded
    ("rounded", "unscale", "pure_callback io_callback"),
    # -- exact: the results are input values (or their negations) -----------------------------------
    # sign and selection
    ("exact", "rule", "max min clamp select_n sign"),
    ("exact", "same scale", "neg abs reduce_max reduce_min cummax cummin reduce_window_max reduce_window_min sort top_k"),
    ("exact", "max scale", "scatter scatter-min scatter-max dynamic_update_slice"),
    ("exact", "data", "argmax argmin"),
    ("exact", "unscale", "approx_top_k select_and_gather_add pmax pmin unreduced_pmax unreduced_pmin"),
    # data movement
    ("exact", "rule", "concatenate stack pad"),
    ("exact", "same scale", """
        reshape broadcast_in_dim transpose squeeze slice dynamic_slice gather rev split unstack copy tile
    """),
    ("exact", "unscale", """
        empty empty2 zeros_like complex conj all_gather all_gather_invariant all_gather_reduced all_to_all
        ragged_all_to_all ppermute pbroadcast pvary preduced reduced_vary_cast vary_unreduced_cast tie
        reduced_vary_cast_p vary_unreduced_cast_p
    """),
    # identities and annotations
    ("exact", "same scale", "stop_gradient optimization_barrier sharding_constraint device_put reshard layout_constraint"),
    ("exact", "same scale", "stage"),
    ("exact", "unscale", "name shard_alike"),
    # -- dots, convolutions, casts ----------------------------------------------------------------------
    ("dot", "rule", "dot_general"),
    ("conv", "rule", "conv_general_dilated"),
    ("convert", "rule", "convert_element_type"),
    # -- bodies -----------------------------------------------------------------------------------------
    ("inline", "inline", "call closed_call eval_jaxpr composite custom_vmap_call"),
    ("call", "call", "jit"),
    ("control", "control", "cond while scan remat2"),
    ("control", "custom derivative", "custom_jvp_call custom_vjp_call"),
    ("control", "unscale", "custom_linear_solve shard_map"),
    # -- no floating-point result ----------------------------------------------------------------------
    ("bound", "unscaled values", "eq ne lt le gt ge"),
    ("bound", "unscale", "eq_to lt_to le_to"),  # total-order comparisons (sort's comparators)
    ("bound", "data", "is_finite"),
    ("bound", "plain", """
        and or not xor shift_left shift_right_logical shift_right_arithmetic population_count clz mulhi
        reduce_and reduce_or reduce_xor
    """),
    # random bits and keys
    ("bound", "plain", """
        random_seed random_bits random_split random_fold_in random_wrap random_unwrap random_clone
        threefry2x32 threefry4x32 philox2x32 philox4x32 iota_2x32_shape rng_bit_generator
    """),
    # indices, tokens, shapes, devices
    ("bound", "plain", """
        lu_pivots_to_permutation axis_index platform_index create_token after_all dim_as_value dimension_size
        shape_assertion to_edtype from_edtype
    """),
    # effects without results
    ("bound", "callback", "debug_callback"),
    ("bound", "unscale", "debug_print inspect_sharding dce_sink check"),
    # -- unsupported: computations fpemu does not enter, or state it does not model -----------------------
    # kernels, foreign functions and fused library calls
    ("unsupported", "unsupported", """
        pallas_call mpmd_map tpu_custom_call mosaic_gpu_p ffi_call buffer_callback cudnn_fusion custom_fusion
        fusible fused_call scaled_dot scaled_matmul scaled_matmul_wrapper dot_product_attention_fwd dot_product_attention_bwd
        dot_product_attention_fwd_wrapper dot_product_attention_bwd_wrapper dot_product_attention_fp8_fwd
        dot_product_attention_fp8_bwd dot_product_attention_fp8_fwd_wrapper dot_product_attention_fp8_bwd_wrapper
    """),
    # calls and transformations with semantics of their own
    ("unsupported", "unsupported", """
        custom_partitioning custom_lin custom_jvp_call_jaxpr linear_call remat_opt unreachable
        compute_on xla_metadata_call xla_metadata_value call_exported call_hi_primitive
        call_hi_primitive_linearized program_order select_and_scatter global_array_to_host_local_array
        host_local_array_to_global_array
    """),
    # mutable state: references and boxes
    ("unsupported", "unsupported", """
        new_ref empty_ref free_ref freeze get swap addupdate accum_grad_in_ref create_linear pin unpin
        broadcast_to with_memory_space_constraint run_state new_box box_get box_set new_log log_extend log_read
    """),
    # asynchronous and point-to-point collectives
    ("unsupported", "unsupported", """
        all_gather_start all_gather_done all_gather_reduced_start all_to_all_start all_to_all_done
        ppermute_start ppermute_done psum_start psum_done psum_invariant_start pbroadcast_start pbroadcast_done
        pbroadcast_dynamic reduce_scatter_start reduce_scatter_done unreduced_psum_start
        unreduced_reduce_scatter_start psend precv
    """),
    # sparse arrays (jax.experimental.sparse)
    ("unsupported", "unsupported", """
        bcoo_dot_general bcoo_dot_general_sampled bcoo_extract bcoo_fromdense bcoo_sort_indices
        bcoo_spdot_general bcoo_sum_duplicates bcoo_todense bcoo_transpose bcsr_dot_general bcsr_extract
        bcsr_fromdense bcsr_todense coo_fromdense coo_matmat coo_matvec coo_spmm coo_spmv coo_todense
        csr_fromdense csr_matmat csr_matvec csr_spmm csr_spmv csr_todense todense spsolve
    """),
    # recurrent layers of cuDNN (jax.experimental.rnn)
    ("unsupported", "unsupported", "rnn_fwd rnn_bwd"),
    # -- kernel bodies: Pallas (Triton, Mosaic GPU, Mosaic TPU and SparseCore) and JAX's thunks ------------
    ("kernel", "kernel", """
        _copysign add_dependency all_reduce_ffs all_reduce_population_count assert_consumed_value
        async_copy_scales_to_tmem async_copy_smem_to_tmem async_copy_sparse_metadata_to_tmem async_load
        async_prefetch async_store_smem async_store_tmem atomic_cas atomic_rmw barrier barrier_arrive
        barrier_arrive_and_wait barrier_test barrier_wait bitcast commit_group commit_smem commit_tmem consume
        conv copy_gmem_to_smem copy_smem_to_gmem core_map debug_barrier debug_barrier_p delay dma_start
        dma_wait einshape_lo elementwise_inline_asm elementwise_inline_asm_p emit_pipeline get_barrier_semaphore
        get_global griddepcontrol_launch_dependents griddepcontrol_wait has_memory_space inline_mgpu
        inline_mgpu_p jaxpr_call layout_cast load masked_cummax masked_cummin masked_cumsum masked_load
        masked_sort masked_swap matmul_acc_lhs matmul_lhs_fifo matmul_pop matmul_pop_fifo matmul_push_rhs
        max_contiguous mgpu_atomic_store mma mosaic_gpu_reduce_max mosaic_gpu_reduce_min mosaic_gpu_reduce_prod
        mosaic_gpu_reduce_sum multimem_load_reduce multimem_store multiple_of num_programs pack pack_dtype
        pack_elementwise parallel_loop pipeline_body print_layout prng_join prng_random_bits prng_seed
        prng_split program_id query_cluster_cancel reciprocal relayout remove_memory_space roll run_scoped
        sc_fetch_and_add scan_count semaphore_read semaphore_signal semaphore_signal_multicast
        semaphore_signal_parallel semaphore_wait set_max_registers set_max_registers_p stochastic_round store
        tcgen05_commit_arrive tcgen05_mma trace_value try_cluster_cancel unique unpack unpack_dtype
        unpack_elementwise wait_gmem_to_smem wait_load_tmem wait_smem_to_gmem wgmma wgmma_accumulator_deref
        wgmma_accumulator_deref_p wgmma_accumulator_store wgmma_accumulator_store_p wgmma_ref wgmma_wait
    """),
    ("kernel", "kernel", """
        thunky.all_gather thunky.all_reduce thunky.all_to_all thunky.async_done thunky.async_start
        thunky.call_jax thunky.call_thunky_nested thunky.collective_group thunky.collective_permute thunky.cond
        thunky.copy thunky.custom_call thunky.inline_constant thunky.memset thunky.memzero thunky.ptx_kernel
        thunky.reduce_scatter thunky.while
    """),
)  # fmt: skip


def _build() -> dict[str, Treatment]:
    table: dict[str, Treatment] = {}
    for emulate, scalify, names in _ROWS:
        if emulate not in EMULATE_KINDS or scalify not in SCALIFY_KINDS:
            raise ValueError(f"unknown kind in the primitive catalogue: {emulate!r}, {scalify!r}")
        for name in names.split():
            if name in table:
                raise ValueError(f"the primitive {name!r} has two rows in the primitive catalogue")
            table[name] = Treatment(emulate=emulate, scalify=scalify)
    return dict(sorted(table.items()))


#: primitive name -> `Treatment`, for every primitive of every supported JAX release.
CATALOGUE: MappingProxyType[str, Treatment] = MappingProxyType(_build())


def names_of(transform: str, *kinds: str) -> tuple[str, ...]:
    """The primitives whose kind under ``transform`` (``"emulate"`` or ``"scalify"``) is one of ``kinds``."""
    return tuple(name for name, treatment in CATALOGUE.items() if getattr(treatment, transform) in kinds)


def check_kind(transform: str, name: str, kind: str) -> None:
    """Refuse a rule registered under another kind than the catalogue's (or for a primitive it lacks)."""
    treatment = CATALOGUE.get(name)
    if treatment is None:
        raise ValueError(f"the primitive {name!r} has no row in the primitive catalogue (fpemu/_jax/primitives.py)")
    listed = getattr(treatment, transform)
    if listed != kind:
        raise ValueError(
            f"the {transform} rule of {name!r} is registered as {kind!r}, but fpemu/_jax/primitives.py lists it as {listed!r}"
        )
