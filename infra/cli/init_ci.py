"""`higgsfield init --ci`: the GitHub workflows that preview and deploy a project of one's own.

They are this repository's `.github/workflows/{stacks,preview,deploy}.yml` (shipped in the package,
infra/core/assets.py), with one change each: the program is the installed higgsfield package, so
where this repository installs its checkout (`pip install -e .`) a project installs
`requirements/higgsfield.txt`, and the stack matrix (`python -m infra.offline.stacks`) needs the
package too. Every other step - the hash-locked runtime dependencies (requirements/deploy.txt, the
release's own), the OIDC roles, `pulumi up` with the policy pack and the stack's policy config, the
read-only `higgsfield verify` - is the same. Pulumi.yaml's runtime is `.venv` in the project folder,
where the workflows install the program, as in this repository.
"""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

from infra.config import ConfigError
from infra.core.assets import shipped, shipped_workflow

WORKFLOWS = ("stacks.yml", "preview.yml", "deploy.yml")
PACKAGE_REQUIREMENT = "requirements/higgsfield.txt"
VIRTUALENV = ".venv"  # the project's runtime (Pulumi.yaml), where the workflows install the program

_CHECKOUT_INSTALL = "          .venv/bin/pip install --no-deps --no-build-isolation --no-index -e .\n"
_PACKAGE_INSTALL = f"          .venv/bin/pip install --no-deps -r {PACKAGE_REQUIREMENT}\n"
_MATRIX_INSTALL = (
    "          python -m pip install --quiet --require-hashes --no-deps --only-binary :all: "
    "-r requirements/stacks.txt\n"
)


def _version() -> str:
    try:
        return metadata.version("higgsfield")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "0.1.0"


def package_requirement() -> tuple[str, bool]:
    """The requirement line CI installs higgsfield by, and whether it pins where this CLI came from:
    a VCS install at its commit or an archive URL (PEP 610's direct_url.json); from a local folder or
    wheel there is no address a runner can reach, so a placeholder to replace (UNREACHABLE_PLACEHOLDER)."""
    try:
        found = metadata.distribution("higgsfield").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        found = None
    url = json.loads(found) if found else {}
    address = url.get("url", "")
    if "vcs_info" in url and not address.startswith("file:"):
        vcs = url["vcs_info"]
        return f"higgsfield @ {vcs['vcs']}+{address}@{vcs['commit_id']}", True
    if "archive_info" in url and address.startswith("https://"):
        return f"higgsfield @ {address}", True
    return UNREACHABLE_PLACEHOLDER, False


# Never a bare name or `higgsfield==VERSION`: on PyPI `higgsfield` is an unrelated project, so pip
# would install someone else's package. Where no address a runner can reach is known, a placeholder
# that fails the install loudly until it is replaced.
UNREACHABLE_PLACEHOLDER = "higgsfield @ git+https://github.com/OWNER/higgsfield@TAG"


def _adapted(name: str) -> str:
    text = shipped_workflow(name).read_text()
    if name == "stacks.yml":
        old, new = (
            _MATRIX_INSTALL,
            _MATRIX_INSTALL + f"          python -m pip install --quiet --no-deps -r {PACKAGE_REQUIREMENT}\n",
        )
    else:
        old, new = _CHECKOUT_INSTALL, _PACKAGE_INSTALL
    if text.count(old) != 1:  # the shipped workflow changed: say so rather than write a broken one
        raise RuntimeError(f"{shipped_workflow(name)} no longer installs the program as init --ci adapts it")
    head = (
        f"# Written by `higgsfield init --ci` from higgsfield {_version()}'s .github/workflows/{name}; the program is\n"
        f"# the installed higgsfield package ({PACKAGE_REQUIREMENT}), not this folder.\n"
    )
    return head + text.replace(old, new)


def ci_files() -> tuple[dict[str, str], list[str]]:
    """({path in the project: text}, notes) of what `--ci` adds to a project."""
    line, pinned = package_requirement()
    files = {f".github/workflows/{name}": _adapted(name) for name in WORKFLOWS}
    for name in ("deploy.txt", "stacks.txt"):  # hash-locked: the release's runtime dependencies, PyYAML
        files[f"requirements/{name}"] = shipped(f"requirements/{name}").read_text()
    files[PACKAGE_REQUIREMENT] = (
        "# The higgsfield package the workflows install, --no-deps (its dependencies are requirements/deploy.txt,\n"
        "# hash-locked, of the same release). Written by `higgsfield init --ci` from how this CLI was installed.\n"
        "# This project is not on PyPI: `higgsfield` there is an unrelated package, so never write a bare name or\n"
        "# higgsfield==VERSION here; name a tag of your fork (git+https://...@TAG) or a wheel you host (https://).\n"
        + (
            ""
            if pinned
            else "# This CLI was installed from a local folder or wheel, which a runner cannot reach: replace OWNER\n"
            "# and TAG below (the install fails until you do).\n"
        )
        + f"{line}\n"
    )
    notes = [
        "the workflows preview (pull requests) and deploy (main) every stack with higgsfield:delivery; add it to a "
        "stack after `higgsfield bootstrap STACK` (docs/security-ci.md)",
        f"Pulumi.yaml runs the program from {VIRTUALENV}/ here, as the workflows do: python -m venv {VIRTUALENV} && "
        f"{VIRTUALENV}/bin/pip install --require-hashes --no-deps -r requirements/deploy.txt && "
        f"{VIRTUALENV}/bin/pip install --no-deps -r {PACKAGE_REQUIREMENT}",
    ]
    if not pinned:
        notes.append(
            f"{PACKAGE_REQUIREMENT} names {line}, a placeholder: this CLI was installed from a local folder or "
            "wheel, which a runner cannot reach; replace OWNER and TAG with where CI installs higgsfield from (not "
            "PyPI, where `higgsfield` is an unrelated package)"
        )
    return files, notes


def refuse_in(root: Path) -> None:
    """--ci in an existing project: refused in a checkout of higgsfield (its own workflows deploy it)
    and where Pulumi.yaml runs the program from another virtualenv than the workflows make."""
    from infra.offline.stack_file import read_project

    if (root / "infra" / "__main__.py").is_file():
        raise ConfigError(
            "--ci", "this is a checkout of higgsfield, whose .github/workflows already preview and deploy every stack"
        )
    venv = ((read_project(root / "Pulumi.yaml").get("runtime") or {}).get("options") or {}).get("virtualenv")
    if venv != VIRTUALENV:
        raise ConfigError(
            "--ci",
            f"Pulumi.yaml runs the program from {venv or 'python3 on PATH (no virtualenv)'}, which a CI runner does "
            "not have: set "
            f"runtime.options.virtualenv to {VIRTUALENV} (and ../{VIRTUALENV} in policies/PulumiPolicy.yaml), "
            "or run init --ci in an empty folder",
        )
