"""The training image by hand, and a first deploy whose health gate never waits on an image that
does not exist: `higgsfield image build|push STACK` (the exact docker and AWS CLI command lines,
refused in one line without docker), `bootstrap` creating the ECR repository and pushing the image
before any GPU node can join, the gate's image never a team's trainingImage, `check` refusing a
gate image that cannot exist, and rendered jobs naming the image they need."""

from __future__ import annotations

import json
import subprocess

import pytest

from components.registry import image_tag
from infra.cli import bootstrap
from infra.cli.main import main
from infra.config import ConfigError
from infra.offline import day_one, image, jobs
from tests.conftest import ROOT, plan_of

TAG = image_tag()


def _commands(script: str) -> str:
    """The printed commands without the leading comment that lists the files the tag hashes."""
    return "\n".join(line for line in script.splitlines() if not line.startswith("#"))


def _cfg(stack: str = "prod", **update):
    cfg = plan_of(stack).config
    return cfg.model_copy(update=update) if update else cfg


def test_build_is_one_docker_build_of_images_training_tagged_with_its_source_tree():
    assert TAG.startswith("src-")
    assert _commands(image.script(_cfg(), "build")) == (
        f"docker build --pull --tag 444455556666.dkr.ecr.us-east-2.amazonaws.com/higgsfield-prod/training:{TAG} "
        "images/training"
    )


def test_push_logs_in_to_the_stacks_registry_pushes_unless_the_tag_is_there_and_prints_the_digest():
    registry, repo = "444455556666.dkr.ecr.us-east-2.amazonaws.com", "higgsfield-prod/training"
    exists = f"aws ecr describe-images --region us-east-2 --repository-name {repo} --image-ids imageTag={TAG}"
    assert _commands(image.script(_cfg(), "push")).splitlines() == [
        f"docker build --pull --tag {registry}/{repo}:{TAG} images/training",
        f"aws ecr get-login-password --region us-east-2 | docker login --username AWS --password-stdin {registry}",
        f"{exists} > /dev/null 2>&1 || docker push {registry}/{repo}:{TAG}",
        f"{exists} --query 'imageDetails[0].imageDigest' --output text",
    ]


def test_the_pushed_image_is_the_one_the_health_gate_and_the_jobs_name():
    cfg = _cfg()
    pushed = image.steps(cfg, "build")[0].argv[4]
    assert image.gate_image(cfg)[0] == pushed == jobs.stack_image(cfg)


def test_the_repository_is_the_one_the_image_workflow_pushes_to():
    workflow = (ROOT / ".github" / "workflows" / "image.yml").read_text()
    assert (
        'repository="higgsfield-${STACK}/training"' in workflow
        and 'source_tag="src-$(cd images/training && LC_ALL=C sha256sum Dockerfile *.py | sha256sum | cut -c1-32)"'
        in workflow
    )
    assert "/higgsfield-prod/training:src-" in image.script(_cfg(), "build")


def test_without_docker_the_command_refuses_in_one_line_before_running_anything(capsys, monkeypatch):
    monkeypatch.setattr(image.shutil, "which", lambda tool: None)
    ran = []
    monkeypatch.setattr(image.subprocess, "run", lambda argv, **kwargs: ran.append(argv))
    assert main(["image", "push", "prod"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: docker aws: not found on PATH") and err.count("\n") == 1 and not ran


def test_a_docker_without_a_daemon_is_refused_in_one_line(capsys):
    answers = {
        ("docker", "info"): subprocess.CompletedProcess(
            [], 1, "", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock.\n"
        )
    }

    def runner(argv, **kwargs):
        return answers.get(tuple(argv[:2])) or subprocess.CompletedProcess(argv, 0, "", "")

    with pytest.raises(ConfigError, match=r"^docker: the Docker daemon does not answer \(Cannot connect"):
        image.run(_cfg(), "build", runner=runner, which=lambda tool: f"/usr/bin/{tool}", out=lambda line: None)


def test_push_runs_the_commands_in_order_and_skips_a_tag_that_is_already_there():
    calls = []

    def runner(argv, **kwargs):
        calls.append(argv)
        if argv[:3] == ["aws", "ecr", "describe-images"] and "--query" not in argv:
            return subprocess.CompletedProcess(argv, 0, "{}", "")  # the tag exists
        if argv[:3] == ["aws", "ecr", "get-login-password"]:
            return subprocess.CompletedProcess(argv, 0, "secret\n", "")
        return subprocess.CompletedProcess(argv, 0, "sha256:abc\n", "")

    lines = []
    assert image.run(_cfg(), "push", runner=runner, which=lambda tool: f"/usr/bin/{tool}", out=lines.append) == 0
    programs = [" ".join(c[:2]) for c in calls]
    assert programs == ["docker info", "docker build", "aws ecr", "docker login", "aws ecr", "aws ecr"]
    assert not any(c[:2] == ["docker", "push"] for c in calls)
    assert any("already in the repository" in line for line in lines)


def test_a_failed_docker_build_stops_with_its_exit_status():
    def runner(argv, **kwargs):
        return subprocess.CompletedProcess(argv, 17 if argv[:2] == ["docker", "build"] else 0, "", "")

    assert image.run(_cfg(), "push", runner=runner, which=lambda tool: f"/usr/bin/{tool}", out=lambda line: None) == 17


def _sources_copy(tmp_path):
    import shutil

    copy = tmp_path / "images" / "training"
    shutil.copytree(ROOT / "images" / "training", copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_the_tag_is_the_hash_the_image_workflow_computes_in_a_shell_without_git(tmp_path):
    from infra.core.assets import source_tag

    copy = _sources_copy(tmp_path)  # no .git anywhere above tmp_path
    workflow = (ROOT / ".github" / "workflows" / "image.yml").read_text()
    recipe = next(line.strip() for line in workflow.splitlines() if line.strip().startswith("source_tag="))
    done = subprocess.run(
        ["bash", "-ec", f'{recipe}; echo "$source_tag"'],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == source_tag(copy) == TAG


def test_a_changed_image_source_gets_another_tag_committed_or_not(tmp_path):
    from infra.core.assets import source_tag

    copy = _sources_copy(tmp_path)
    before = source_tag(copy)
    (copy / "node_check.py").write_text((copy / "node_check.py").read_text() + "\n# local change\n")
    assert source_tag(copy) != before


def test_the_printed_commands_say_which_files_made_the_tag():
    comment = [line for line in image.script(_cfg(), "build").splitlines() if line.startswith("#")]
    assert comment[0].startswith(f"# {TAG}: sha256 of this list of `sha256sum Dockerfile *.py`")
    assert [line.split()[-1] for line in comment[1:]] == [
        "Dockerfile",
        *sorted(p.name for p in (ROOT / "images" / "training").glob("*.py")),
    ]


def test_a_stack_without_a_known_account_asks_sts_for_it():
    cfg = _cfg("dev", delivery=None, admins=())
    assert _commands(image.script(cfg, "build")).splitlines() == [
        'ACCOUNT="$(aws sts get-caller-identity --query Account --output text)"',
        f'docker build --pull --tag "${{ACCOUNT}}.dkr.ecr.us-west-2.amazonaws.com/higgsfield-dev/training:{TAG}" '
        "images/training",
    ]


def test_the_printed_push_commands_expand_the_account_when_a_shell_runs_them():
    """`higgsfield image push dev --print | sh`, with docker and aws as shell functions that echo
    what they were given (STS answers an account; the tag is not in the repository yet)."""
    fakes = (
        'aws() { case "$1 $2" in "sts get-caller-identity") echo 123456789012;;\n'
        '  "ecr describe-images") case "$*" in *--query*) echo sha256:0;; *) return 1;; esac;; *) echo "aws $*";; '
        "esac; }\n"
        'docker() { echo "docker $*"; }\n'
    )
    script = image.script(_cfg("dev", delivery=None, admins=()), "push")
    done = subprocess.run(["bash", "-euc", fakes + script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    registry = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
    assert f"docker build --pull --tag {registry}/higgsfield-dev/training:{TAG} images/training" in done.stdout
    assert f"docker login --username AWS --password-stdin {registry}" in done.stdout
    assert f"docker push {registry}/higgsfield-dev/training:{TAG}" in done.stdout
    assert "ACCOUNT" not in done.stdout and done.stdout.endswith("sha256:0\n")  # the digest, last


def test_the_gate_never_runs_a_teams_training_image():
    cfg = _cfg("staging", training_image="123456789012.dkr.ecr.us-east-1.amazonaws.com/team/own:1")
    assert image.gate_image(cfg)[0] == jobs.stack_image(_cfg("staging"))


def test_the_gate_runs_the_pinned_gate_image_when_set():
    pinned = "123456789012.dkr.ecr.us-east-1.amazonaws.com/gate/training@sha256:" + "a" * 64
    assert image.gate_image(_cfg("staging", health_gate_image=pinned)) == (pinned, "higgsfield:healthGateImage")


def test_check_refuses_a_gate_image_that_names_no_image_without_image_sources(monkeypatch):
    monkeypatch.setattr(image, "image_tag", lambda: image.UNKNOWN_TAG)
    (finding,) = day_one.gate_image_findings(_cfg())
    assert finding[1].startswith("higgsfield:healthGateImage: unset, and no images/training is found")


def test_a_job_whose_image_tag_is_unknown_is_refused_not_rendered_with_a_placeholder(monkeypatch):
    """Without image sources the tag is unknown: `...:<tag>` is no image a node can pull."""
    from infra.offline import pods

    monkeypatch.setattr(pods, "image_tag", lambda: image.UNKNOWN_TAG)
    with pytest.raises(ConfigError) as refused:
        jobs.render("pytorch-ddp", _cfg("dev"))
    assert refused.value.key == "images/training" and "pass --image" in str(refused.value)
    assert jobs.render("pytorch-ddp", _cfg("dev"), image="123456789012.dkr.ecr.us-west-2.amazonaws.com/x/training:1")


def test_check_refuses_a_stock_image_as_the_gate_image():
    (finding,) = day_one.gate_image_findings(
        _cfg(health_gate_image="docker.io/pytorch/pytorch:2.7.1-cuda12.8-cudnn9-devel")
    )
    assert finding[1].startswith(
        "higgsfield:healthGateImage: docker.io/pytorch/pytorch:2.7.1-cuda12.8-cudnn9-devel has no health gate"
    )


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_every_shipped_stacks_gate_image_can_exist(stack):
    assert day_one.gate_image_findings(_cfg(stack)) == []


def test_the_planned_gate_runs_the_pinned_gate_image_not_the_teams_training_image(project_copy):
    from infra.offline.evaluate import record

    pinned = "123456789012.dkr.ecr.us-east-2.amazonaws.com/gate/training@sha256:" + "c" * 64

    def change(config):
        config["higgsfield:healthGateImage"] = pinned
        config["higgsfield:trainingImage"] = "123456789012.dkr.ecr.us-east-2.amazonaws.com/team/own:1"

    root = project_copy("staging", change)
    daemonsets = [
        r for r in record("bad", root).resources if r.name.startswith("health-gate-daemonset-")
    ]  # one per gated pool
    assert daemonsets and all(
        d.inputs["spec"]["template"]["spec"]["containers"][0]["image"] == pinned for d in daemonsets
    )


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_bootstrap_pushes_the_image_after_the_repository_exists_and_before_the_first_full_deploy(stack):
    steps = bootstrap.steps(_cfg(stack))
    (at,) = [i for i, s in enumerate(steps) if s.startswith("Training image")]
    first_up = next(i for i, s in enumerate(steps) if s.startswith("First deploy"))
    assert at < first_up and f"higgsfield image push {stack}" in steps[at]
    (command,) = [part for part in steps[at].split("`") if part.startswith("urn=")]
    shell = subprocess.run(
        ["bash", "-c", 'pulumi() { printf "%s\\n" "$@"; }\n' + command], capture_output=True, text=True, timeout=30
    )
    argv = shell.stdout.splitlines()  # the arguments pulumi gets, once the shell has expanded them
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--target"] == bootstrap.image_targets(stack)


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_bootstrap_fits_120_columns_and_its_commands_survive_the_wrapping(stack):
    """Each command, as printed on several lines, is the command of the step (bash joins the
    backslash-continued lines and the JSON document's lines are whitespace inside its quotes)."""
    text = bootstrap.render(_cfg(stack))
    assert max(map(len, text.splitlines())) <= 120
    for step in bootstrap.steps(_cfg(stack)):
        for command in step.split("`")[1::2]:
            printed = bootstrap.command_lines(command, "  ", 120)
            assert max(map(len, printed)) <= 120
            assert _as_bash_reads_it("\n".join(printed)) == _as_bash_reads_it(command), command


def _as_bash_reads_it(command: str) -> list:
    """The words bash makes of `command` (each command of an && chain, run by a function that
    prints its arguments and its stdin), a here-string's JSON parsed."""
    words = "words() { for w in \"$@\"; do printf '%s\\0' \"$w\"; done; printf 'STDIN\\0'; cat; printf '\\0'; }\n"
    done = subprocess.run(
        ["bash", "-c", words + "words " + command.replace("&& ", "&& words ")],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    read = []
    for part in done.stdout.split("\0"):
        read.append(json.loads(part) if part.strip().startswith("{") else part)
    return read


def test_bootstraps_targets_are_the_repository_the_program_creates():
    """The children's URNs as the plan records them; the component's without the root stack type
    (the engine omits pulumi:pulumi:Stack from a top-level resource's URN; the recording keeps it)."""
    recorded = {r.urn.replace("pulumi:pulumi:Stack$", "") for r in plan_of("prod").resources}
    assert set(bootstrap.image_targets("prod")) <= recorded


def test_bootstrap_with_a_pinned_gate_image_checks_it_instead_of_pushing():
    pinned = "123456789012.dkr.ecr.us-east-1.amazonaws.com/gate/training@sha256:" + "b" * 64
    steps = bootstrap.steps(_cfg("prod", health_gate_image=pinned))
    assert any(s.startswith("Health gate image") and f"docker manifest inspect {pinned}" in s for s in steps)


@pytest.mark.parametrize("example", jobs.EXAMPLES)
def test_a_rendered_job_says_which_image_it_needs_and_how_to_get_it(example):
    text = jobs.to_yaml(jobs.render(example, _cfg()))
    if example in jobs.OWN_IMAGE:  # an upstream image: nothing to build
        assert f"# Image: {jobs.OWN_IMAGE[example]()}\n#   the upstream image itself" in text
        return
    image_ref = jobs.stack_image(_cfg())
    assert f"# Image: {image_ref}\n" in text
    assert "#     higgsfield image push prod\n" in text and "docs/training-image.md" in text
    assert f"--image-ids imageTag={TAG}" in text


def test_a_job_on_a_teams_own_image_says_it_is_theirs_to_push():
    own = "123456789012.dkr.ecr.us-east-2.amazonaws.com/team/own:1"
    text = jobs.to_yaml(jobs.render("pytorch-ddp", _cfg("prod", training_image=own)))
    assert f"# Image: {own}\n#   (higgsfield:trainingImage) yours to build and push" in text


def test_the_rendered_health_check_says_which_image_it_needs_too():
    from infra.offline import healthcheck

    text = jobs.to_yaml(healthcheck.render(_cfg(), "h100"))
    assert f"# Image: {jobs.stack_image(_cfg())}\n" in text and "#     higgsfield image push prod\n" in text
