"""Every package the training image's Dockerfile installs with pip is pinned, and the pin exists on PyPI
as a wheel the runtime image can install: CPython 3.11 on x86_64 glibc 2.35 (PyTorch's images install
Python 3.11 with conda on Ubuntu 22.04: pytorch/pytorch:Dockerfile@01343dcd, `ARG PYTHON_VERSION=3.11`,
`BASE_IMAGE=ubuntu:22.04`; the -runtime image's Python is /opt/conda/bin/python).

The index is read as pip reads it (the JSON simple API, PEP 691; wheel tags, Requires-Python and yanked
files with `packaging`, the library pip vendors for the same decisions). PyPI is reachable from CI and
from the build machine; where it is not, the resolution test is skipped and says so, except under CI
(`CI` set), where an unreachable index is a failure."""

from __future__ import annotations

import json
import os
import shlex
import socket
import urllib.request

import pytest
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from tests.conftest import ROOT
from tests.dockerfile_scope import expanded_runs

DOCKERFILE = ROOT / "images" / "training" / "Dockerfile"
UNSCOPED = ROOT / "tests" / "fixtures" / "Dockerfile.unscoped-xgboost"
INDEX = "https://pypi.org/simple/"
PYTHON = (3, 11)
GLIBC = (2, 35)  # Ubuntu 22.04


def _platforms() -> list[str]:
    manylinux = [f"manylinux_2_{minor}_x86_64" for minor in range(GLIBC[1], 16, -1)]
    return [*manylinux, "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]


SUPPORTED: frozenset[Tag] = frozenset(
    [*cpython_tags(PYTHON, platforms=_platforms()), *compatible_tags(PYTHON, "cp311", platforms=_platforms())]
)


def pip_requirements(text: str) -> list[tuple[int, str]]:
    """(line, requirement) of every package a `pip install` of the Dockerfile names, ARGs substituted."""
    found = []
    for line, command in expanded_runs(text):
        for part in command.split("&&"):
            words = shlex.split(part)
            if "pip" not in [w.rsplit("/", 1)[-1] for w in words[:3]] or "install" not in words:
                continue
            after = words[words.index("install") + 1 :]
            found.extend((line, w) for w in after if not w.startswith("-"))
    return found


def _unpinned(text: str) -> list[str]:
    bad = []
    for line, spec in pip_requirements(text):
        try:
            requirement = Requirement(spec)
        except InvalidRequirement:
            bad.append(f"line {line}: {spec!r} is not a requirement")
            continue
        pins = [s for s in requirement.specifier if s.operator == "==" and "*" not in s.version]
        if len(pins) != 1:
            bad.append(f"line {line}: {spec!r} is not pinned to one version")
    return bad


def test_every_pip_install_of_the_image_names_exact_pins():
    assert pip_requirements(DOCKERFILE.read_text()), "the Dockerfile installs nothing with pip?"
    assert _unpinned(DOCKERFILE.read_text()) == []


def test_the_dockerfile_whose_runtime_stage_lacked_the_xgboost_arg_installs_an_unpinned_package():
    assert _unpinned(UNSCOPED.read_text()) == ["line 122: 'xgboost==${XGBOOST_VERSION}' is not a requirement"]


def _reachable() -> bool:
    try:
        with socket.create_connection(("pypi.org", 443), timeout=3):
            return True
    except OSError:
        return False


def installable(name: str, version: str) -> str | None:
    """The file pip would take for name==version on the image's Python and platform, or None."""
    request = urllib.request.Request(
        INDEX + canonicalize_name(name) + "/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=20) as response:
        files = json.load(response)["files"]
    python = Version(".".join(map(str, PYTHON)))
    for file in files:
        if not file["filename"].endswith(".whl") or file.get("yanked"):
            continue
        wheel_name, wheel_version, _, tags = parse_wheel_filename(file["filename"])
        if wheel_name != canonicalize_name(name) or wheel_version != Version(version):
            continue
        if file.get("requires-python") and python not in SpecifierSet(file["requires-python"]):
            continue
        if tags & SUPPORTED:
            return file["filename"]
    return None


def test_every_pinned_package_resolves_on_pypi_for_the_images_python_and_platform():
    if not _reachable():
        if os.environ.get("CI"):
            pytest.fail("pypi.org:443 is unreachable from CI: the image's pins cannot be resolved")
        pytest.skip("pypi.org:443 is unreachable (offline): the image's pip pins are resolved in CI instead")
    missing = []
    for line, spec in pip_requirements(DOCKERFILE.read_text()):
        requirement = Requirement(spec)
        (pin,) = requirement.specifier
        if installable(requirement.name, pin.version) is None:
            missing.append(f"line {line}: {spec} has no wheel for CPython 3.11 on manylinux x86_64 on PyPI")
    assert missing == []


def test_a_version_pypi_does_not_have_is_reported_unresolvable():
    if not _reachable():
        pytest.skip("pypi.org:443 is unreachable (offline)")
    assert installable("xgboost", "3.2.0") is not None
    assert installable("xgboost", "3.2.99") is None
