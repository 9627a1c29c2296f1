"""docs/day-one-journey.md stays true: the tests it names exist, each step cites the upstream code
or AWS page that decides it, the steps follow the journey, and the upstream refs it cites are the
ones infra/core/versions.py pins. Reads files only (ast for the tests): no plan is evaluated."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from infra.core import versions

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "day-one-journey.md"

# The journey, in order: a word or phrase each step's heading must contain.
JOURNEY = (
    "bootstrap",
    "VPC, EKS control plane, managed add-ons",
    "node groups",
    "leader-election leases",
    "Server-Side Apply",
    "default queue",
    "Device plugins register",
    "scales a pool up from zero",
    "nodeadm",
    "removes the taint",
    "PodGroup is admitted and bound",
    "NCCL over EFA",
    "node is lost",
    "Resume",
    "Kubernetes minor upgrade",
)

TEST_REF = re.compile(r"tests/((?:\w+/)*test_\w+\.py)::([\w:]+)(?:\[[^\]]*\])?")
# owner/repo:path@ref, as the project cites upstream files (a line range may follow the ref)
UPSTREAM = re.compile(r"\b([A-Za-z0-9][\w.-]*/[\w.-]+):([\w./-]+)@([\w.-]+)")
AWS_DOC = re.compile(r"https://docs\.aws\.amazon\.com/\S+")


def _text() -> str:
    return DOC.read_text(encoding="utf-8")


def _steps() -> list[tuple[int, str, str]]:
    """(number, heading, body) of each `## N. heading` section (other `##` sections are not steps)."""
    sections = (re.match(r"(\d+)\. (.+)\n((?s:.*))", part) for part in re.split(r"^## ", _text(), flags=re.M))
    return [(int(m[1]), m[2], m[3]) for m in sections if m]


@cache
def _tests_in(file: str) -> frozenset[str]:
    """Test ids a pytest run would collect from tests/FILE, by name: module functions, and
    methods of Test classes as Class::method (read with ast, nothing imported or run)."""
    tree = ast.parse((ROOT / "tests" / file).read_text(encoding="utf-8"))
    found = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            found.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            found |= {
                f"{node.name}::{m.name}"
                for m in node.body
                if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name.startswith("test")
            }
    return frozenset(found)


def test_the_journey_document_exists_and_names_tests():
    assert DOC.is_file()
    assert len(TEST_REF.findall(_text())) >= len(JOURNEY)


def test_every_test_the_journey_names_exists():
    missing = []
    for file, name in TEST_REF.findall(_text()):
        if not (ROOT / "tests" / file).is_file() or name not in _tests_in(file):
            missing.append(f"tests/{file}::{name}")
    assert not missing, f"docs/day-one-journey.md names tests that do not exist: {missing}"


def test_the_steps_follow_the_journey_in_order():
    steps = _steps()
    assert [n for n, _, _ in steps] == list(range(1, len(JOURNEY) + 1))
    for (n, heading, _), expected in zip(steps, JOURNEY, strict=False):
        assert expected.lower() in heading.lower(), f"step {n} is {heading!r}; the journey expects {expected!r} there"


@pytest.mark.parametrize("step", range(1, len(JOURNEY) + 1))
def test_every_step_cites_what_decides_it_names_a_test_and_says_what_only_aws_confirms(step):
    _, heading, body = _steps()[step - 1]
    decided = next((line for line in body.split("\n- ") if line.startswith("Decided by:")), "")
    assert UPSTREAM.search(decided) or AWS_DOC.search(decided), (
        f"step {step} ({heading}) cites no owner/repo:path@ref nor AWS page"
    )
    assert TEST_REF.search(body), f"step {step} ({heading}) names no test"
    confirms = re.search(r"^- Only (AWS|a cluster) confirms: (.*(\n  .*)*)", body, flags=re.M)
    assert confirms and "`" in confirms.group(2), (
        f"step {step} ({heading}) does not say, with a command, what only AWS or a cluster confirms"
    )


def _pinned_refs() -> dict[str, str]:
    """The ref each pinned upstream repository must be cited at (infra/core/versions.py)."""
    autoscaler = versions.CLUSTER_AUTOSCALER_IMAGE[versions.KUBERNETES_DEFAULT].lstrip("v")
    efa_chart_commit = versions.EFA_DEVICE_PLUGIN.source.where.rsplit("@", 1)[1]
    return {
        "volcano-sh/volcano": f"v{versions.VOLCANO.version}",
        "kubeflow/trainer": versions.TRAINING_OPERATOR_REF,
        "kubernetes/autoscaler": f"cluster-autoscaler-{autoscaler}",
        "NVIDIA/k8s-device-plugin": f"v{versions.NVIDIA_DEVICE_PLUGIN.version}",
        "aws/aws-ofi-nccl": f"v{versions.AWS_OFI_NCCL.version}",
        "aws/eks-charts": efa_chart_commit,
    }


def test_upstream_code_is_cited_at_the_refs_infra_versions_pins():
    pins, wrong = _pinned_refs(), []
    for repo, path, ref in UPSTREAM.findall(_text()):
        pin = pins.get(repo)
        if pin is None:
            continue
        same = pin.startswith(ref) if re.fullmatch(r"[0-9a-f]{7,40}", ref) else ref == pin
        if not same:
            wrong.append(f"{repo}:{path}@{ref} (pinned: {pin})")
    assert not wrong, f"the journey cites code at refs we no longer pin; re-read it there: {wrong}"


def test_the_pinned_repositories_are_all_cited():
    cited = {repo for repo, _, _ in UPSTREAM.findall(_text())}
    assert set(_pinned_refs()) <= cited


def test_a_missing_test_name_would_be_caught():
    assert "test_a_missing_test_name_would_be_caught" in _tests_in("docs/test_journey_doc.py")
    assert "test_no_such_behaviour" not in _tests_in("docs/test_journey_doc.py")
    assert TEST_REF.findall("`tests/cli/test_x.py::test_y[prod]`") == [("cli/test_x.py", "test_y")]


def test_the_docs_index_links_the_journey():
    index = ROOT / "docs" / "README.md"
    if not index.is_file():
        pytest.skip("docs/README.md is not on this branch")
    assert "(day-one-journey.md)" in index.read_text(encoding="utf-8")
