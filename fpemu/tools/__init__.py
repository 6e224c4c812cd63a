"""The tools built on fpemu's public API: the ``fpemu`` command line and what it runs.

- `fpemu.tools.cli`: the parser and ``main`` of ``fpemu`` (``python -m fpemu``); its commands are in
  `fpemu.tools.commands`, the exact rendering of numbers and codes in `fpemu.tools.numbers`.
- `fpemu.tools.measure`: the ``bench`` and ``plot`` commands (their options and handlers), with
  `fpemu.tools.choices` (option values and their errors) and `fpemu.tools.data` (the benchmark's
  distributions: Gaussian, Student-t, outlier channels, and ``.npy`` files).
- `fpemu.tools.bench`: the timing engine and the representative subset behind ``fpemu bench``.
- `fpemu.tools.sweep`: ``fpemu sweep``, the training recipes' compile and step times on the small models
  of `fpemu.tools.models`.
- `fpemu.tools.accuracy`: the error of quantized matmuls against a float64 reference (docs/accuracy.md);
  `fpemu.tools.rounding`: the rounding error per binade of each format.
- `fpemu.tools.plot`: the pictures of ``fpemu plot`` (needs matplotlib, imported on first use).

Nothing is imported here: ``import fpemu.tools.cli`` loads what the command line needs, and no module of
the library imports the tools.
"""
