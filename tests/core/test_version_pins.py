"""A version bump is one edit in infra/core/versions.py: no other module of the program writes a pinned
version as a value.

A pinned version may appear elsewhere only as a citation of what was read at that ref
(`owner/repo:path@ref`, `owner/repo@ref`) or in a docstring; a value the program uses or prints
(a chart version, an image tag, a ref in a message or a cited-source template) is taken from
infra/core/versions.py. Files other tools read as they are (the Dockerfile's ARG defaults, the
operator's kustomization, the workflows' `uses:`) cannot import Python: tests/core/test_image_pins.py,
tests/components/test_training_plan.py and tests/delivery/test_workflows.py keep them equal to the pins."""

from __future__ import annotations

import ast
import re
from functools import cache

from infra.core import versions
from tests.conftest import ROOT

PROGRAM = ("infra", "components", "policies", "images", "examples")
# What precedes a version in a citation: owner/repo, an optional path without placeholders, '@',
# then the ref's own prefix (`cluster-autoscaler-`, `v`).
CITATION = re.compile(r"[\w.-]+/[\w.-]+(?::[^\s@{}()]*)?@[\w.-]*?v?$")


def pinned_versions() -> dict[str, str]:
    """Every version infra/core/versions.py pins, by a name that says where."""
    pins: dict[str, str] = {}
    for name, value in vars(versions).items():
        if not name.isupper() or name.startswith("_"):
            continue
        if isinstance(value, (versions.Chart, versions.ImagePart)):
            pins[name] = value.version
    pins.update({f"CLUSTER_AUTOSCALER_IMAGE[{minor}]": tag for minor, tag in versions.CLUSTER_AUTOSCALER_IMAGE.items()})
    pins.update({f"GITHUB_ACTIONS[{action}]": pin.commit for action, pin in versions.GITHUB_ACTIONS.items()})
    for name in (
        "TRAINING_OPERATOR_REF",
        "TRAINING_OPERATOR_IMAGE",
        "MPI_KUBECTL_DELIVERY_IMAGE",
        "VOLCANO_IMAGE_TAG",
        "PYTORCH_INIT_CONTAINER_IMAGE",
        "PULUMI_CLI",
        "EKS_AMI_READ",
        "NVIDIA_CONTAINER_TOOLKIT_READ",
    ):
        pins[name] = getattr(versions, name)
    return pins


@cache
def _pattern(version: str) -> re.Pattern[str]:
    """The version as a whole word (`1.15.1`, `v1.15.1`; not `1.15.10`, nor `1.35.2-20261120`, an AMI
    release that starts like an autoscaler tag)."""
    return re.compile(r"(?<![\w.])v?" + re.escape(version.removeprefix("v")) + r"(?![\w.-])")


def literal_pins(source: str, pins: dict[str, str]) -> list[tuple[int, str, str]]:
    """(line, pin name, literal) for each string constant of `source` that writes a pinned version
    other than in a citation or a docstring."""
    pins = {name: version for name, version in pins.items() if version.removeprefix("v") in source}
    if not pins:
        return []
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in docstrings:
            continue
        for name, version in pins.items():
            for match in _pattern(version).finditer(node.value):
                if not CITATION.search(node.value[: match.start()]):
                    found.append((node.lineno, name, node.value))
    return found


def test_no_module_of_the_program_writes_a_pinned_version_outside_infra_versions():
    pins, found = pinned_versions(), []
    for top in PROGRAM:
        for path in sorted((ROOT / top).rglob("*.py")):
            if path == ROOT / "infra" / "core" / "versions.py":
                continue
            found += [
                f"{path.relative_to(ROOT)}:{line}: {name} in {text!r}"
                for line, name, text in literal_pins(path.read_text(), pins)
            ]
    assert found == [], "take these from infra/core/versions.py:\n" + "\n".join(found)


def test_the_check_finds_a_hard_coded_ref_and_lets_a_citation_and_a_docstring_be():
    pins = {"VOLCANO": "1.15.1"}
    source = '''"""Read at volcano-sh/volcano@v1.15.1."""
CITED = "volcano-sh/volcano:pkg/scheduler/cache/cache.go@v1.15.1 (newDefaultAndRootQueue)"
TEMPLATE = "volcano-sh/volcano:{path}@v1.15.1"
MESSAGE = "not an action of Volcano v1.15.1"
OTHER = "v1.15.10"
'''
    assert [(line, name) for line, name, _ in literal_pins(source, pins)] == [(3, "VOLCANO"), (4, "VOLCANO")]


def test_every_pin_the_check_knows_is_a_version_of_infra_versions():
    pins = pinned_versions()
    assert pins["VOLCANO"] == versions.VOLCANO.version and pins["VOLCANO_IMAGE_TAG"] == f"v{versions.VOLCANO.version}"
    assert all(isinstance(v, str) and v for v in pins.values())
