"""What a newcomer hands `higgsfield jobs render -f` that is not a job file (the platform's stack file, an
example's template, the objects `jobs render` printed) is named for what it is in one line, with what to do."""

from __future__ import annotations

import shutil

from infra.cli.main import main
from tests.conftest import ROOT


def _refusal(capsys, *argv: str) -> tuple[int, list[str]]:
    code = main(list(argv))
    return code, capsys.readouterr().err.splitlines()


def test_a_stack_file_given_as_the_job_file_is_one_line_saying_a_stack_is_named(capsys):
    code, lines = _refusal(capsys, "jobs", "render", "prod", "-f", str(ROOT / "stacks" / "Pulumi.prod.yaml"))
    assert code == 2
    assert lines == [
        f"error: {ROOT / 'stacks' / 'Pulumi.prod.yaml'}: is a stack file (stack prod), not a job file: a stack is "
        "named, as STACK (higgsfield jobs render prod -f JOB.yaml); a job file says name, team, command and "
        "resources (docs/reference/job-file.md)"
    ]


def test_an_examples_template_given_as_the_job_file_says_to_render_the_example_by_its_name(capsys):
    code, lines = _refusal(capsys, "jobs", "render", "prod", "-f", str(ROOT / "examples" / "pytorch-ddp.yaml"))
    assert code == 2
    assert lines == [
        f"error: {ROOT / 'examples' / 'pytorch-ddp.yaml'}: is the template of the example pytorch-ddp, not a job "
        "file: higgsfield jobs render STACK pytorch-ddp renders it; a job file of your own starts as a copy of "
        "examples/llama-ft.job.yaml (docs/reference/job-file.md)"
    ]


def test_the_objects_render_printed_given_back_as_the_job_file_say_kubectl_applies_them(tmp_path, capsys):
    assert main(["jobs", "render", "prod", "-f", str(ROOT / "examples" / "llama-ft.job.yaml")]) == 0
    rendered = tmp_path / "job.yaml"
    rendered.write_text(capsys.readouterr().out)
    code, lines = _refusal(capsys, "jobs", "submit", "prod", "-f", str(rendered))
    assert code == 2
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
    job = tmp_path / "job.yaml"
    job.write_text((ROOT / "examples" / "llama-ft.job.yaml").read_text().replace("\n  gpus:", "\n\tgpus:"))
    code, lines = _refusal(capsys, "jobs", "render", "prod", "-f", str(job))
    assert code == 2
    assert lines == [
        f"error: {job}: is not YAML (line 9): found character '\\t' that cannot start any token; "
        "YAML indents with spaces, never tabs: replace the tabs with spaces"
    ]


def test_a_job_file_given_without_f_after_the_stack_says_it_goes_after_f(capsys):
    job = str(ROOT / "examples" / "llama-ft.job.yaml")
    code, lines = _refusal(capsys, "jobs", "render", "prod", job)
    assert code == 2
    assert lines == [
        f"error: {job} is a file, not an example: a job file goes after -f: higgsfield jobs render prod -f {job}"
    ]


def test_a_job_file_given_alone_as_the_stack_says_to_name_the_stack_and_give_the_file_after_f(capsys):
    job = str(ROOT / "examples" / "llama-ft.job.yaml")
    code, lines = _refusal(capsys, "jobs", "render", job)
    assert code == 2
    assert lines == [
        f"error: {job} is a file, not a stack: higgsfield jobs render STACK -f {job} (stacks here: dev, prod, staging)"
    ]


def test_an_env_variable_the_training_operator_sets_on_a_pytorch_job_is_refused_naming_it(tmp_path, capsys):
    job = tmp_path / "job.yaml"
    job.write_text((ROOT / "examples" / "llama-ft.job.yaml").read_text() + "env:\n  MASTER_ADDR: 10.0.0.1\n")
    code, lines = _refusal(capsys, "jobs", "render", "prod", "-f", str(job))
    assert code == 2
    assert lines == [
        f"error: {job}: env.MASTER_ADDR: is set on every pod of a PyTorchJob by the Training Operator "
        "(torchrun's rendezvous and ranks); leave it out of env"
    ]


def test_a_job_file_of_two_yaml_documents_says_a_job_file_is_one(tmp_path, capsys):
    job = tmp_path / "jobs.yaml"
    text = (ROOT / "examples" / "llama-ft.job.yaml").read_text()
    job.write_text(f"{text}---\n{text}")
    code, lines = _refusal(capsys, "jobs", "render", "prod", "-f", str(job))
    assert code == 2
    assert lines == [
        f"error: {job}: holds more than one YAML document (a second begins with --- at line "
        f"{text.count(chr(10)) + 1}): a job file is one job; give each job a file of its own"
    ]


def test_an_empty_job_file_says_it_is_empty(tmp_path, capsys):
    job = tmp_path / "job.yaml"
    job.write_text("# my job\n")
    code, lines = _refusal(capsys, "jobs", "render", "prod", "-f", str(job))
    assert code == 2
    assert lines == [
        f"error: {job}: is empty: a job file is a mapping of settings (name, team, command, resources, ...; "
        "docs/reference/job-file.md)"
    ]


def test_a_job_file_that_is_a_list_says_it_is_a_list(tmp_path, capsys):
    job = tmp_path / "job.yaml"
    job.write_text("- name: llama-ft\n  team: llm\n")
    code, lines = _refusal(capsys, "jobs", "render", "prod", "-f", str(job))
    assert code == 2
    assert lines == [
        f"error: {job}: is a list: a job file is a mapping of settings (name, team, command, resources, ...; "
        "docs/reference/job-file.md)"
    ]
