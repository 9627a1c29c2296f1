"""`higgsfield image build|push STACK`: the training image by hand, for a first deploy or a user
without the GitHub image workflow (.github/workflows/image.yml does the same in CI).

The image is built from images/training into the stack's ECR repository (components/registry.py,
`higgsfield-STACK/training`), tagged `src-<content hash of images/training>` (infra/core/assets.py):
the tag the health gate and `higgsfield jobs render` name offline, so a build of the same sources by
CI or by hand, from a checkout, a copy without git or an installed package, lands on the same tag;
a changed file gives another tag, never different contents under the same one. Tags are immutable
in that repository, so a push of a tag that is already there does nothing. The commands are docker
and the AWS CLI, run in order (or printed with --print); without docker this refuses in one line
before running anything.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from components.registry import UNKNOWN_TAG, image_tag, repository_name
from infra.config import ConfigError, StackConfig
from infra.core.assets import IMAGE_SOURCES, image_sources, source_manifest
from infra.core.project import project_root
from infra.offline.pods import stack_account

DOCS = "docs/training-image.md"


def account_of(cfg: StackConfig) -> str:
    """The stack's account: higgsfield:delivery.accountId, else its admins' ARNs; `$ACCOUNT` (the
    caller's, asked of STS when the commands run) when neither says."""
    return stack_account(cfg) or "${ACCOUNT}"


def registry_of(cfg: StackConfig) -> str:
    return f"{account_of(cfg)}.dkr.ecr.{cfg.region}.amazonaws.com"


def source_image(cfg: StackConfig) -> str:
    """The image built from the project's images/training, in the stack's repository."""
    return f"{registry_of(cfg)}/{repository_name(cfg.name)}:{image_tag()}"


def gate_image(cfg: StackConfig) -> tuple[str, str]:
    """(image, the setting it comes from) of the health gate: higgsfield:healthGateImage, else the
    stack's repository at the project's source tag. Never higgsfield:trainingImage: the gate runs
    images/training/health_gate.py, which only an image built from images/training holds."""
    if cfg.health_gate_image:
        return cfg.health_gate_image, "higgsfield:healthGateImage"
    return source_image(
        cfg
    ), "higgsfield:healthGateImage (unset: the stack's ECR repository at the project's images/training tag)"


@dataclass(frozen=True)
class Step:
    """One command; `stdin_from` runs first and its stdout is this one's stdin (a shell pipe)."""

    argv: tuple[str, ...]
    stdin_from: tuple[str, ...] | None = None
    skip_if_ok: tuple[str, ...] | None = None  # run this first; exit 0 means the step is already done

    def shell(self) -> str:
        line = _join(self.argv)
        if self.stdin_from:
            line = f"{_join(self.stdin_from)} | {line}"
        if self.skip_if_ok:
            line = f"{_join(self.skip_if_ok)} > /dev/null 2>&1 || {line}"
        return line


def _join(argv: Sequence[str]) -> str:
    """A shell line of `argv`, each word quoted, except that `${ACCOUNT}` stays a parameter the
    shell expands (in double quotes: the rest of such a word is an image reference, no `"`, `$`,
    backquote or backslash in it)."""

    def word(arg: str) -> str:
        if "${ACCOUNT}" in arg and re.fullmatch(r"[A-Za-z0-9._/:@${}-]+", arg) and arg.count("$") == 1:
            return f'"{arg}"'
        return shlex.quote(arg)

    return " ".join(word(arg) for arg in argv)


def context(root: Path) -> str:
    """The build context: the project's images/training (relative: the commands run from the
    project), else the installed package's copy (an absolute path)."""
    sources = image_sources(root)
    try:
        return str(sources.relative_to(root))
    except ValueError:
        return str(sources)


def steps(cfg: StackConfig, action: str, root: Path | None = None) -> list[Step]:
    """The commands of `build` (docker build) or `push` (build, log in to ECR, push unless the
    tag is there)."""
    root = root or project_root()
    tag = image_tag()
    if tag == UNKNOWN_TAG:
        raise ConfigError(
            IMAGE_SOURCES, f"not found in {root} nor in the installed package: the image is built from them"
        )
    repository = repository_name(cfg.name)
    image = f"{registry_of(cfg)}/{repository}:{tag}"
    build = Step(("docker", "build", "--pull", "--tag", image, context(root)))  # from the project's folder
    if action == "build":
        return [build]
    region = ("--region", cfg.region)
    exists = (
        "aws",
        "ecr",
        "describe-images",
        *region,
        "--repository-name",
        repository,
        "--image-ids",
        f"imageTag={tag}",
    )
    return [
        build,
        Step(
            ("docker", "login", "--username", "AWS", "--password-stdin", registry_of(cfg)),
            stdin_from=("aws", "ecr", "get-login-password", *region),
        ),
        Step(("docker", "push", image), skip_if_ok=exists),
        Step(
            (
                "aws",
                "ecr",
                "describe-images",
                *region,
                "--repository-name",
                repository,
                "--image-ids",
                f"imageTag={tag}",
                "--query",
                "imageDetails[0].imageDigest",
                "--output",
                "text",
            )
        ),
    ]


def script(cfg: StackConfig, action: str, root: Path | None = None) -> str:
    """The commands as shell lines (what --print shows), run from the project's folder, after a
    comment naming the files the tag is the hash of."""
    root = root or project_root()
    lines = [step.shell() for step in steps(cfg, action, root)]
    manifest = source_manifest(image_sources(root)).splitlines()
    lines[:0] = [f"# {image_tag()}: sha256 of this list of `sha256sum Dockerfile *.py` in {context(root)}"] + [
        f"#   {line}" for line in manifest
    ]
    if "${ACCOUNT}" in registry_of(cfg):
        lines.insert(0, 'ACCOUNT="$(aws sts get-caller-identity --query Account --output text)"')
    return "\n".join(lines)


def missing_tools(action: str, which: Callable[[str], str | None] | None = None) -> list[str]:
    needed = ["docker"] + (["aws"] if action == "push" else [])
    return [tool for tool in needed if (which or shutil.which)(tool) is None]


Runner = Callable[..., subprocess.CompletedProcess]


def run(
    cfg: StackConfig,
    action: str,
    root: Path | None = None,
    runner: Runner | None = None,
    which: Callable[[str], str | None] | None = None,
    out: Callable[[str], None] = print,
) -> int:
    """Run the steps in order; 0 when done, 2 (one line) when a tool is missing, else the failing
    command's exit status."""
    runner = runner or subprocess.run
    missing = missing_tools(action, which)
    if missing:
        raise ConfigError(
            " ".join(missing),
            f"not found on PATH: `higgsfield image {action}` runs "
            f"docker{' and the AWS CLI' if action == 'push' else ''}; "
            f"install them, or print the commands with --print and run them where Docker is ({DOCS})",
        )
    root = root or project_root()  # the folder holding Pulumi.yaml: a checkout, or a project of one's own
    daemon = runner(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True)
    if daemon.returncode != 0:
        reason = (daemon.stderr or "").strip().splitlines()[-1:] or ["no answer"]
        raise ConfigError(
            "docker",
            f"the Docker daemon does not answer ({reason[0]}): start Docker, or print the commands with --print and "
            f"run them where Docker is ({DOCS})",
        )
    account = None
    if "${ACCOUNT}" in registry_of(cfg):
        done = runner(
            ["aws", "sts", "get-caller-identity", "--query", "Account", "--output", "text"],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            return done.returncode
        account = done.stdout.strip()

    def resolved(argv: Sequence[str] | None) -> list[str] | None:
        return None if argv is None else [a.replace("${ACCOUNT}", account) if account else a for a in argv]

    for step in steps(cfg, action, root):
        argv = resolved(step.argv)
        if step.skip_if_ok and runner(resolved(step.skip_if_ok), capture_output=True).returncode == 0:
            out(f"{argv[-1]} is already in the repository (tags are immutable): not pushed again")
            continue
        out("+ " + shlex.join(argv))
        if step.stdin_from:
            password = runner(resolved(step.stdin_from), capture_output=True, text=True)
            if password.returncode != 0:
                return password.returncode
            done = runner(argv, input=password.stdout, text=True, cwd=root)
        else:
            done = runner(argv, cwd=root)
        if done.returncode != 0:
            return done.returncode
    return 0
