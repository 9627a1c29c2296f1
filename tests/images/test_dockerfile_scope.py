"""The training image's Dockerfile, read the way BuildKit reads it (tests/dockerfile_scope.py): every
variable in scope where it is used, every stage a COPY --from names defined before it. The image build
itself runs in .github/workflows/image.yml (Docker is not available to the suite); that workflow also
runs BuildKit's own checks (`docker build --check`) first."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from tests.conftest import ROOT
from tests.dockerfile_scope import check, check_text, shell_variables_used

DOCKERFILE = ROOT / "images" / "training" / "Dockerfile"
# The Dockerfile as it was merged with the xgboost pin declared in the build stage only.
UNSCOPED = ROOT / "tests" / "fixtures" / "Dockerfile.unscoped-xgboost"


def _check(text: str) -> list[str]:
    return [str(f) for f in check_text(textwrap.dedent(text))]


IMAGES = sorted(ROOT.glob("images/*/Dockerfile"))


def test_the_training_image_is_among_the_dockerfiles_checked():
    assert DOCKERFILE in IMAGES


@pytest.mark.parametrize("dockerfile", IMAGES, ids=lambda p: p.parent.name)
def test_every_image_uses_no_variable_outside_its_scope(dockerfile):
    assert [str(f) for f in check(dockerfile)] == []


def test_the_dockerfile_that_pinned_xgboost_in_the_build_stage_only_is_refused():
    (finding,) = check(UNSCOPED)
    assert "XGBOOST_VERSION" in finding.message and "an ARG ends with its stage" in finding.message
    assert "xgboost==${XGBOOST_VERSION}" in UNSCOPED.read_text().splitlines()[finding.line - 1]


def test_an_arg_declared_in_one_stage_is_not_in_the_next():
    found = _check("""
        FROM alpine AS build
        ARG V=1
        RUN echo "$V"
        FROM alpine
        RUN echo "${V}"
    """)
    assert found == [
        (
            "line 6: RUN reads ${V}, which is not declared in stage 1"
            " (an ARG ends with its stage: declare `ARG V` in this stage too)"
        )
    ]


def test_a_global_arg_reaches_from_lines_only_unless_a_stage_declares_it_again():
    refused = _check("""
        ARG BASE=alpine
        ARG V=1
        FROM ${BASE}
        RUN echo ${V}
    """)
    assert refused == [
        (
            "line 5: RUN reads ${V}, which is not declared in stage 0"
            " (a global ARG is usable in FROM only: declare `ARG V` in this stage)"
        )
    ]
    assert (
        _check("""
        ARG BASE=alpine
        ARG V=1
        FROM ${BASE}
        ARG V
        RUN echo ${V}
    """)
        == []
    )


def test_an_arg_is_in_scope_only_after_its_declaration():
    found = _check("""
        FROM alpine
        WORKDIR /src/${DIR}
        ARG DIR=x
    """)
    assert found == ["line 3: WORKDIR uses ${DIR}, which is not declared in stage 0"]


def test_a_from_line_may_use_only_global_and_platform_args():
    assert _check("FROM ${NOPE}\n") == ["line 1: FROM uses ${NOPE}, which no ARG before the first FROM declares"]
    assert _check("FROM --platform=${BUILDPLATFORM} alpine\n") == []


def test_a_platform_arg_reaches_a_stage_only_through_an_arg_instruction():
    refused = _check("""
        FROM alpine
        RUN echo "${TARGETARCH}"
    """)
    assert refused == [
        (
            "line 3: RUN reads ${TARGETARCH}, which is not declared in stage 0"
            " (a platform ARG reaches a stage only through `ARG TARGETARCH`)"
        )
    ]
    assert (
        _check("""
        FROM alpine
        ARG TARGETARCH
        RUN echo "${TARGETARCH}"
    """)
        == []
    )


def test_env_is_inherited_by_a_stage_built_from_the_stage_but_arg_is_not():
    found = _check("""
        FROM alpine AS base
        ARG A=1
        ENV E=2
        FROM base
        RUN echo "$E" "$A"
    """)
    assert found == [
        (
            "line 6: RUN reads ${A}, which is not declared in stage 1"
            " (an ARG ends with its stage: declare `ARG A` in this stage too)"
        )
    ]


def test_copy_from_must_name_an_earlier_stage():
    found = _check("""
        FROM alpine AS one
        COPY --from=two /a /a
        COPY --from=0 /a /a
        FROM alpine AS two
        COPY --from=one /a /a
        COPY --from=docker.io/library/busybox:1.37 /bin/sh /bin/sh
    """)
    assert found == ["line 3: COPY --from=two names no earlier stage", "line 4: COPY --from=0 names no earlier stage"]


def test_the_shell_reads_what_a_run_does_not_assign_and_nothing_in_single_quotes():
    used = shell_variables_used("""X="$(nproc)" && for f in a b; do echo "$f $X ${Y:-z} $Z"; done && echo '$W' \\$V""")
    assert used == ["Z"]


def test_exec_form_run_is_not_expanded_by_a_shell():
    assert (
        _check("""
        FROM alpine
        RUN ["echo", "$NOT_A_SHELL"]
    """)
        == []
    )


def test_the_image_workflow_runs_buildkits_own_checks_before_building():
    steps = yaml.safe_load((ROOT / ".github" / "workflows" / "image.yml").read_text())["jobs"]["push"]["steps"]
    script = "\n".join(s.get("run", "") for s in steps)
    assert script.index("docker build --check images/training") < script.index("docker build --pull")
