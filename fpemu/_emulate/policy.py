"""`Policy`: what `fpemu.emulate` rounds, to which format, and how.

Its ``dot``/``conv`` fields take a `DotPolicy` (the ops layer's record of a dot, `fpemu._ops.dot_policy`)
or a training recipe. Both are frozen, keyword-only, hashable dataclasses (usable as ``jax.jit``
static arguments).
Every field is validated and normalised here, in ``__post_init__``: format names become
`fpemu.Format` objects (so ``"bf16"`` and ``"bfloat16"`` give equal policies), mappings become
sorted tuples of pairs, a training recipe's name (``Policy(dot="mxfp8")``) becomes its
`TrainingRecipe`, and ``round_inputs`` becomes a bool, a tuple of argument numbers, a `InputMask`
or a predicate. A bad field raises ``ValueError``/``TypeError`` quoting the field and the valid
choices.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import jax
import numpy as np

from fpemu._args import (
    bool_arg,
    exponent_ties_arg,
    format_arg,
    random_bits_arg,
    rounding_arg,
    saturate_arg,
    stochastic_variant_arg,
)
from fpemu._core.format import Format
from fpemu._core.modes import ExponentTies, Rounding, Saturation, StochasticVariant
from fpemu._core.registry import FormatLike, UnknownFormatError, get_format
from fpemu._emulate.registry import ROUNDED_PRIMITIVES
from fpemu._ops.dot_policy import DotPolicy, format_name
from fpemu._training.recipes import GEMMS, INFERENCE_RECIPES, TRAINING_RECIPES, TrainingRecipe, recipe_by_name

_ALL_RECIPES = TRAINING_RECIPES + INFERENCE_RECIPES
_RECIPE_LIST = f"training recipes: {', '.join(TRAINING_RECIPES)}; inference recipes: {', '.join(INFERENCE_RECIPES)}"


def _format_field(value: Any, field: str, *, optional: bool = True) -> Format | None:
    """A format field (a name, a dtype or a `Format`; None if ``optional``) as a `Format`. Errors
    quote the field and the value given: ``Policy.default='e9m9': unknown format ...``. A training
    recipe's name given as an operand format points to ``Policy(dot=name)``."""
    if value is None and optional:
        return None
    try:
        return format_arg(value, field if value is None else f"{field}={value!r}")
    except UnknownFormatError as err:
        if isinstance(value, str) and value in _ALL_RECIPES:
            kind = "a training" if value in TRAINING_RECIPES else "an inference"
            raise UnknownFormatError(
                f"{field}={value!r}: {value!r} is {kind} recipe, not an element format: it quantizes the operands "
                f"of GEMMs with scales. Use fpemu.Policy(dot={value!r}) ({_RECIPE_LIST})"
            ) from None
        raise err from None


def _dot_field(value: Any, field: str) -> DotPolicy | TrainingRecipe | None:
    """``Policy.dot``/``Policy.conv``: a `DotPolicy`, a `TrainingRecipe`, a recipe name (made its
    `TrainingRecipe`), or None."""
    if value is None or isinstance(value, (DotPolicy, TrainingRecipe)):
        return value
    choices = (
        f"Policy.{field} must be a fpemu.DotPolicy, a recipe name ({_RECIPE_LIST}), a fpemu.TrainingRecipe or None"
    )
    if isinstance(value, str):
        recipe = recipe_by_name(value)
        if recipe is not None:
            return recipe
        try:
            fmt = get_format(value)
        except (UnknownFormatError, TypeError):
            key = value.strip().lower()
            close = [key] if key in _ALL_RECIPES else difflib.get_close_matches(key, _ALL_RECIPES, n=3)
            hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
            if not close and key != value:
                try:
                    name = get_format(key).name
                    hint = f"did you mean fpemu.DotPolicy(lhs={name!r}, rhs={name!r})? "
                except (UnknownFormatError, TypeError):
                    pass
            exact = "recipe names are exact and lower case; " if key in _ALL_RECIPES else ""
            raise ValueError(
                f"Policy.{field}={value!r} is not a recipe: {exact}{hint}{_RECIPE_LIST} (or a fpemu.TrainingRecipe, "
                "or fpemu.DotPolicy(lhs=..., rhs=...) to round the operands to element formats such as 'e4m3fn')"
            ) from None
        raise TypeError(
            f"{choices}, got the format {fmt.name!r}: to round both operands to it, use "
            f"fpemu.DotPolicy(lhs={fmt.name!r}, rhs={fmt.name!r})"
        )
    raise TypeError(f"{choices}, got {type(value).__name__} {value!r}")


@dataclasses.dataclass(frozen=True, slots=True)
class InputMask:
    """``Policy.round_inputs`` given as a pytree of bools: a prefix of the positional arguments
    (``(True, {"w": True, "b": False}, False)``), flattened so that the policy stays hashable.
    Each bool covers every array leaf of the argument subtree it sits on."""

    treedef: Any
    leaves: tuple[bool, ...]

    def __repr__(self) -> str:
        return repr(jax.tree_util.tree_unflatten(self.treedef, self.leaves))


RoundInputs = bool | tuple[int, ...] | InputMask | Callable[..., bool]
_ROUND_INPUTS_CHOICES = (
    "True (every argument), False (none), argument numbers (an int or a tuple of ints: those positional "
    "arguments), a pytree of bools (a prefix of the positional arguments) or a predicate "
    "predicate(path, leaf) -> bool (path: the leaf's JAX key path in (args, kwargs))"
)


def _round_inputs_field(value: Any, field: str = "Policy.round_inputs") -> RoundInputs:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, InputMask) or callable(value):
        return value
    if isinstance(value, (int, np.integer)):
        value = (value,)
    if isinstance(value, (tuple, list)) and not value:
        return ()  # no argument numbers: no argument is rounded (closed-over arrays still are)
    leaves, treedef = jax.tree_util.tree_flatten(value)
    if (
        isinstance(value, (tuple, list))
        and value
        and all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in value)
    ):
        if any(v < 0 for v in value):
            raise ValueError(f"{field}: argument numbers must be >= 0, got {tuple(value)!r}")
        return tuple(sorted({int(v) for v in value}))
    if isinstance(value, (tuple, list, dict)) and leaves and all(isinstance(v, (bool, np.bool_)) for v in leaves):
        return InputMask(treedef, tuple(bool(v) for v in leaves))
    raise TypeError(f"{field} must be {_ROUND_INPUTS_CHOICES}; got {type(value).__name__} {value!r}")


# Format fields are typed as what users may pass (`FormatLike`); __post_init__ normalises them to
# `Format` (or None), and readers cast to the normalised type. ``Policy.overrides`` becomes:
_Overrides = tuple[tuple[str, Format | None], ...]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Policy:
    """What `fpemu.emulate` rounds, to which format, and how.

    Fields come in three groups, as in qwix: *what to round to* (``default``, ``overrides``,
    ``dot``, ``conv``), *how to round* (``rounding``, ``saturate``, ``subnormals``,
    ``random_bits``, ``stochastic_variant``, ``exponent_ties``: the options of `fpemu.quantize`,
    used by every rounding emulate does, DotPolicy dots included; a training recipe's quantizers
    have their own) and *where* (``exclude``, ``round_inputs``, ``passthrough_unknown``). The full contract, with the table of primitives, is in docs/emulate.md.

    A plain format (``"bf16"``, a dtype or a `Format`) given to `fpemu.emulate` means
    ``Policy(default=fmt)``. ``dot`` and ``conv`` also take a training recipe (a name of
    ``TRAINING_RECIPES`` or a `TrainingRecipe`): every forward, dgrad and wgrad GEMM of the traced
    training step is then quantized as the recipe says (docs/training.md); an inference recipe (a name
    of ``INFERENCE_RECIPES``) quantizes the forward GEMMs only (docs/inference.md). ``round_inputs`` names
    the arguments rounded on entry: True, False, argument numbers, a pytree mask of the positional
    arguments, or ``predicate(path, leaf)``.

    Example:
      >>> import fpemu
      >>> p = fpemu.Policy(default="bf16", overrides={"exp": "fp32", "reduce_sum": "float32"})
      >>> p.default.name, [(name, fmt.name) for name, fmt in p.overrides]
      ('bf16', [('exp', 'fp32'), ('reduce_sum', 'fp32')])
      >>> p == fpemu.Policy(default="bfloat16", overrides=(("reduce_sum", "fp32"), ("exp", "fp32")))
      True
      >>> fpemu.Policy(rounding="nearest")  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      ValueError: Policy.rounding must be one of 'nearest_even', ...; did you mean 'nearest_even', 'nearest_away'? got 'nearest'
      >>> r = fpemu.Policy(default="bf16", dot="mxfp8", round_inputs=(0, 2))
      >>> r.dot.name, r.dot.dgrad.lhs.format.name, r.round_inputs, r.stochastic
      ('mxfp8', 'e5m2', (0, 2), False)
      >>> s = fpemu.Policy(default="e4m3fn", saturate="sat_propagate", rounding="stochastic",
      ...                  stochastic_variant="nearest_even")
      >>> s.saturate, s.stochastic_variant, s.exponent_ties
      ('sat_propagate', 'nearest_even', 'away')
    """

    # -- what to round to (configs) -----------------------------------------------------------------
    default: FormatLike | None = None  # format of every floating-point result (None: leave results alone)
    overrides: Mapping[str, FormatLike | None] | tuple[tuple[str, Format | None], ...] = ()  # primitive -> format
    # dot_general: operand/accumulator/output formats, or a training recipe (a name from fpemu.TRAINING_RECIPES
    # or a TrainingRecipe: every forward, dgrad and wgrad GEMM quantized as it says); None: a rounded primitive
    dot: DotPolicy | TrainingRecipe | str | None = None
    conv: DotPolicy | TrainingRecipe | str | None = None  # conv_general_dilated (None: follow `dot`)
    # -- how to round -------------------------------------------------------------------------------
    rounding: Rounding = "nearest_even"
    # False: IEEE-style overflow; True: clamp overflow (and infinities) to ±max; or one of IEEE P3109's
    # saturation modes "sat_finite", "sat_propagate", "ovf_inf" (as fpemu.quantize)
    saturate: Saturation = False
    subnormals: bool = True  # False: flush subnormal results to ±0
    random_bits: int | None = None  # random bits per element for rounding="stochastic" (None: 32)
    # how stochastic roundings (Policy.rounding, a DotPolicy's accumulate_rounding) use their random bits:
    # "floor", "nearest_even", "nearest_odd", "nearest_away" (as fpemu.quantize)
    stochastic_variant: StochasticVariant = "floor"
    exponent_ties: ExponentTies = "away"  # nearest_even ties in formats without mantissa bits: "away" or "even"
    # -- where (keys) -------------------------------------------------------------------------------
    exclude: tuple[str, ...] = ()  # primitive names and named scopes left entirely alone
    # round the function's floating-point arguments to `default` on entry: True, False, argument numbers,
    # a pytree mask of the positional arguments or a predicate(path, leaf)
    round_inputs: RoundInputs | Any = True
    # which arguments hold the weights of an inference recipe's forward GEMMs (docs/inference.md): None (the
    # right operand is the weight), or argument numbers, a pytree mask or a predicate, as round_inputs
    weights: RoundInputs | Any = None
    passthrough_unknown: bool = False  # a primitive without a rule: bind it and round its results (else raise)

    def __post_init__(self) -> None:
        object.__setattr__(self, "default", _format_field(self.default, "Policy.default"))
        object.__setattr__(self, "overrides", self._overrides(self.overrides))
        for field in ("dot", "conv"):
            object.__setattr__(self, field, _dot_field(getattr(self, field), field))
        rounding_arg(self.rounding, "Policy.rounding")
        object.__setattr__(self, "round_inputs", _round_inputs_field(self.round_inputs))
        if self.weights is not None:
            object.__setattr__(self, "weights", _round_inputs_field(self.weights, "Policy.weights"))
            recipes = [r for r in (self.dot, self.conv) if isinstance(r, TrainingRecipe)]
            if not any(r.name in INFERENCE_RECIPES for r in recipes):
                raise ValueError(
                    "Policy.weights selects the arguments that hold the weights of an inference recipe's forward "
                    f"GEMMs (docs/inference.md), but dot={self.dot!r} and conv={self.conv!r} are not inference "
                    f"recipes (inference recipes: {', '.join(INFERENCE_RECIPES)})"
                )
        object.__setattr__(self, "saturate", saturate_arg(self.saturate, "Policy.saturate"))
        for field in ("subnormals", "passthrough_unknown"):
            object.__setattr__(self, field, bool_arg(getattr(self, field), f"Policy.{field}"))
        variant = stochastic_variant_arg(
            self.stochastic_variant, self.stochastic_roundings, self.rounding, "Policy.stochastic_variant"
        )
        object.__setattr__(self, "stochastic_variant", variant)
        object.__setattr__(self, "exponent_ties", exponent_ties_arg(self.exponent_ties, "Policy.exponent_ties"))
        if self.random_bits is not None:  # None stays None: the default of fpemu.quantize
            bits = random_bits_arg(self.random_bits, self.rounding == "stochastic", "Policy.random_bits", self.rounding)
            object.__setattr__(self, "random_bits", bits)
        object.__setattr__(self, "exclude", self._exclude(self.exclude))
        if self.overrides and not self.passthrough_unknown:
            unknown = [name for name, _ in cast(_Overrides, self.overrides) if name not in ROUNDED_PRIMITIVES]
            if unknown:
                raise ValueError(
                    f"Policy.overrides: {', '.join(map(repr, unknown))} "
                    f"{'is not a primitive' if len(unknown) == 1 else 'are not primitives'} whose results emulate "
                    f"rounds; valid names: {', '.join(sorted(ROUNDED_PRIMITIVES))} (or set passthrough_unknown=True to "
                    "override a primitive fpemu has no rule for)"
                )

    @staticmethod
    def _overrides(value: Any) -> _Overrides:
        if isinstance(value, Mapping):
            items = list(value.items())
        else:
            try:
                items = [tuple(item) for item in value]
            except TypeError:
                raise TypeError(
                    f"Policy.overrides must be a mapping or pairs of (primitive name, format), got {value!r}"
                ) from None
        out: dict[str, Format | None] = {}
        for item in items:
            if len(item) != 2 or not isinstance(item[0], str):
                raise TypeError(f"Policy.overrides entries must be (primitive name, format) pairs, got {item!r}")
            name, fmt = item
            if name in out:
                raise ValueError(f"Policy.overrides names {name!r} twice")
            out[name] = _format_field(fmt, f"Policy.overrides[{name!r}]")
        return tuple(sorted(out.items()))

    @staticmethod
    def _exclude(value: Any) -> tuple[str, ...]:
        names: Iterable[Any] = (value,) if isinstance(value, str) else value
        try:
            names = tuple(names)
        except TypeError:
            raise TypeError(
                f"Policy.exclude must be a string or strings (primitive or scope names), got {value!r}"
            ) from None
        for name in names:
            if not isinstance(name, str) or not name:
                raise TypeError(f"Policy.exclude entries must be non-empty strings, got {name!r}")
        return tuple(dict.fromkeys(names))

    def format_for(self, primitive: str) -> Format | None:
        """The format the results of ``primitive`` are rounded to (the override, else ``default``).

        Example:
          >>> import fpemu
          >>> p = fpemu.Policy(default="e4m3fn", overrides={"exp": "bf16", "log": None})
          >>> p.format_for("exp").name, p.format_for("mul").name, p.format_for("log")
          ('bf16', 'e4m3fn', None)
        """
        for name, fmt in cast(_Overrides, self.overrides):
            if name == primitive:
                return fmt
        return cast("Format | None", self.default)

    @property
    def stochastic(self) -> bool:
        """Whether any rounding of this policy is stochastic (then `fpemu.emulate` needs a key): the
        policy's rounding, a DotPolicy's accumulator, or a training recipe with a stochastic
        quantizer (NVFP4's gradients) or a random Hadamard transform."""
        dots = (self.dot, self.conv)
        accumulators = [d.accumulate_rounding for d in dots if isinstance(d, DotPolicy)]
        recipes = [d for d in dots if isinstance(d, TrainingRecipe)]
        return self.rounding == "stochastic" or "stochastic" in accumulators or any(map(recipe_needs_key, recipes))

    @property
    def stochastic_roundings(self) -> bool:
        """Whether a rounding that ``stochastic_variant`` governs is stochastic: the policy's rounding
        or a DotPolicy's accumulator (a training recipe's quantizers have their own rounding)."""
        dots = (self.dot, self.conv)
        accumulators = [d.accumulate_rounding for d in dots if isinstance(d, DotPolicy)]
        return self.rounding == "stochastic" or "stochastic" in accumulators

    @property
    def stateful(self) -> bool:
        """Whether a training recipe of this policy keeps amax histories (delayed scaling): then
        `fpemu.emulate` needs ``state=True`` and a state from `fpemu.init_training_state`."""
        return any(isinstance(d, TrainingRecipe) and d.stateful for d in (self.dot, self.conv))

    @property
    def conv_policy(self) -> DotPolicy | TrainingRecipe | None:
        """The `DotPolicy` or training recipe for convolutions: ``conv``, else ``dot``."""
        return cast("DotPolicy | TrainingRecipe | None", self.conv if self.conv is not None else self.dot)

    @property
    def dot_policy(self) -> DotPolicy | TrainingRecipe | None:
        """``dot``, normalised (a `DotPolicy`, a `TrainingRecipe` or None)."""
        return cast("DotPolicy | TrainingRecipe | None", self.dot)

    @property
    def has_recipe(self) -> bool:
        """Whether ``dot`` or ``conv`` is a training recipe (dots then have roles: forward, dgrad, wgrad)."""
        return isinstance(self.dot, TrainingRecipe) or isinstance(self.conv, TrainingRecipe)

    def __str__(self) -> str:
        """The fields that differ from their defaults, formats and named recipes by name: the short form
        error messages show (``repr`` lists every field).

        Example:
          >>> print(Policy(default="bfloat16", dot="mxfp8"))
          Policy(default='bf16', dot='mxfp8')
        """
        parts = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value == field.default:
                continue
            if field.name == "overrides":
                shown = _overrides_text(cast(_Overrides, value))
            elif isinstance(value, Format):
                shown = format_name(value)
            elif isinstance(value, TrainingRecipe) and recipe_by_name(value.name) == value:
                shown = repr(value.name)  # a named recipe as it is; a changed one shows in full
            else:
                shown = repr(value)
            parts.append(f"{field.name}={shown}")
        return f"Policy({', '.join(parts)})"

    def __repr__(self) -> str:
        overrides = _overrides_text(cast(_Overrides, self.overrides))
        return (
            f"Policy(default={format_name(self.default)}, overrides={overrides}, dot={self.dot!r}, conv={self.conv!r}, "
            f"rounding={self.rounding!r}, saturate={self.saturate!r}, subnormals={self.subnormals}, "
            f"random_bits={self.random_bits}, stochastic_variant={self.stochastic_variant!r}, "
            f"exponent_ties={self.exponent_ties!r}, exclude={self.exclude!r}, round_inputs={self.round_inputs}, "
            f"weights={self.weights}, passthrough_unknown={self.passthrough_unknown})"
        )


def _overrides_text(pairs: _Overrides) -> str:
    """``Policy.overrides`` as `Policy`'s ``str`` and ``repr`` show it: ``{'exp': 'fp32'}``."""
    return "{" + ", ".join(f"{name!r}: {format_name(fmt)}" for name, fmt in pairs) + "}"


def gemm_needs_key(recipe: TrainingRecipe, gemm: str) -> bool:
    """Whether the GEMM ``gemm`` of ``recipe`` draws random bits (a stochastic quantizer, or a
    Hadamard transform, whose signs come from the key)."""
    g = recipe.gemm(gemm)
    return g.hadamard is not None or any(q is not None and q.rounding == "stochastic" for q in g.quantizers)


def recipe_needs_key(recipe: TrainingRecipe) -> bool:
    """Whether any GEMM of ``recipe`` draws random bits."""
    return any(gemm_needs_key(recipe, g) for g in GEMMS)


def as_policy(policy: Policy | FormatLike) -> Policy:
    """A `Policy` from a `Policy` or a plain format (name, dtype, `Format`: ``Policy(default=fmt)``)."""
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, DotPolicy):
        raise TypeError("emulate needs a fpemu.Policy; wrap the DotPolicy: fpemu.Policy(dot=fpemu.DotPolicy(...))")
    if isinstance(policy, TrainingRecipe) or (isinstance(policy, str) and policy in _ALL_RECIPES):
        name = policy.name if isinstance(policy, TrainingRecipe) else policy
        raise TypeError(
            f"{name!r} is a recipe: it applies to dots, so give it as fpemu.Policy(dot={name!r}) "
            f"(with default='bf16' for a bf16 model around FP8 GEMMs)"
        )
    if policy is None:
        raise TypeError("policy must be a fpemu.Policy or a format (e.g. 'bf16'), got None")
    try:
        return Policy(default=policy)
    except (ValueError, TypeError) as err:
        raise type(err)(f"policy must be a fpemu.Policy or a format name/dtype/Format: {err}") from None
