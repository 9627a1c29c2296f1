"""The command line as a user meets it: one way to name the stack, one-line failures (the
traceback only under --debug), --version, and output piped into `head`."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from infra.cli import main as cli
from tests.conftest import ROOT


def _cli(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    """The command as the console script runs it (run(): exit status, flushing, broken pipes)."""
    return subprocess.run([sys.executable, "-m", "infra.cli", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120, **kwargs)


def test_version_prints_the_installed_package_version():
    from importlib.metadata import version

    done = _cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"higgsfield {version('higgsfield')}"


@pytest.mark.parametrize("argv", [
    ["plan", "s"], ["check", "s"], ["diff", "s", "--base", "main"], ["cost", "s"], ["timeline", "s"], ["preflight", "s"],
    ["init", "s", "--region", "eu-north-1"], ["jobs", "render", "s", "pytorch-ddp"], ["healthcheck", "render", "s", "h100"],
], ids=lambda argv: " ".join(argv[:2]))
def test_every_command_takes_the_stack_as_its_first_argument(argv):
    assert cli.parser().parse_args(argv).stack == "s"


def test_the_old_stack_option_of_jobs_render_still_works_with_a_deprecation_note(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert cli.main(["jobs", "render", "pytorch-ddp", "--stack", "dev"]) == 0
    captured = capsys.readouterr()
    assert "kind: PyTorchJob" in captured.out
    assert captured.err == "note: --stack is deprecated: every command names the stack first: higgsfield jobs render dev pytorch-ddp\n"


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


def _fails_unforeseen(*_args, **_kwargs):
    raise RuntimeError("the mocked engine\nwent away")


def test_an_unforeseen_failure_is_one_line_pointing_at_debug(capsys, monkeypatch):
    monkeypatch.setattr(cli, "record", _fails_unforeseen)
    assert cli.main(["plan", "dev"]) == 1
    assert capsys.readouterr().err == "error: the mocked engine went away (RuntimeError; rerun with --debug for the traceback)\n"


def test_debug_raises_the_failure_with_its_traceback(monkeypatch):
    monkeypatch.setattr(cli, "record", _fails_unforeseen)
    with pytest.raises(RuntimeError, match="went away"):
        cli.main(["plan", "dev", "--debug"])


def test_check_piped_into_a_closed_reader_exits_without_a_traceback():
    """`higgsfield check prod | head -1`, made deterministic: the reader is gone before the
    command writes anything, so its first write meets EPIPE."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "infra.cli", "check", "prod"], cwd=ROOT, stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
    assert done.stderr == "" and done.returncode == 128 + 13  # as a filter killed by SIGPIPE


def test_check_prod_into_head_prints_the_first_line_only():
    done = subprocess.run(f"{sys.executable} -m infra.cli check prod | head -1", shell=True, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.stdout.startswith("Policy check of higgsfield/prod") and done.stdout.count("\n") == 1
    assert "Traceback" not in done.stderr
