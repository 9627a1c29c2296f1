"""The command line as a user meets it: one way to name the stack, one-line failures (the
traceback only under --debug), --version, and output piped into `head`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from infra.cli import main as cli
from tests.conftest import ROOT


def _cli(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    """The command as the console script runs it (run(): exit status, flushing, broken pipes)."""
    return subprocess.run(
        [sys.executable, "-m", "infra.cli", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120, **kwargs
    )


def test_version_prints_the_installed_package_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:  # argparse's version action, through the console script's main()
        cli.main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"higgsfield {version('higgsfield')}"


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "s"],
        ["check", "s"],
        ["diff", "s", "--base", "main"],
        ["cost", "s"],
        ["timeline", "s"],
        ["preflight", "s"],
        ["init", "s", "--region", "eu-north-1"],
        ["jobs", "render", "s", "pytorch-ddp"],
        ["healthcheck", "render", "s", "h100"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_every_command_takes_the_stack_as_its_first_argument(argv):
    assert cli.parser().parse_args(argv).stack == "s"


def test_the_old_stack_option_of_jobs_render_still_works_with_a_deprecation_note(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert cli.main(["jobs", "render", "pytorch-ddp", "--stack", "dev"]) == 0
    captured = capsys.readouterr()
    assert "kind: PyTorchJob" in captured.out
    assert (
        captured.err
        == "note: --stack is deprecated: every command names the stack first: higgsfield jobs render dev pytorch-ddp\n"
    )


def test_the_old_and_new_forms_of_jobs_render_print_the_same_job(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    cli.main(["jobs", "render", "pytorch-ddp", "--stack", "dev"])
    old = capsys.readouterr().out
    cli.main(["jobs", "render", "dev", "pytorch-ddp"])
    assert capsys.readouterr().out == old


def test_a_usage_error_is_one_line_naming_the_help(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["plan"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: higgsfield plan: ") and "--help" in err


def test_a_missing_stack_is_one_line_with_exit_2(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert cli.main(["plan", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "stacks here: dev, " in err


def test_stacks_outside_a_project_is_refused_in_the_line_every_stack_command_uses(tmp_path, monkeypatch, capsys):
    """An installed package run in an empty folder (this checkout's code would fall back to the checkout)."""
    from infra.offline import evaluate

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(evaluate, "project_root", lambda: tmp_path)
    assert cli.main(["plan", "dev"]) == 2
    refusal = capsys.readouterr().err
    assert cli.main(["stacks"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == refusal and f"no Pulumi.yaml in {tmp_path} or above: not a project" in err, err


def _fails_unforeseen(*_args, **_kwargs):
    raise RuntimeError("the mocked engine\nwent away")


def test_an_unforeseen_failure_is_one_line_pointing_at_debug(capsys, monkeypatch):
    monkeypatch.setattr("infra.offline.evaluate.record", _fails_unforeseen)
    assert cli.main(["plan", "dev"]) == 1
    assert (
        capsys.readouterr().err
        == "error: the mocked engine went away (RuntimeError; rerun with --debug for the traceback)\n"
    )


def test_debug_adds_the_traceback_and_keeps_the_exit_status(capsys, monkeypatch):
    monkeypatch.setattr("infra.offline.evaluate.record", _fails_unforeseen)
    assert cli.main(["plan", "dev", "--debug"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "RuntimeError: the mocked engine" in err
    assert err.splitlines()[-1] == "error: the mocked engine went away (RuntimeError)"


def test_debug_keeps_the_exit_status_of_a_bad_stack(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert cli.main(["plan", "nosuch", "--debug"]) == cli.main(["plan", "nosuch"]) == 2


# The console script in a process of its own runs on today's clock, not the suite's pinned one
# (tests/conftest.py): dev, whose plan does not depend on the date (no Capacity Block window).


# The two pipe tests run `schema` (a report of 600 lines, no stack evaluated): what they exercise is
# the console script's writing and exit (infra/cli/main.py run()), the same for every report.
def test_a_report_piped_into_a_closed_reader_exits_without_a_traceback():
    """`higgsfield schema | head -1`, made deterministic: the reader is gone before the
    command writes anything, so its first write meets EPIPE."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "infra.cli", "schema"],
            cwd=ROOT,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
    assert done.stderr == "" and done.returncode == 128 + 13  # as a filter killed by SIGPIPE


def test_a_report_into_head_prints_the_first_line_only():
    done = subprocess.run(
        f"{sys.executable} -m infra.cli schema | head -1",
        shell=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout == "{\n"
    assert "Traceback" not in done.stderr


# --- the conventions of the tools users know: --json/--output, 120 columns, stderr, completion, colour


@pytest.fixture
def recorded(monkeypatch):
    """The CLI in process from the checkout. No stack is evaluated twice, nor an example job
    rendered twice: the session's Memo answers both (tests/conftest.py), as long as nothing is
    patched (replacing `record` here had every `check` render the examples again, 0.8 s a run)."""
    monkeypatch.chdir(ROOT)


REPORTS = [
    ["plan", "prod"],
    ["check", "prod"],
    ["cost", "prod"],
    ["timeline", "prod"],
    ["timeline", "prod", "--job", "b200-odcr"],
]
IDS = ["plan", "check", "cost", "timeline", "timeline-job"]


@pytest.mark.parametrize("argv", REPORTS, ids=IDS)
def test_every_report_prints_json_on_stdout_with_json(argv, recorded, capsys):
    assert cli.main([*argv, "--json"]) == 0
    import json

    assert isinstance(json.loads(capsys.readouterr().out), dict)


@pytest.mark.parametrize("argv", REPORTS, ids=IDS)
def test_every_report_writes_to_output_file_and_nothing_to_stdout(argv, recorded, capsys, tmp_path):
    target = tmp_path / "report.txt"
    assert cli.main([*argv, "--output", str(target)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err == f"wrote {target}\n" and target.read_text().strip()


@pytest.mark.parametrize("argv", REPORTS, ids=IDS)
def test_every_text_report_fits_120_columns(argv, recorded, capsys):
    cli.main(argv)
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) <= 120


def test_json_money_is_rounded_to_cents(recorded, capsys):
    import json

    cli.main(["cost", "prod", "--json"])
    floats: list[float] = []

    def walk(value):
        if isinstance(value, float):
            floats.append(value)
        elif isinstance(value, dict):
            [walk(v) for v in value.values()]
        elif isinstance(value, list):
            [walk(v) for v in value]

    walk(json.loads(capsys.readouterr().out))
    assert floats and all(round(f, 2) == f for f in floats)


def test_a_failed_check_says_so_on_stderr_and_lists_findings_on_stdout(project_copy, capsys):
    from tests.conftest import set_field

    def one_gpu_team(c: dict) -> None:
        set_field(
            "higgsfield:scheduler",
            "teams",
            [{**c["higgsfield:scheduler"]["teams"][0], "gpuQuota": 1, "servingGpuQuota": 1}],
        )(c)
        set_field("higgsfield:scheduler", "queues", [{**c["higgsfield:scheduler"]["queues"][0], "gpuCapability": 1}])(c)

    project_copy("dev", one_gpu_team)
    assert cli.main(["check", "bad"]) == 1
    out, err = capsys.readouterr()
    assert "example-jobs-fit" in out and "error: check of bad failed: " in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "command",
    [
        "plan",
        "check",
        "diff",
        "cost",
        "timeline",
        "preflight",
        "charts",
        "init",
        "jobs render",
        "healthcheck render",
        "bootstrap",
        "schema",
        "completion",
        "",
    ],
)
def test_help_names_arguments_as_a_user_writes_them(command, capsys):
    with pytest.raises(SystemExit):
        cli.main([*command.split(), "--help"])
    text = capsys.readouterr().out
    for internal in (
        "POLICY_CONFIG",
        "{render}",
        "OLD_STACK",
        "health_command",
        "jobs_command",
        "{plan,",
        "[-h] stack",
    ):
        assert internal not in text, internal
    import re

    assert not re.search(r"^\s+stack\s*$|\] stack\b", text, re.M), "positional named by its dest"


def test_completion_prints_a_shell_script_that_completes_higgsfield(capsys):
    assert cli.main(["completion", "bash"]) == 0
    out = capsys.readouterr().out
    assert "complete" in out and "higgsfield" in out


def test_completion_offers_the_stacks_of_the_project(tmp_path):
    answer = tmp_path / "completions"
    env = {
        **os.environ,
        "_ARGCOMPLETE": "1",
        "COMP_LINE": "higgsfield plan d",
        "COMP_POINT": "17",
        "_ARGCOMPLETE_STDOUT_FILENAME": str(answer),
    }
    _cli(env=env)
    assert "dev" in answer.read_text().split()


def test_colour_only_on_a_terminal_and_never_with_no_color(monkeypatch):
    from infra.cli.output import colour_on

    class Terminal:
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert colour_on(Terminal()) and not colour_on(sys.stdout if not sys.stdout.isatty() else open(os.devnull, "w"))  # noqa: SIM115
    monkeypatch.setenv("NO_COLOR", "1")
    assert not colour_on(Terminal())
    monkeypatch.setenv("NO_COLOR", "")  # "present and not an empty string" turns colour off (no-color.org)
    assert colour_on(Terminal())


def test_preflight_without_a_network_is_one_line_not_one_per_check():
    from infra.cli import preflight

    down = [
        preflight.Check(
            c,
            t,
            False,
            "not checked: network failure: Could not connect to the endpoint URL",
            "check the network path",
            checked=False,
            unreachable=True,
        )
        for c, t in [("offered in AZ", "p5.48xlarge"), ("vCPU quota", "P"), ("AMI", "nvidia")]
    ]
    line = preflight.one_cause(down)
    assert line and line.startswith("cannot reach AWS: 3 checks not run") and "\n" not in line
    assert preflight.one_cause(down[:2] + [preflight.Check("AMI", "x", True, "found")]) is None


@pytest.mark.parametrize("option", ["--output", "--json"])
def test_a_report_path_that_cannot_be_written_is_a_usage_error_naming_the_option(option, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    target = tmp_path / "no-such-folder" / "report.txt"
    assert cli.main(["cost", "dev", option, str(target)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {option} {target}: cannot write it (No such file or directory)\n"


def test_schema_write_in_a_project_of_ones_own_writes_the_schema_its_stack_files_name_and_no_manual(
    tmp_path, capsys, monkeypatch
):
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    shutil.copytree(ROOT / "stacks", tmp_path / "stacks")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["schema", "--write"]) == 0
    assert (
        capsys.readouterr().out == "wrote schemas/stack.schema.json, schemas/job.schema.json\n"
    )  # its teams write job files
    assert (tmp_path / "schemas" / "stack.schema.json").is_file() and not (tmp_path / "docs").exists()
    assert cli.main(["schema", "--check"]) == 0


def test_schema_check_in_a_checkout_runs_with_the_package_installed_from_it_not_editable(monkeypatch, capsys):
    """`pip install .`, then `higgsfield schema --check` in the checkout: the code runs from
    site-packages, where the example the job reference shows is the package's copy (infra/shipped/)."""
    from infra.cli import schema
    from infra.core import assets

    site = ROOT / "build" / "no-such-site-packages"  # the installed code's folders; nothing is written there
    monkeypatch.setattr(schema, "__file__", str(site / "infra" / "cli" / "schema.py"))
    monkeypatch.setattr(assets, "_CHECKOUT", site)  # no Pulumi.yaml: an installed package
    monkeypatch.setattr(assets, "_PACKAGED", ROOT)  # what pyproject.toml maps infra/shipped/ to
    monkeypatch.chdir(ROOT)
    assert cli.main(["schema", "--check"]) == 0, capsys.readouterr().err


def test_an_unknown_region_is_refused_in_a_short_line_with_the_closest_regions(capsys):
    assert cli.main(["init", "x", "--region", "eu-nort-1", "--admin", "arn:aws:iam::123456789012:role/A"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --region: 'eu-nort-1' is not one of the ") and "did you mean eu-north-1" in err
    assert err.count("\n") == 1 and len(err) <= 200


def test_a_region_in_capitals_is_refused_with_its_lowercase_name(capsys):
    assert cli.main(["init", "x", "--region", "EU-NORTH-1", "--admin", "arn:aws:iam::123456789012:role/A"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith("did you mean eu-north-1? (region names are lowercase)\n")


@pytest.mark.parametrize("region", ["us-gov-west-1", "cn-north-1"])
def test_a_region_of_another_partition_is_refused_as_one_not_as_a_typo_of_an_aws_region(capsys, region):
    """GovCloud and China have EKS too: the refusal says the platform runs in the aws partition, not
    that the region lacks EKS or is a misspelt us-west-1."""
    assert cli.main(["init", "x", "--region", region, "--admin", "arn:aws:iam::123456789012:role/A"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"'{region}' is a region of AWS " in err and "did you mean" not in err
    assert "runs in the aws partition only" in err
