"""Hostile command lines of classes the earlier rounds did not try (issue 35, round six): what
argparse echoes in a usage error, folders that options name for files to be written into, and
`init` flags whose numbers or ranges are not what they look like. Each is one line on stderr naming
the option, exit 2, never a traceback, and nothing is written."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from infra.cli.main import main
from tests.conftest import ROOT

ADMIN = ["--admin", "arn:aws:iam::111122223333:role/PlatformAdmin"]


@pytest.fixture
def project(tmp_path, monkeypatch):
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    (tmp_path / "stacks").mkdir()
    (tmp_path / "policies" / "config").mkdir(parents=True)
    shutil.copy(ROOT / "stacks" / "Pulumi.dev.yaml", tmp_path / "stacks" / "Pulumi.dev.yaml")
    shutil.copy(ROOT / "policies" / "config" / "dev.json", tmp_path / "policies" / "config" / "dev.json")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _files(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _refused(capsys, argv: list[str]) -> str:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err and "rerun with --debug" not in err, err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (code, lines)
    return lines[0]


def test_a_usage_error_escapes_the_control_characters_it_echoes(capsys):
    line = _refused(capsys, ["schema", "\x1b[2J\x1b[31mred"])  # "unrecognized arguments" echoes them as typed
    assert "\x1b" not in line and "\\x1b[2J" in line, line


def test_a_usage_error_cuts_a_long_value_it_echoes(capsys):
    line = _refused(capsys, ["completion", "x" * 100_000])
    assert len(line) < 600 and "characters)" in line, line[:200]


@pytest.mark.parametrize(
    "argv, option, folder",
    [
        (["charts", "dev", "--out", "stacks"], "--out", "stacks"),
        (["charts", "dev", "--out", "policies/config"], "--out", "policies/config"),
        (["plan", "dev", "--manifests", "stacks", "--output", "plan.txt"], "--manifests", "stacks"),
    ],
)
def test_files_are_never_written_into_the_projects_own_folders(project, capsys, argv, option, folder):
    before = _files(project)
    line = _refused(capsys, argv)
    assert line.startswith(f"error: {option} {folder}: is {folder}, among the project's own files"), line
    assert _files(project) == before


def test_a_folder_to_write_into_behind_a_link_into_stacks_is_refused(project, capsys):
    (project / "out").symlink_to("stacks")
    line = _refused(capsys, ["charts", "dev", "--out", "out"])
    assert line.startswith("error: --out out: is stacks"), line


def test_a_folder_option_that_names_a_file_is_a_usage_error_naming_the_option(project, capsys):
    (project / "notes.txt").write_text("mine\n")
    line = _refused(capsys, ["charts", "dev", "--out", "notes.txt"])
    assert line == "error: --out notes.txt: is a file, not a folder to write into", line


@pytest.mark.parametrize(
    "flag",
    [
        ["--gpu-pool", "h100:p5.48xlarge:0-" + "9" * 5000],
        ["--team", "ml:" + "9" * 5000],
        ["--gpu-pool", "h100:p5.48xlarge:\u0660-\u0662"],  # Arabic-Indic 0-2: int() reads them, AWS does not
    ],
    ids=["a_size_of_5000_digits", "gpus_of_5000_digits", "another_scripts_digits"],
)
def test_init_refuses_a_number_that_is_no_plain_number_naming_the_flag(project, capsys, flag):
    line = _refused(capsys, ["init", "x", "--region", "us-east-1", *ADMIN, *flag])
    assert line.startswith(f"error: {flag[0]}: "), line[:200]
    assert not (project / "stacks" / "Pulumi.x.yaml").exists()


def test_init_refuses_a_public_access_cidr_that_is_no_ipv4_range_naming_the_flag(project, capsys):
    line = _refused(capsys, ["init", "x", "--region", "us-east-1", *ADMIN, "--public-access-cidr", "::/0"])
    assert line.startswith("error: --public-access-cidr ::/0: '::/0' is not an IPv4 CIDR"), line
    assert not (project / "stacks" / "Pulumi.x.yaml").exists()


@pytest.mark.parametrize(
    "entry",
    ['"mandtory"', '"Mandatory"', '{"enforcementLevel": "fatal"}', "5"],
    ids=["a_typo", "capitalised", "in_settings", "a_number"],
)
def test_a_policy_level_crossguard_does_not_have_is_refused_naming_the_policy(project, capsys, entry):
    (project / "p.json").write_text(f'{{"efa-pools": {entry}}}')
    line = _refused(capsys, ["check", "dev", "--policy-config", "p.json"])
    assert line.startswith("error: --policy-config p.json: efa-pools: ") and "is not an enforcement level" in line, line


@pytest.mark.parametrize(
    "change, says",
    [
        ({"hours_per_month": "730"}, '"hours_per_month" must be a number of hours above zero, got "730"'),
        ({"hours_per_month": float("nan")}, "got NaN"),
        ({"regions": {"us-west-2": []}}, "regions.us-west-2 must be an object of prices"),
        ({"regions": {"us-west-2": {"eks_cluster_hour": -0.1}}}, "regions.us-west-2.eks_cluster_hour must be a price"),
        ({"regions": {"us-west-2": {"ec2_on_demand_hour": {"m7i.xlarge": "x"}}}}, "ec2_on_demand_hour.m7i.xlarge"),
    ],
    ids=["hours_as_text", "hours_nan", "a_region_list", "a_negative_price", "an_instance_price_as_text"],
)
def test_a_price_file_whose_figures_are_no_prices_is_refused_naming_the_figure(project, capsys, change, says):
    import json

    prices = json.loads((ROOT / "infra" / "offline" / "data" / "prices.json").read_text())
    (project / "p.json").write_text(json.dumps({**prices, **change}))
    line = _refused(capsys, ["cost", "dev", "--prices", "p.json"])
    assert line.startswith("error: --prices p.json: ") and says in line, line


@pytest.mark.parametrize(
    "variables",
    [{"AWS_CONFIG_FILE": "aws-config", "AWS_PROFILE": "x"}, {"AWS_ENDPOINT_URL": "::::"}, {"AWS_DEFAULTS_MODE": "x"}],
    ids=["a_config_file_botocore_cannot_parse", "an_endpoint_that_is_no_url", "an_unknown_defaults_mode"],
)
def test_preflight_with_an_unusable_aws_configuration_says_so_in_one_line(project, capsys, monkeypatch, variables):
    (project / "aws-config").write_text("[profile x\nregion =\n")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    line = _refused(capsys, ["preflight", "dev"])
    assert line.startswith("error: the AWS configuration cannot be used ("), line


STACK = "stacks/Pulumi.dev.yaml"


def test_a_link_planted_in_the_charts_folder_is_replaced_not_written_through(project, capsys):
    (project / "out").mkdir()
    (project / "out" / "releases.tsv").symlink_to(f"../{STACK}")
    before = (project / STACK).read_text()
    assert main(["charts", "dev", "--out", "out"]) == 0
    assert (project / STACK).read_text() == before
    assert not (project / "out" / "releases.tsv").is_symlink()


def test_a_link_planted_in_the_manifests_folder_is_replaced_not_written_through(project, capsys):
    (project / "m").mkdir()
    (project / "m" / "namespace-ml.yaml").symlink_to(f"../{STACK}")
    before = (project / STACK).read_text()
    assert main(["plan", "dev", "--manifests", "m", "--output", "plan.txt"]) == 0
    assert (project / STACK).read_text() == before
    assert "kind: Namespace" in (project / "m" / "namespace-ml.yaml").read_text()


def test_a_report_over_a_hard_link_to_a_stack_file_leaves_the_stack_as_it_was(project, capsys):
    (project / "report.txt").hardlink_to(project / STACK)
    before = (project / STACK).read_text()
    assert main(["bootstrap", "dev"]) == 0 and main(["plan", "dev", "--output", "report.txt"]) == 0
    assert (project / STACK).read_text() == before
    assert "report.txt" in capsys.readouterr().err and (project / "report.txt").read_text() != before


def _shell(project, command: str) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(ROOT), "PATH": os.environ["PATH"]}
    cli = f"{sys.executable} -m infra.cli"
    return subprocess.run(
        ["bash", "-c", command.format(cli=cli)], cwd=project, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("command, status", [("{cli} bootstrap dev 2>&-", 0), ("{cli} plan nosuch --json 2>&-", 2)])
def test_a_closed_stderr_changes_neither_stdout_nor_the_exit_status(project, command, status):
    done = _shell(project, command)
    assert done.returncode == status and "error:" not in done.stdout, (done.returncode, done.stdout[-300:])


def test_a_working_directory_deleted_under_the_shell_is_one_line(project):
    done = _shell(project, "mkdir gone && cd gone && rmdir ../gone && {cli} plan dev")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "error: the working directory no longer exists (deleted since the shell entered it): cd again"
    ], done.stderr


INIT = "{cli} init x --region us-east-1 --admin arn:aws:iam::111122223333:role/PlatformAdmin"


@pytest.mark.parametrize(
    "setup, says",
    [
        ("rm -r policies/config && touch policies/config", "policies/config cannot hold the policy config"),
    ],
    ids=["a_file_for_the_policy_folder"],
)
def test_init_in_a_project_of_odd_files_is_one_line_and_writes_nothing(project, capsys, setup, says):
    subprocess.run(["bash", "-c", setup], cwd=project, check=True)  # the odd files, made as a user would
    line = _refused(capsys, INIT.split()[1:])  # init in this process: what it refuses is no matter of the process
    assert says in line, line
    assert not (project / "stacks" / "Pulumi.x.yaml").exists()


def test_a_pulumi_yaml_that_cannot_be_read_is_refused_not_skipped_for_another_project(project, capsys):
    (project / "Pulumi.yaml").unlink()
    (project / "Pulumi.yaml").symlink_to("Pulumi.yaml")  # a loop: the checkout's project must not stand in
    line = _refused(capsys, ["bootstrap", "dev"])
    assert line == "Pulumi.yaml:1: cannot be read (Too many levels of symbolic links)", line


@pytest.mark.parametrize("root", ["/nonexistent", "Pulumi.yaml", "stacks"])
def test_the_ci_stack_list_of_a_folder_that_is_no_project_fails_instead_of_listing_nothing(project, root):
    done = _shell(project, f"{sys.executable} -m infra.offline.stacks --root {root}")
    assert done.returncode == 2 and done.stdout == "", (done.returncode, done.stdout)
    assert done.stderr.strip().endswith(
        "is no folder of stack files; is " + root + " the project (the folder holding Pulumi.yaml)?"
    ), done.stderr


def test_the_ci_stack_lists_usage_error_escapes_what_was_typed(project):
    done = _shell(project, f"{sys.executable} -m infra.offline.stacks --bogus $'\\e[2J'")
    assert done.returncode == 2 and "\x1b" not in done.stderr and "\\x1b[2J" in done.stderr, done.stderr


@pytest.mark.parametrize(
    "make, argv",
    [
        (lambda p: os.mkfifo(p / "policies" / "config" / "dev.json"), ["check", "dev"]),
        (lambda p: os.symlink("loop.json", p / "loop.json"), ["check", "dev", "--policy-config", "loop.json"]),
        (lambda p: None, ["check", "dev", "--policy-config", "/dev/null"]),
    ],
    ids=["a_fifo_for_the_stacks_own", "a_link_loop", "a_device"],
)
def test_a_policy_config_that_is_there_but_no_file_is_not_said_to_be_missing(project, capsys, make, argv):
    if argv == ["check", "dev"]:
        (project / "policies" / "config" / "dev.json").unlink()
    make(project)
    line = _refused(capsys, argv)
    assert line.endswith("is not a regular file (a FIFO, a device, a folder or a broken link)"), line


def test_schema_write_replaces_a_link_planted_at_the_schema_instead_of_writing_through_it(project, capsys):
    (project / "schemas").mkdir()
    (project / "schemas" / "stack.schema.json").symlink_to(f"../{STACK}")
    before = (project / STACK).read_text()
    assert main(["schema", "--write"]) == 0
    assert (project / STACK).read_text() == before
    assert not (project / "schemas" / "stack.schema.json").is_symlink()


def test_a_terminal_that_takes_only_ascii_gets_escapes_not_a_traceback(project):
    done = _shell(project, "PYTHONIOENCODING=ascii {cli} plan dev")
    assert done.returncode == 0 and "\\u25b8 " in done.stdout, (done.returncode, done.stderr[-300:])


@pytest.mark.parametrize(
    "argv, stream",
    [
        (["cost", "dev", "--output", "r\x1b[2J.txt"], "err"),
        (["charts", "dev", "--out", "c\x1b[2J"], "out"),
        (["plan", "dev", "--manifests", "m\x1b[2J", "--output", "plan.txt"], "err"),
    ],
    ids=["output", "charts_out", "plan_manifests"],
)
def test_a_path_with_control_characters_is_escaped_where_it_is_echoed(project, capsys, argv, stream):
    assert main(argv) == 0
    out, err = capsys.readouterr()
    echoed = out if stream == "out" else err
    assert "\x1b" not in out + err and "\\x1b[2J" in echoed, (out[-200:], err)


def test_init_copies_neither_the_base_stacks_ciphertexts_nor_its_key_material(project, capsys):
    base = project / STACK
    base.write_text(
        base.read_text().replace("    team: ml-platform", "    team: {secure: v1:abcdefgh}")
        + "  aws:secretKey: {secure: v1:zzzz}\nencryptionsalt: v1:salt\n"
    )
    assert main(["init", "x", "--region", "us-east-1", *ADMIN]) == 0
    out = capsys.readouterr().out
    written = (project / "stacks" / "Pulumi.x.yaml").read_text()
    assert "secure" not in written and "encryptionsalt" not in written and "aws:secretKey" not in written, written
    assert "aws:secretKey, higgsfield:tags.team: encrypted with dev's key: not copied" in " ".join(out.split()), out
