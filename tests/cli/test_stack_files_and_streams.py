"""One reader for every stack file, with the same bounds for the CI matrix, `check`, `init` and the
program; a broken file affects only its own stack. And a CLI that is safe with files and streams:
`init` publishes atomically under a lock, a report never lands on the project's own files, option
files are regular files, a closed stdout is one line, echoed keys cannot drive the terminal."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

from infra.cli import init
from infra.cli.main import main
from infra.offline.stack_file import MAX_EXPANDED, StackFileError, read
from infra.offline.stacks import stack_matrix
from tests.conftest import ROOT

DEV = (ROOT / "stacks" / "Pulumi.dev.yaml").read_text()


@pytest.fixture
def project(tmp_path, monkeypatch):
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    (tmp_path / "stacks").mkdir()
    (tmp_path / "policies" / "config").mkdir(parents=True)
    for stack in ("dev", "prod"):
        shutil.copy(ROOT / "stacks" / f"Pulumi.{stack}.yaml", tmp_path / "stacks" / f"Pulumi.{stack}.yaml")
        shutil.copy(ROOT / "policies" / "config" / f"{stack}.json", tmp_path / "policies" / "config" / f"{stack}.json")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "rerun with --debug" not in err, err
    return code, out, err


def _nested(depth: int) -> str:
    return "config:\n  higgsfield:environment: " + "[" * depth + "]" * depth + "\n"


def _alias_bomb() -> str:
    lines = ["config:", "  a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    return "\n".join(lines) + "\n"


BROKEN = {  # a stack file CI cannot take an entry from -> what its one line says
    "a_list_for_the_environment": (
        DEV.replace("higgsfield:environment: dev", "higgsfield:environment: [dev]"),
        "environment \"['dev']\" is not one CI can use",
    ),
    "a_map_for_the_region": (
        DEV.replace("aws:region: us-west-2", "aws:region: {a: 1}"),
        "region \"{'a': 1}\" is not one CI can use",
    ),
    "nesting_5000_deep": (_nested(5000), "nesting depth"),
    "nesting_100_deep": (_nested(100), "nests deeper than 64 levels"),
    "bigger_than_a_stack_file": ("config:\n" + "  # padding\n" * 120_000, "is more than 1,048,576 bytes"),
    "an_alias_bomb": (_alias_bomb(), "expands to more than"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_the_ci_matrix_lists_a_broken_stack_file_as_broken_with_one_line(project, case):
    text, says = BROKEN[case]
    (project / "stacks" / "Pulumi.broken.yaml").write_text(text)
    start = time.process_time()
    broken: list[str] = []
    entries = {e["stack"]: e for e in stack_matrix(project, broken=broken)["include"]}
    assert time.process_time() - start < 2
    assert says in entries["broken"]["broken"] and len(broken) == 1 and "\n" not in broken[0], broken
    assert "broken" not in entries["dev"] and "deployRole" in entries["prod"]
    assert "broken" not in {e["stack"] for e in stack_matrix(project, delivered_only=True)["include"]}


def test_a_directory_named_like_a_stack_file_is_a_broken_stack_not_a_traceback(project, capsys):
    (project / "stacks" / "Pulumi.dir.yaml").mkdir()
    code, out, err = _run(capsys, "stacks")
    assert code == 0 and "stacks/Pulumi.dir.yaml:1: is a directory" in err, err
    assert {e["stack"] for e in json.loads(out)["include"]} == {"dev", "prod", "dir"}


def test_a_broken_sibling_does_not_fail_the_check_of_another_stack(project, capsys):
    from infra.offline.check import ci_delivery
    from tests.conftest import plan_of

    (project / "stacks" / "Pulumi.broken.yaml").write_text(
        "config:\n  higgsfield:environment: [dev]\n  aws:region: *nope\n"
    )
    (project / "stacks" / "Pulumi.Bad;name.yaml").write_text(DEV)
    shutil.copytree(ROOT / ".github", project / ".github")
    assert [f for f in ci_delivery(plan_of("dev"), project) if f.level == "mandatory"] == []
    code, _, err = _run(capsys, "check", "broken")
    assert code == 2 and err.startswith("stacks/Pulumi.broken.yaml:3: "), err


def test_init_reads_its_base_with_the_same_bounds(project, capsys):
    (project / "stacks" / "Pulumi.bomb.yaml").write_text(BROKEN["an_alias_bomb"][0])
    code, _, err = _run(
        capsys,
        "init",
        "mine",
        "--region",
        "us-west-2",
        "--from",
        "bomb",
        "--admin",
        "arn:aws:iam::111122223333:role/Admin",
    )
    assert code == 2 and "stacks/Pulumi.bomb.yaml:1: expands to more than" in err and len(err.splitlines()) == 1, err
    assert not (project / "stacks" / "Pulumi.mine.yaml").exists()


def test_one_long_string_aliased_many_times_is_refused_by_its_expanded_size(tmp_path):
    path = tmp_path / "Pulumi.amplified.yaml"
    path.write_text("config:\n  a: &a " + "x" * 500_000 + "\n  b: [" + ", ".join(["*a"] * 20) + "]\n")
    start = time.process_time()
    with pytest.raises(StackFileError) as raised:
        read(path)
    assert f"expands to more than {MAX_EXPANDED:,} characters" in raised.value.message
    assert time.process_time() - start < 1


def test_a_stack_file_that_is_a_symbolic_link_is_refused_without_echoing_its_target(project, capsys, tmp_path_factory):
    secret = tmp_path_factory.mktemp("outside") / "shadow"
    secret.write_text("root:SECRETHASH:19000:0:99999:7:::\n")
    (project / "stacks" / "Pulumi.link.yaml").symlink_to(secret)
    code, _, err = _run(capsys, "plan", "link")
    assert code == 2 and err.startswith("stacks/Pulumi.link.yaml:1: is a symbolic link"), err
    assert "SECRETHASH" not in err and "shadow" not in err


# --- init: atomic and locked --------------------------------------------------------------------

ADMIN = init.Choices(admins=("arn:aws:iam::111122223333:role/Admin",))


def test_an_interrupted_init_leaves_nothing_behind(project, monkeypatch):
    from infra.offline import evaluate as offline

    class Interrupted(BaseException):  # as Ctrl-C is: not an Exception, so no handler swallows it
        pass

    def interrupted(*args, **kwargs):
        raise Interrupted

    monkeypatch.setattr(offline, "load_stack", interrupted)
    with pytest.raises(Interrupted):
        init.create("mine", "us-west-2", "dev", project, ADMIN)
    assert sorted(p.name for p in (project / "stacks").iterdir() if not p.name.startswith(".init")) == [
        "Pulumi.dev.yaml",
        "Pulumi.prod.yaml",
    ]
    assert sorted(p.name for p in (project / "policies" / "config").iterdir()) == ["dev.json", "prod.json"]


def test_two_inits_of_one_name_at_once_publish_one_stack_whole_and_refuse_the_other(project, monkeypatch):
    from infra.offline import evaluate as offline

    stacks = [init.new_stack("twin", region, "dev", project, ADMIN) for region in ("us-west-2", "us-east-2")]
    # Both validate (slowly, so that both are past the "exists already?" check before either writes).
    monkeypatch.setattr(offline, "load_stack", lambda *args, **kwargs: time.sleep(0.3))
    results: list[object] = []

    def run(stack):
        try:
            init.write(stack, project)
            results.append(stack.region)
        except Exception as exc:  # noqa: BLE001 - the refusal is the result
            results.append(exc)

    threads = [threading.Thread(target=run, args=(s,)) for s in stacks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [r for r in results if isinstance(r, str)]
    refused = [r for r in results if not isinstance(r, str)]
    assert len(won) == 1 and len(refused) == 1 and "exists already" in str(refused[0]), results
    written = (project / "stacks" / "Pulumi.twin.yaml").read_text()
    assert written == next(s.stack_text for s in stacks if s.region == won[0])
    assert not [p for p in (project / "stacks").iterdir() if p.name.endswith(".partial")]


# --- reports, option files, streams ------------------------------------------------------------


@pytest.mark.parametrize(
    "target", ["stacks/Pulumi.prod.yaml", "policies/config/prod.json", "Pulumi.yaml", "link-to-prod.txt"]
)
def test_a_report_is_never_written_over_a_stack_or_policy_file(project, target):
    from infra.cli.output import UsageError, write_report

    (project / "link-to-prod.txt").symlink_to(project / "stacks" / "Pulumi.prod.yaml")
    before = (project / target).read_text()
    with pytest.raises(UsageError, match="one of the project's own files"):
        write_report("--output", project / target, "report\n")
    assert (project / target).read_text() == before


def test_output_through_a_link_to_a_stack_file_is_refused_by_the_cli(project, capsys):
    (project / "report.txt").symlink_to(project / "stacks" / "Pulumi.prod.yaml")
    before = (project / "stacks" / "Pulumi.prod.yaml").read_text()
    code, _, err = _run(capsys, "cost", "dev", "--output", "report.txt")
    assert code == 2 and "would write over stacks/Pulumi.prod.yaml" in err, err
    assert (project / "stacks" / "Pulumi.prod.yaml").read_text() == before


def test_a_fifo_as_an_option_file_is_refused_at_once(project, capsys):
    fifo = project / "prices.fifo"
    os.mkfifo(fifo)
    result: list = []
    worker = threading.Thread(
        target=lambda: result.append(_run(capsys, "cost", "dev", "--prices", str(fifo))), daemon=True
    )
    worker.start()
    worker.join(10)
    if worker.is_alive():  # the old behaviour: blocked opening the FIFO; let it go before failing
        with open(fifo, "w"):
            pass
        worker.join(10)
        pytest.fail("reading a FIFO option file hung")
    code, _, err = result[0]
    assert code == 2 and "is not a regular file" in err, err


@pytest.mark.parametrize(
    "shell", ["{cli} stacks >&-", "{cli} stacks | head -c 0", "{stacks} | head -c 0", "{stacks} >&-"]
)
def test_a_closed_stdout_gives_no_traceback(project, shell):
    env = {"PYTHONPATH": str(ROOT), "PATH": os.environ["PATH"]}
    command = shell.format(cli=f"{sys.executable} -m infra.cli", stacks=f"{sys.executable} -m infra.offline.stacks")
    done = subprocess.run(
        ["bash", "-c", command + "; exit ${PIPESTATUS[0]}"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    assert done.returncode in (2, 141) and len(done.stderr.splitlines()) <= 1, (done.returncode, done.stderr)


def test_control_characters_in_a_key_are_escaped_and_a_long_key_is_cut(project, capsys):
    key = "\x1b]0;owned\x07\x1b[2J" + "k" * 500  # a plain key is at most 1024 characters as written
    (project / "stacks" / "Pulumi.esc.yaml").write_text(
        DEV.replace("  higgsfield:tags:\n", f'  higgsfield:tags:\n    "{key.encode("unicode_escape").decode()}": x\n')
    )
    code, _, err = _run(capsys, "plan", "esc")
    assert code == 2 and "\x1b" not in err and "\x07" not in err and "\\x1b]0;owned\\x07" in err, err
    assert all(len(line) < 2100 for line in err.splitlines())


def test_a_long_team_flag_is_not_echoed_whole(project, capsys):
    code, _, err = _run(
        capsys,
        "init",
        "mine",
        "--region",
        "us-west-2",
        "--admin",
        "arn:aws:iam::111122223333:role/Admin",
        "--team",
        "T" * 100_000,
    )
    assert code == 2 and len(err) < 3000, len(err)
