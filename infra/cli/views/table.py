"""Column-aligned text tables and wrapped prose, within views.WIDTH columns."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from infra.cli.views import WIDTH


def table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = (), indent: int = 2
) -> list[str]:
    """Lines of a table whose columns are as wide as their widest cell; columns whose index is in
    `right` are right-aligned (figures), the rest left-aligned. The last column is not padded."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=False)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            str(c).rjust(w) if i in right else str(c).ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=False))
        ]
        return (" " * indent + "  ".join(parts)).rstrip()

    return [line(headers), *(line(r) for r in rows)]


def wrap(text: str, indent: int = 2, hanging: int = 4) -> list[str]:
    """`text` wrapped to WIDTH columns, continuation lines indented a little further."""
    return textwrap.wrap(
        text,
        WIDTH,
        initial_indent=" " * indent,
        subsequent_indent=" " * (indent + hanging),
        break_long_words=False,
        break_on_hyphens=False,
    )


def money(value: float | None, factor: float = 1.0, missing: str = "not priced") -> str:
    return missing if value is None else f"${value * factor:,.2f}"
