"""`higgsfield verify` as a newcomer meets it on day one: a mistyped option is refused in one line naming it before
any credential is looked up or any check runs (a report that cannot be written, a selection that leaves nothing, a
trial option without a trial), the kubeconfig of another cluster is caught even when `aws.cluster` is left out, and
`--list` says the rights each check needs."""

from __future__ import annotations

import json

import pytest

from infra.cli.main import main
from infra.cli.verify import checks
from tests.cli.test_verify_checks import STACK
from tests.cli.test_verify_run import cluster, nothing, recorded_once  # noqa: F401 - fixtures

# --- reports that could not be written: refused before the checks, not after ---------------------------------------


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--json", "{tmp}/no-such-folder/report.json"], "--json"),
        (["-o", "{tmp}/no-such-folder/report.txt"], "--output"),
        (["-o", "{tmp}"], "--output"),
        (["-o", "stacks/Pulumi.prod.yaml"], "--output"),
        (["--json", "-o", "yaml"], "--json and -o yaml"),
        (["--save", "{tmp}/a-file/measured.json", "--allow-cost", "--only", "trial.gang"], "--save"),
    ],
)
def test_a_report_that_cannot_be_written_is_refused_before_any_check_runs(cluster, capsys, tmp_path, options, named):
    (tmp_path / "a-file").write_text("")
    args = [o.replace("{tmp}", str(tmp_path)) for o in options]
    only = [] if "--only" in args else ["--only", "kube.api"]
    assert main(["verify", STACK, *only, *args]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"error: {named}") and err.count("\n") == 1 and out == ""
    assert cluster.requests == []  # nothing was asked of the cluster


def test_save_makes_the_folder_it_names_as_the_docs_example_does(cluster, monkeypatch, tmp_path):
    """docs/verify.md saves to `measured/prod.json`, a folder no project has yet: the figures a trial paid for are
    written there, not lost to a missing folder after the trial."""
    from infra.cli import verify
    from infra.cli.verify import trial

    def timed(ctx):
        ctx.found["timings"] = {"h100": {"instance_type": "p5.48xlarge", "nodes": 1, "scale_up_s": 95.0,
                                         "node_boot_s": 240.0, "gate_s": 170.0, "image_pull_s": 2.0,
                                         "first_step_s": 540.0}}  # fmt: skip
        return verify.passed("timed")

    monkeypatch.setattr(trial, "run", timed)
    monkeypatch.setattr("infra.offline.pods.image_tag", lambda: "abc123")
    saved = tmp_path / "measured" / "prod.json"
    assert main(["verify", STACK, "--only", "trial.gang", "--allow-cost", "--save", str(saved)]) == 0
    assert json.loads(saved.read_text())["pools"]["h100"]["first_step_s"] == 540.0


def test_leaving_out_every_check_is_a_usage_error_not_a_pass(nothing, capsys):
    prefixes = sorted({s.id.split(".")[0] + "." for s in checks.specs()})
    assert main(["verify", STACK, *[a for p in prefixes for a in ("--skip", p)]]) == 2
    assert capsys.readouterr().err.startswith("error: --only/--skip: leave no check to run")


# --- the trial's options: checked before credentials, named as the user typed them ---------------------------------


def test_a_pool_the_stack_lacks_is_refused_naming_pool_before_credentials(nothing, capsys):
    assert main(["verify", STACK, "--allow-cost", "--pool", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --pool: no GPU pool 'nope' in stack prod") and err.count("\n") == 1


def test_a_trial_of_no_nodes_is_refused_before_credentials(nothing, capsys):
    assert main(["verify", STACK, "--allow-cost", "--nodes", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: --nodes: must be between 1 and")


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--pool", "nope"], "--pool"),
        (["--nodes", "-1"], "--nodes"),
        (["--keep"], "--keep"),
        (["--allow-cost", "--only", "kube.", "--pool", "h100"], "--pool"),
    ],
)
def test_a_trial_option_where_no_trial_runs_is_refused_not_ignored(nothing, capsys, options, named):
    assert main(["verify", STACK, *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {named}: ") and "trial" in err and err.count("\n") == 1
