"""Reading compiled programs (jax-scalify's ``jax_scalify.utils``): the HLO of a lowered or compiled
function, one operation per line, without the metadata unless asked for."""

from __future__ import annotations

import dataclasses
import json
import re
import textwrap
from typing import Any

from jax.stages import Compiled, Lowered

__all__ = ["HloOperationInfo", "parse_hlo_module", "print_hlo_module"]

_METADATA = re.compile(r", metadata=\{[^}]*\}")
_BACKEND = ", backend_config="


@dataclasses.dataclass
class HloOperationInfo:
    """One line of an HLO module: the operation (``cmd``), its nesting (``indent``), its JAX metadata
    (source line...) and its backend configuration (a dict), when present."""

    cmd: str
    indent: int = 0
    metadata: str | None = None
    backend_config: dict[Any, Any] | None = None

    def as_text(self, metadata: bool = False, backend_cfg: bool = False, indent: int = 2) -> str:
        """The line, indented by ``indent`` spaces per level, with the metadata and the backend
        configuration if asked for."""
        pad = " " * (indent * self.indent)
        line = pad + self.cmd
        if metadata and self.metadata:
            line += ", " + self.metadata
        if backend_cfg and self.backend_config:
            text = "backend_cfg: " + json.dumps(self.backend_config, indent=indent)
            line += "\n" + textwrap.indent(text, pad + " " * indent)
        return line


def _parse_line(raw: str) -> HloOperationInfo:
    metadata = None
    match = _METADATA.search(raw)
    if match:
        metadata = match.group(0)[2:]
        raw = raw[: match.start()] + raw[match.end() :]
    backend = None
    at = raw.find(_BACKEND)
    if at >= 0:
        try:
            backend = json.loads(raw[at + len(_BACKEND) :])
        except json.JSONDecodeError:
            backend = None
        raw = raw[:at]
    raw = raw.rstrip()
    cmd = raw.lstrip()
    return HloOperationInfo(cmd, (len(raw) - len(cmd)) // 2, metadata, backend)


def parse_hlo_module(module: Lowered | Compiled) -> list[HloOperationInfo]:
    """The operations of the compiled HLO module of ``module`` (a ``jax.jit(f).lower(...)`` result,
    compiled first, or its ``.compile()``), one `HloOperationInfo` per line."""
    if not isinstance(module, (Lowered, Compiled)):
        raise TypeError(f"parse_hlo_module takes a jax.stages.Lowered or Compiled, got {type(module).__name__}")
    if isinstance(module, Lowered):
        module = module.compile()
    return [_parse_line(line) for line in (module.as_text() or "").split("\n")]


def print_hlo_module(
    module: Lowered | Compiled, metadata: bool = False, backend_cfg: bool = False, indent: int = 2
) -> None:
    """Print the compiled HLO of ``module`` (`parse_hlo_module`), one operation per line."""
    for op in parse_hlo_module(module):
        print(op.as_text(metadata=metadata, backend_cfg=backend_cfg, indent=indent))
