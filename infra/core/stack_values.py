"""What a stack file's values are before the config model sees them, with PyYAML's and the
standard library's help only (the CI stack list runs with PyYAML alone: infra/offline/stacks.py):
a problem with a setting (`Problem`, named by its full key), and an encrypted value as the
offline commands see it (`secret_placeholder`).

An encrypted (`secure:`) value is unknown offline (no secrets provider), but its ciphertext is
known: the placeholder carries a digest of it, so two plans of the same stack file show the same
placeholder, and a changed ciphertext (`pulumi config set --secret` again) shows as a changed value.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

Loc = tuple[str | int, ...]  # a path of stack-file keys and list indexes
KEY_SHOWN = 100  # a key longer than this is cut in messages (a key of a megabyte is named, not printed)


@dataclass(frozen=True)
class Problem:
    """One wrong setting: where (`loc`, the path of stack-file keys and list indexes, the first
    one a full key) and what is wrong."""

    loc: tuple[str | int, ...]
    message: str
    line: int | None = None  # where in the stack file, when the reader knows better than the key
    source: str = ""  # the file the keys are of, named whole before them (a job file's path: `JOB.yaml: team`)

    @property
    def key(self) -> str:
        where = terminal_safe(self.source) if self.source else ""
        if not self.loc:
            return where
        return f"{where}: {key_of(self.loc)}" if where else key_of(self.loc)


def key_of(loc: tuple[str | int, ...]) -> str:
    """`("higgsfield:gpuPools", 1, "availabilityZone")` -> `higgsfield:gpuPools[1].availabilityZone`;
    each key cut to KEY_SHOWN characters and its control characters escaped (`terminal_safe`)."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part != "[key]":  # pydantic's marker for "the key of this map entry"
            part = (
                str(part)
                if len(str(part)) <= KEY_SHOWN
                else f"{str(part)[:KEY_SHOWN]}...({len(str(part)):,} characters)"
            )
            part = (
                terminal_safe(part) if part.strip() == part and part else repr(part)
            )  # an empty or spaced key, visibly
            text += f".{part}" if text else part
    return text


LINE_SHOWN = 2000  # an error line longer than this is cut (no value is echoed whole)


def terminal_safe(text: str, limit: int = LINE_SHOWN) -> str:
    """`text` fit for a terminal: control and other non-printable characters (an escape sequence, a
    carriage return, a bidirectional override) written as Python escapes (`\\x1b`), cut to `limit`."""
    if not text.isprintable():
        text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


# What an encrypted (`secure:`) value is to a reader without the stack's secrets provider: the
# offline plan shows it as this (with the ciphertext's digest) and never validates it as the value.
UNKNOWN_SECRET = "[secret: encrypted in the stack file, unknown offline]"
_SECRET_PREFIX = UNKNOWN_SECRET[:-1]


def secret_placeholder(ciphertext: str) -> str:
    """The offline stand-in for the encrypted value `ciphertext`: equal for equal ciphertexts."""
    digest = hashlib.sha256(ciphertext.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{_SECRET_PREFIX}; ciphertext {digest}]"


def is_secret(value: Any) -> bool:
    """Whether `value` is an encrypted value's offline stand-in."""
    return isinstance(value, str) and value.startswith(_SECRET_PREFIX)


def secret_leaves(value: Any, loc: tuple[str | int, ...] = ()) -> dict[tuple[str | int, ...], str]:
    """Where in `value` (a setting's value, lists and maps) encrypted values sit: loc -> placeholder."""
    found: dict[tuple[str | int, ...], str] = {}
    todo: list[tuple[tuple[str | int, ...], Any]] = [(loc, value)]
    while todo:
        where, item = todo.pop()
        if is_secret(item):
            found[where] = item
        elif isinstance(item, dict):
            todo += [((*where, str(k)), v) for k, v in item.items()]
        elif isinstance(item, (list, tuple)):
            todo += [((*where, i), v) for i, v in enumerate(item)]
    return found


def without_secrets(value: Any, loc: tuple[str | int, ...] = ()) -> tuple[Any, dict[Loc, Loc]]:
    """`value` with every encrypted value left out (a map's key dropped: its default stands in; a
    list's item dropped), and where each item of a shortened list was written (its loc in the
    result -> its loc as written), so a problem with a plaintext neighbour names it as written."""
    moved: dict[Loc, Loc] = {}

    def strip(item: Any, new: Loc, written: Loc) -> Any:
        if new != written:
            moved[new] = written
        if isinstance(item, dict):
            return {k: strip(v, (*new, str(k)), (*written, str(k))) for k, v in item.items() if not is_secret(v)}
        if isinstance(item, list):
            kept = [(i, v) for i, v in enumerate(item) if not is_secret(v)]
            return [strip(v, (*new, j), (*written, i)) for j, (i, v) in enumerate(kept)]
        return item

    return strip(value, loc, loc), moved


def as_written(loc: tuple[str | int, ...], moved: dict[Loc, Loc]) -> tuple[str | int, ...]:
    """A loc in `without_secrets`' result as the stack file wrote it."""
    for n in range(len(loc), 0, -1):
        if loc[:n] in moved:
            return moved[loc[:n]] + loc[n:]
    return loc


# Credentials recognisable in any text (an AWS access key id, a private key, a GitHub or Slack
# token), each searched in time linear in the text's length (no lookahead or nested repetition).
# Neither the config model's plaintext check nor the reader's check of a `secure:` value (a
# ciphertext is never one of these) may miss them.
CREDENTIAL_PATTERNS = (
    (re.compile(r"(AKIA|ASIA)[0-9A-Z]{16}"), "an AWS access key id"),
    (re.compile(r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----"), "a private key"),
    (re.compile(r"(ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36}|github_pat_\w{22}"), "a GitHub token"),
    (re.compile(r"xox[abprs]-[A-Za-z0-9-]{10}"), "a Slack token"),
)


def credential_in(text: str) -> str | None:
    """What credential `text` holds in plaintext, if it holds one of CREDENTIAL_PATTERNS."""
    return next((what for rx, what in CREDENTIAL_PATTERNS if rx.search(text)), None)
