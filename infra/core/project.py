"""Where the project is: the folder holding Pulumi.yaml, and its stacks. No dependency beyond the
standard library: the workflows' stack matrix (infra/offline/stacks.py) runs with PyYAML alone."""

from __future__ import annotations

import os
from pathlib import Path


def project_root(start: Path | None = None) -> Path:
    """The folder holding Pulumi.yaml: the working directory or above, else this checkout."""
    for folder in [(start or Path.cwd()).resolve(), *(start or Path.cwd()).resolve().parents]:
        if os.path.lexists(folder / "Pulumi.yaml"):  # whatever it is: a broken one is refused, never skipped
            return folder
    return Path(__file__).resolve().parents[2]


def stack_names(root: Path) -> list[str]:
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in (root / "stacks").glob("Pulumi.*.yaml"))
