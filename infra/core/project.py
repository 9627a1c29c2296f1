"""Where the project is: the folder holding Pulumi.yaml, and its stacks. No dependency beyond the
standard library: the workflows' stack matrix (infra/offline/stacks.py) runs with PyYAML alone."""

from __future__ import annotations

import os
from pathlib import Path


def find_project(start: Path | None = None) -> Path | None:
    """The folder holding Pulumi.yaml, the working directory or above; None where there is none."""
    here = (start or Path.cwd()).resolve()
    # whatever Pulumi.yaml is there (a broken link, a folder): it is refused when read, never skipped
    return next((folder for folder in [here, *here.parents] if os.path.lexists(folder / "Pulumi.yaml")), None)


def project_root(start: Path | None = None) -> Path:
    """The folder holding Pulumi.yaml: the working directory or above, else this checkout (when this
    code runs from one), else the working directory (an installed package outside any project: the
    commands then say that `higgsfield init` makes one here)."""
    found = find_project(start)
    if found is not None:
        return found
    checkout = Path(__file__).resolve().parents[2]
    return checkout if os.path.lexists(checkout / "Pulumi.yaml") else (start or Path.cwd()).resolve()


def not_a_project(root: Path) -> str | None:
    """The one-line refusal of a command run where `root` (project_root's answer) holds no Pulumi.yaml (an installed
    package in a folder of no project); None in a project, whatever form its Pulumi.yaml takes (read, and refused if
    broken, by the command)."""
    if os.path.lexists(root / "Pulumi.yaml"):
        return None
    return (
        f"no Pulumi.yaml in {root} or above: not a project; `higgsfield init STACK --region REGION --admin ARN` makes "
        "one here"
    )


def stack_names(root: Path) -> list[str]:
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in (root / "stacks").glob("Pulumi.*.yaml"))
