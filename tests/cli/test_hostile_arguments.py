"""Hostile command lines of classes the earlier rounds did not try (issue 35, round six): what
argparse echoes in a usage error, folders that options name for files to be written into, and
`init` flags whose numbers or ranges are not what they look like. Each is one line on stderr naming
the option, exit 2, never a traceback, and nothing is written."""

from __future__ import annotations

import shutil

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
