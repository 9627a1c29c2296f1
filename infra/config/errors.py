"""Problems with a stack's settings: one line each, with the full key."""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

import pulumi
from pydantic_core import PydanticCustomError

from infra.config.base import NAMESPACE
from infra.core.stack_values import KEY_SHOWN, Problem, key_of  # noqa: F401 - defined in the bottom layer, used from here

# --- errors --------------------------------------------------------------------------------


class ConfigError(pulumi.RunError):
    """Stack settings are wrong. `key` is the full config key of the first problem (e.g.
    `higgsfield:vpcCidr`), `problems` all of them; the message has one line per problem."""

    def __init__(self, key: str, message: str, problems: list[Problem] | None = None) -> None:
        self.problems = problems or [Problem((key,), message)]
        super().__init__("\n".join(f"{p.key}: {p.message}" for p in self.problems))
        self.key = key


def file_error(source: str, message: str, loc: tuple[str | int, ...] = ()) -> ConfigError:
    """A problem of the file `source` (a job file's path, named whole), at `loc` within it when given."""
    problem = Problem(loc, message, source=source)
    return ConfigError(problem.key, message, [problem])


def _show(value: Any, limit: int = 80) -> str:
    """A value for a message, cut to about `limit` characters."""
    if isinstance(value, str):
        text = repr(value)
    else:
        try:
            text = json.dumps(value)
        except (TypeError, ValueError):
            text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def _parse_where(where: str) -> tuple[str | int, ...]:
    """`capacity.reservationId` / `instanceTypes[0]` / `[1]` / `` -> loc parts."""
    parts: list[str | int] = []
    for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", where):
        parts.append(int(index) if index else name)
    return tuple(parts)


class Problems:
    """What one validator found wrong, each relative to the object it validates (`where` is a
    path of stack-file keys: `minSize`, `capacity.reservationId`, `instanceTypes[0]`, `` for
    the object itself). `raise_any()` ends the validator with all of them at once."""

    def __init__(self) -> None:
        self.found: list[tuple[str, str]] = []

    def add(self, where: str, message: str) -> None:
        self.found.append((where, message))

    def __bool__(self) -> bool:
        return bool(self.found)

    def raise_any(self) -> None:
        if self.found:
            raise PydanticCustomError(
                "higgsfield", "{text}", {"text": "; ".join(m for _, m in self.found), "problems": list(self.found)}
            )


def _suggest(name: str, allowed: list[str]) -> str | None:
    """The allowed key `name` most likely means: close spelling, or the same key in our namespace."""
    if ":" not in name and f"{NAMESPACE}:{name}" in allowed:
        return f"{NAMESPACE}:{name}"
    close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
    if close:
        return close[0]
    short = {a.split(":", 1)[-1]: a for a in allowed}
    close = difflib.get_close_matches(name.split(":", 1)[-1], list(short), n=1, cutoff=0.75)
    return short[close[0]] if close else None


def _duplicates(problems: Problems, where: str, names: list[str]) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            problems.add(f"{where}[{i}]", f"duplicate name {name!r}")
        seen.add(name)
