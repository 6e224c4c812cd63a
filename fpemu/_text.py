"""`text_table`: the one renderer of fpemu's tables, as plain-text columns or as Markdown.

The failure messages of the assertions, the sweep and compare reports, `fpemu.stats_summary`, the
``fpemu`` command line and the benchmark summaries all lay out their tables here. It sits at the
bottom of the layers (it imports nothing of fpemu) and is public as `fpemu.testing.text_table`.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["report_table", "text_table"]

_ALIGNMENTS = "lr"


def text_table(
    rows: Sequence[Sequence[object]],
    header: Sequence[object] | None = None,
    *,
    align: str = "",
    markdown: bool = False,
    rule: bool = True,
    indent: str = "",
) -> str:
    """Lay out rows as a table: plain-text columns (the default) or a Markdown table.

    Plain text: each column is padded to its widest cell and columns are separated by two spaces;
    the header, if any, is underlined with dashes (``rule=False``: not underlined); every line starts
    with ``indent`` and has no trailing spaces. Rows may have fewer cells than others.

    Markdown: ``| a | b |`` lines, unpadded, under the header and its alignment line (``|---|---:|``).
    Cells are written as they are (a ``|`` inside a cell is not escaped).

    Args:
      rows: The cells, one sequence per row; each cell is converted with ``str``.
      header: The column titles; None for a headerless (key/value) table, plain text only.
      align: One ``"l"`` (left) or ``"r"`` (right) per column; missing columns are left-aligned.
      markdown: Write a Markdown table (needs a header).
      rule: Plain text: underline the header with dashes.
      indent: Plain text: a prefix for every line.

    Returns:
      The table's lines joined by newlines (no final newline).

    Raises:
      ValueError: for an ``align`` character other than ``"l"``/``"r"``, or a Markdown table without
        a header.

    Example:
      >>> print(text_table([["e4m3fn", 448], ["e5m2", 57344]], ["format", "max"], align="lr"))
      format    max
      ------  -----
      e4m3fn    448
      e5m2    57344
      >>> print(text_table([["e4m3fn", 448], ["e5m2", 57344]], ["format", "max"], align="lr", markdown=True))
      | format | max |
      |---|---:|
      | e4m3fn | 448 |
      | e5m2 | 57344 |
    """
    if not isinstance(align, str) or any(a not in _ALIGNMENTS for a in align):
        raise ValueError(f"align must be a string of 'l' and 'r' (one per column), got {align!r}")
    cells = [[str(cell) for cell in row] for row in rows]
    titles = None if header is None else [str(title) for title in header]
    if markdown:
        if titles is None:
            raise ValueError("a Markdown table needs a header")
        ruler = "".join("---:|" if i < len(align) and align[i] == "r" else "---|" for i in range(len(titles)))
        lines = [_markdown_line(titles), "|" + ruler]
        return "\n".join(lines + [_markdown_line(row) for row in cells])
    if titles is not None:
        cells.insert(0, titles)
    ncols = max((len(row) for row in cells), default=0)
    widths = [max((len(row[i]) for row in cells if i < len(row)), default=0) for i in range(ncols)]

    def line(row: list[str]) -> str:
        padded = [
            cell.rjust(widths[i]) if i < len(align) and align[i] == "r" else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        return indent + "  ".join(padded).rstrip()

    lines = [line(row) for row in cells]
    if titles is not None and rule:
        lines.insert(1, indent + "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _markdown_line(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def report_table(rows: Sequence[Sequence[object]], header: Sequence[object]) -> str:
    """The table of fpemu.testing's reports and failure messages: indented two spaces, header not underlined."""
    return text_table(rows, header, rule=False, indent="  ")
