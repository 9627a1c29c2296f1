"""What a newcomer hands `higgsfield jobs render -f` that is not a job file (the platform's stack file, an
example's template, the objects `jobs render` printed) is named for what it is in one line, with what to do."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from infra.cli.main import main
from tests.conftest import ROOT

EXAMPLE_JOB = (ROOT / "examples" / "llama-ft.job.yaml").read_text()


def _refused(capsys, *argv: str) -> list[str]:
    """The lines on stderr of a command refused as a bad command line or input (exit 2)."""
    assert main(list(argv)) == 2
    return capsys.readouterr().err.splitlines()


def _refused_job_file(tmp_path: Path, capsys, text: str) -> tuple[Path, list[str]]:
    """The job file of `text` rendered for prod: refused (exit 2), its path and the lines on stderr."""
    job = tmp_path / "job.yaml"
    job.write_text(text)
    return job, _refused(capsys, "jobs", "render", "prod", "-f", str(job))


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (
            "stacks/Pulumi.prod.yaml",
            "is a stack file (stack prod), not a job file: a stack is named, as STACK (higgsfield jobs render prod -f "
            "JOB.yaml); a job file says name, team, command and resources (docs/reference/job-file.md)",
        ),
        (
            "examples/pytorch-ddp.yaml",
            "is the template of the example pytorch-ddp, not a job file: higgsfield jobs render STACK pytorch-ddp "
            "renders it; a job file of your own starts as a copy of examples/llama-ft.job.yaml "
            "(docs/reference/job-file.md)",
        ),
    ],
    ids=["a stack file says a stack is named", "an example's template says to render the example by its name"],
)
def test_a_shipped_file_given_as_the_job_file_is_one_line_saying_what_it_is_and_what_to_do(capsys, given, said):
    path = ROOT / given
    assert _refused(capsys, "jobs", "render", "prod", "-f", str(path)) == [f"error: {path}: {said}"]


def test_the_objects_render_printed_given_back_as_the_job_file_say_kubectl_applies_them(tmp_path, capsys):
    assert main(["jobs", "render", "prod", "-f", str(ROOT / "examples" / "llama-ft.job.yaml")]) == 0
    rendered = tmp_path / "job.yaml"
    rendered.write_text(capsys.readouterr().out)
    lines = _refused(capsys, "jobs", "submit", "prod", "-f", str(rendered))
    assert lines == [
        f"error: {rendered}: is Kubernetes objects (ConfigMap, PyTorchJob), not a job file: kubectl apply -f "
        "applies them as they are; jobs submit takes the job file they were rendered from "
        "(docs/reference/job-file.md)"
    ]


def test_a_job_file_named_after_an_example_is_still_read_as_a_job_file(tmp_path, capsys):
    job = tmp_path / "pytorch-ddp.yaml"
    shutil.copy(ROOT / "examples" / "llama-ft.job.yaml", job)
    assert main(["jobs", "render", "prod", "-f", str(job)]) == 0


def test_a_job_file_indented_with_tabs_says_yaml_indents_with_spaces(tmp_path, capsys):
    job, lines = _refused_job_file(tmp_path, capsys, EXAMPLE_JOB.replace("\n  gpus:", "\n\tgpus:"))
    assert lines == [
        f"error: {job}: is not YAML (line 9): found character '\\t' that cannot start any token; "
        "YAML indents with spaces, never tabs: replace the tabs with spaces"
    ]


def test_a_job_file_given_without_f_after_the_stack_says_it_goes_after_f(capsys):
    job = str(ROOT / "examples" / "llama-ft.job.yaml")
    lines = _refused(capsys, "jobs", "render", "prod", job)
    assert lines == [
        f"error: {job} is a file, not an example: a job file goes after -f: higgsfield jobs render prod -f {job}"
    ]


def test_a_job_file_given_alone_as_the_stack_says_to_name_the_stack_and_give_the_file_after_f(capsys):
    job = str(ROOT / "examples" / "llama-ft.job.yaml")
    lines = _refused(capsys, "jobs", "render", job)
    assert lines == [
        f"error: {job} is a file, not a stack: higgsfield jobs render STACK -f {job} (stacks here: dev, prod, staging)"
    ]


def test_an_env_variable_the_training_operator_sets_on_a_pytorch_job_is_refused_naming_it(tmp_path, capsys):
    job, lines = _refused_job_file(tmp_path, capsys, EXAMPLE_JOB + "env:\n  MASTER_ADDR: 10.0.0.1\n")
    assert lines == [
        f"error: {job}: env.MASTER_ADDR: is set on every pod of a PyTorchJob by the Training Operator "
        "(torchrun's rendezvous and ranks); leave it out of env"
    ]


def test_a_job_file_of_two_yaml_documents_says_a_job_file_is_one(tmp_path, capsys):
    text = EXAMPLE_JOB
    job, lines = _refused_job_file(tmp_path, capsys, f"{text}---\n{text}")
    assert lines == [
        f"error: {job}: holds more than one YAML document (a second begins with --- at line "
        f"{text.count(chr(10)) + 1}): a job file is one job; give each job a file of its own"
    ]


def test_an_empty_job_file_says_it_is_empty(tmp_path, capsys):
    job, lines = _refused_job_file(tmp_path, capsys, "# my job\n")
    assert lines == [
        f"error: {job}: is empty: a job file is a mapping of settings (name, team, command, resources, ...; "
        "docs/reference/job-file.md)"
    ]


def test_a_job_file_that_is_a_list_says_it_is_a_list(tmp_path, capsys):
    job, lines = _refused_job_file(tmp_path, capsys, "- name: llama-ft\n  team: llm\n")
    assert lines == [
        f"error: {job}: is a list: a job file is a mapping of settings (name, team, command, resources, ...; "
        "docs/reference/job-file.md)"
    ]
