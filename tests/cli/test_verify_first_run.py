"""`higgsfield verify` as a newcomer meets it on day one: a mistyped option is refused in one line naming it before
any credential is looked up or any check runs (a report that cannot be written, a selection that leaves nothing, a
trial option without a trial), the kubeconfig of another cluster is caught even when `aws.cluster` is left out, and
`--list` says the rights each check needs."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from infra.cli.main import main
from infra.cli.verify import checks
from infra.core import names
from tests.cli.test_verify_checks import STACK
from tests.cli.test_verify_run import TRIAL_TIMINGS, cluster, nothing, recorded_once  # noqa: F401 - fixtures

REGION = "us-east-2"  # stacks/Pulumi.prod.yaml's


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
        ctx.found["timings"] = copy.deepcopy(TRIAL_TIMINGS)
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


@pytest.mark.parametrize(
    "options",
    [["--only", "", "--allow-cost"], ["--only", ","], ["--skip", ""]],
    ids=["only-empty-with-allow-cost", "only-commas", "skip-empty"],
)
def test_a_selection_that_names_no_check_is_refused_not_read_as_every_check(cluster, capsys, options):
    """`--only "$CHECK"` with CHECK unset ran every check, with --allow-cost a paid trial too."""
    assert main(["verify", STACK, *options]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"error: {options[0]} {options[1]!r}: names no check") and err.count("\n") == 1
    assert out == "" and cluster.requests == []


# --- a report to a file or as JSON: the run still shows each check as it ends -------------------------------------


def _seen_when_leases_runs(monkeypatch, capsys) -> dict[str, str]:
    """What stdout and stderr held when kube.leases, the second check, started."""
    from infra.cli import verify

    seen: dict[str, str] = {}

    def leases(ctx):
        seen["out"], seen["err"] = capsys.readouterr()
        return verify.passed("held")

    monkeypatch.setattr(checks, "leases", leases)
    return seen


def test_with_json_to_a_file_each_checks_line_shows_as_it_ends(cluster, monkeypatch, capsys, tmp_path):
    seen = _seen_when_leases_runs(monkeypatch, capsys)
    report = tmp_path / "report.json"
    assert main(["verify", STACK, "--only", "kube.api,kube.leases", "--json", str(report)]) == 0
    assert "PASS  kube.api" in seen["out"]
    assert "PASS  kube.leases" in capsys.readouterr().out
    assert [c["id"] for c in json.loads(report.read_text())["checks"]] == ["kube.api", "kube.leases"]


def test_with_json_on_stdout_each_checks_line_goes_to_stderr_as_it_ends(cluster, monkeypatch, capsys):
    seen = _seen_when_leases_runs(monkeypatch, capsys)
    assert main(["verify", STACK, "--only", "kube.api,kube.leases", "--json"]) == 0
    assert "PASS  kube.api" in seen["err"] and seen["out"] == ""
    out, err = capsys.readouterr()
    assert json.loads(out)["counts"]["PASS"] == 2 and "PASS  kube.leases" in err


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


# --- the kubeconfig --------------------------------------------------------------------------------------------------


def test_without_a_kubeconfig_the_refusal_names_the_stacks_own_update_kubeconfig(nothing, monkeypatch, capsys):
    assert main(["verify", STACK, "--only", "kube."]) == 2
    err = capsys.readouterr().err
    assert f"aws eks update-kubeconfig --name {names.cluster_name(STACK)} --region {REGION}`" in err


def test_a_kubeconfig_that_is_not_yaml_is_refused_naming_it(nothing, monkeypatch, capsys, tmp_path):
    (tmp_path / "kubeconfig").write_text("{{{ not yaml")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    assert main(["verify", STACK, "--only", "kube."]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: verify prod: kubeconfig {tmp_path / 'kubeconfig'} cannot be used: not YAML")
    assert err.count("\n") == 1


def _arn_kubeconfig(path, server: str, cluster_name: str, region: str = REGION) -> str:
    """A kubeconfig as `aws eks update-kubeconfig` writes it: the cluster entry and the context named by the
    cluster's ARN (aws/aws-cli:awscli/customizations/eks/update_kubeconfig.py@01e092bd14440bf96585c32c6e42be51c6a9b6de
    EKSClient.get_cluster_entry)."""
    arn = f"arn:aws:eks:{region}:123456789012:cluster/{cluster_name}"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": arn, "cluster": {"server": server}}],
                "users": [{"name": arn, "user": {"token": "t"}}],
                "contexts": [{"name": arn, "context": {"cluster": arn, "user": arn}}],
                "current-context": arn,
            }
        )
    )
    return str(path)


def test_the_kubeconfig_of_another_eks_cluster_fails_kube_api_without_aws_cluster(
    cluster, monkeypatch, capsys, tmp_path
):
    """`--only kube.` (the docs' own example) leaves aws.cluster out, so the endpoint is not read: the kubeconfig's
    cluster entry, an ARN, still says it is staging's, and no cluster check runs against it."""
    other = names.cluster_name("staging")
    monkeypatch.setenv("KUBECONFIG", _arn_kubeconfig(tmp_path / "kubeconfig", cluster.url, other))
    assert main(["verify", STACK, "--only", "kube.", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    api = next(c for c in report["checks"] if c["id"] == "kube.api")
    assert api["status"] == "FAIL" and f"cluster/{other}" in api["evidence"]
    assert api["fix"] == f"aws eks update-kubeconfig --name {names.cluster_name(STACK)} --region {REGION}"
    assert {c["status"] for c in report["checks"] if c["id"] != "kube.api"} == {"SKIP"}


def test_the_stacks_own_kubeconfig_passes_kube_api_without_aws_cluster(cluster, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("KUBECONFIG", _arn_kubeconfig(tmp_path / "kubeconfig", cluster.url, names.cluster_name(STACK)))
    assert main(["verify", STACK, "--only", "kube.api"]) == 0
    assert "PASS  kube.api" in capsys.readouterr().out


def test_kube_api_says_when_it_could_not_compare_the_clusters_endpoint(cluster, capsys):
    """A kubeconfig whose cluster entry is no EKS ARN (renamed by hand), aws.cluster left out: a pass, saying so."""
    assert main(["verify", STACK, "--only", "kube.api"]) == 0
    assert "not compared with the stack's endpoint" in capsys.readouterr().out


# --- the account -----------------------------------------------------------------------------------------------------


def test_a_missing_cluster_says_verify_asked_the_stacks_region_not_the_profiles(nothing, monkeypatch, capsys):
    """The region asked is the stack's `region`, whatever AWS_REGION or the profile says: the run's first line names
    it, and a cluster not found there does not send the user to change their profile's region."""
    from moto import mock_aws

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    with mock_aws():
        assert main(["verify", STACK, "--only", "aws.cluster"]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith(f" in {REGION}")
    assert "DescribeCluster failed: ResourceNotFoundException" in out
    assert f"-> are the credentials the stack's account's? verify asks the stack's region ({REGION})" in out


def test_a_profile_that_does_not_exist_is_refused_saying_what_to_do(nothing, monkeypatch, capsys):
    monkeypatch.setenv("AWS_PROFILE", "nope")
    assert main(["verify", STACK, "--only", "aws.cluster"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: verify prod: no AWS credentials (ProfileNotFound: ")
    assert err.rstrip().endswith("for the stack's account, then rerun") and err.count("\n") == 1


# --- --list ----------------------------------------------------------------------------------------------------------


def test_list_says_the_rights_each_check_needs(nothing, capsys):
    assert main(["verify", "--list"]) == 0
    out = capsys.readouterr().out
    flat = "".join(out.split())
    assert all("".join(s.rights.split()) in flat for s in checks.specs())
    assert max(len(line) for line in out.splitlines()) <= 120


def test_list_reads_the_account_before_the_cluster_as_the_journey_does(nothing, capsys):
    """docs/verify.md: the checks run in the day-one journey's order, the account's before the kubeconfig's; only the
    training pods' logs, which need a job to have run, come after the cluster's."""
    ids = [s.id for s in checks.specs()]
    after_kube = [i for i in ids[ids.index("kube.api") :] if i.startswith("aws.")]
    assert after_kube == ["aws.container-logs"]
