"""`higgsfield diff` on real two-commit repositories: replacements are named, destroying data
is refused without an allow, and adding a pool only adds."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from infra.cli.main import main
from infra.offline import diff as offline_diff
from infra.offline.diff import compare
from tests.conftest import ROOT


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True, capture_output=True
    )


# What a project of one's own holds (the program comes from the installed package): enough for
# every diff whose two commits differ only in stack files.
PROJECT_FILES = ("Pulumi.yaml", "stacks", "policies/config", "images/training")


def _committed_copy(into: Path, names: list[str]) -> Path:
    for name in names:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, into / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, into / name)
    _git(into, "init", "-q")
    _git(into, "add", "-A")
    _git(into, "commit", "-qm", "base")
    return into


@pytest.fixture(scope="module")
def _project_template(tmp_path_factory) -> Path:
    return _committed_copy(tmp_path_factory.mktemp("project"), list(PROJECT_FILES))


@pytest.fixture
def repo(_project_template: Path, tmp_path: Path, monkeypatch) -> Path:
    """A project (Pulumi.yaml, stack files, policy config, image sources) as a fresh git
    repository with one commit, the working directory."""
    shutil.copytree(_project_template, tmp_path / "repo")
    monkeypatch.chdir(tmp_path / "repo")
    return tmp_path / "repo"


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch) -> Path:
    """A copy of this checkout's files (tracked and not ignored), program included, as a fresh git
    repository with one commit, the working directory."""
    listed = [["ls-files"], ["ls-files", "--others", "--exclude-standard"]]
    files = [
        name
        for args in listed
        for name in subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.split()
    ]
    monkeypatch.chdir(_committed_copy(tmp_path, [name for name in files if (ROOT / name).is_file()]))
    return tmp_path


def _edit_stack(repo: Path, stack: str, change) -> None:
    path = repo / "stacks" / f"Pulumi.{stack}.yaml"
    doc = yaml.safe_load(path.read_text())
    change(doc["config"])
    path.write_text(yaml.safe_dump(doc))
    _git(repo, "commit", "-qam", "change")


def test_a_base_that_is_no_commit_is_refused_before_the_stack_is_evaluated(repo, capsys, monkeypatch):
    def evaluated(*args, **kwargs):
        raise AssertionError("the stack was evaluated for a base that cannot be read")

    monkeypatch.setattr(offline_diff, "record", evaluated)
    assert main(["diff", "dev", "--base", "no-such-ref"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--base 'no-such-ref' is not a commit of this repository" in err, err


@pytest.fixture
def project_without_git(tmp_path: Path, monkeypatch) -> Path:
    """A project of one's own before `git init` (what init makes in an empty folder)."""
    for name in ("Pulumi.yaml", "stacks", "policies/config"):
        source = ROOT / name
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copy)(source, tmp_path / name)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # no repository above it either
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_diff_outside_a_git_repository_says_so_and_how_to_make_one(project_without_git, capsys):
    assert main(["diff", "dev", "--base", "HEAD"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"{project_without_git} is not a git repository, and diff compares the stack with a commit of it" in err
    assert "`git init && git add -A && git commit -m start`" in err and "is not a commit of" not in err


def test_diff_in_a_folder_that_is_no_project_says_init_makes_one_not_how_to_make_a_repository(
    tmp_path, monkeypatch, capsys
):
    """An installed package run in an empty folder (this checkout's code would fall back to the checkout)."""
    from infra.offline import evaluate

    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(evaluate, "project_root", lambda: tmp_path)
    assert main(["diff", "dev", "--base", "HEAD"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"no Pulumi.yaml in {tmp_path} or above: not a project" in err, err


def test_diff_in_a_repository_without_a_commit_says_to_commit_first(project_without_git, capsys):
    _git(project_without_git, "init", "-q")
    assert main(["diff", "dev", "--base", "origin/main"]) == 2
    assert "this repository has no commit yet" in capsys.readouterr().err


def test_diff_of_a_project_inside_a_larger_repository_reads_the_projects_own_stacks(
    _project_template, tmp_path, monkeypatch, capsys
):
    project = tmp_path / "monorepo" / "platform"
    shutil.copytree(_project_template, project, ignore=shutil.ignore_patterns(".git"))
    _git(project.parent, "init", "-q")
    _git(project.parent, "add", "-A")
    _git(project.parent, "commit", "-qm", "base")
    monkeypatch.chdir(project)
    _edit_stack(project, "dev", lambda c: c["higgsfield:gpuPools"][0].update(instanceTypes=["g6e.4xlarge"]))
    assert main(["diff", "dev", "--base", "HEAD~1"]) == 0
    out = capsys.readouterr().out
    assert "+- aws:eks/nodeGroup:NodeGroup gpu-l40s  REPLACE because of instanceTypes" in out


def test_changing_a_gpu_pool_instance_type_reports_the_node_group_replacement(repo, capsys):
    _edit_stack(repo, "dev", lambda c: c["higgsfield:gpuPools"][0].update(instanceTypes=["g6e.4xlarge"]))
    assert main(["diff", "dev", "--base", "HEAD~1"]) == 0
    out = capsys.readouterr().out
    assert "+- aws:eks/nodeGroup:NodeGroup gpu-l40s  REPLACE because of instanceTypes" in out


def test_changing_fsx_deployment_type_is_refused_without_an_allow(repo, capsys):
    def to_scratch(config):
        config["higgsfield:fsx"] = {"enabled": True, "deploymentType": "SCRATCH_2", "storageCapacityGiB": 4800}

    _edit_stack(repo, "staging", to_scratch)
    assert main(["diff", "staging", "--base", "HEAD~1"]) == 1
    out, err = capsys.readouterr()
    (replace,) = [
        line
        for line in out.splitlines()
        if line.startswith("  +- aws:fsx/lustreFileSystem:LustreFileSystem lustre  REPLACE because of")
    ]
    assert "deploymentType" in replace
    assert "error: refused: replace of FSx file system lustre" in err


def test_an_explicit_allow_lets_the_fsx_replacement_through(repo, capsys):
    _edit_stack(
        repo,
        "staging",
        lambda c: c.update(
            {"higgsfield:fsx": {"enabled": True, "deploymentType": "SCRATCH_2", "storageCapacityGiB": 4800}}
        ),
    )
    # the new file system has no datasets: their claims go too, and the boundary and the deploy role's policy no
    # longer name the data set's bucket (an administrator's changes: refused without an allow)
    allows = ["lustre", "lustre-key", "claims", "delivery-boundary", "delivery-deploy"]
    assert main(["diff", "staging", "--base", "HEAD~1", *(a for name in allows for a in ("--allow", name))]) == 0
    assert "refused" not in "".join(capsys.readouterr())


def test_allow_replace_in_stack_config_lets_the_replacement_through(repo, capsys):
    def change(config):
        config["higgsfield:fsx"] = {"enabled": True, "deploymentType": "SCRATCH_2", "storageCapacityGiB": 4800}
        # its datasets' claims go too, and the boundary and the deploy role's policy change (they name its bucket)
        config["higgsfield:allowReplace"] = ["lustre", "lustre-key", "claims", "delivery-boundary", "delivery-deploy"]

    _edit_stack(repo, "staging", change)
    assert main(["diff", "staging", "--base", "HEAD~1"]) == 0


def test_adding_a_pool_replaces_and_deletes_nothing(repo, capsys):
    """The pool is added; the teams' queue, quota and admission policy change in place, since a team's
    share of the fleet is per GPU the most of any pool's nodes (issue 34)."""
    extra = {"name": "l40s-big", "instanceTypes": ["g6e.4xlarge"], "availabilityZone": "us-west-2b", "maxSize": 1}
    _edit_stack(repo, "dev", lambda c: c["higgsfield:gpuPools"].append(extra))
    assert main(["diff", "dev", "--base", "HEAD~1"]) == 0
    out = capsys.readouterr().out
    assert "(0 replaced), 0 to delete" in out
    assert "+ aws:eks/nodeGroup:NodeGroup gpu-l40s-big" in out
    changed = {line.split()[-1] for line in out.splitlines() if line.startswith("  ~ ")}
    # and the preview's by-name Roles, which name the new pool's ConfigMaps (the gate's, the deadline's)
    by_name = {
        f"delivery-preview-gets-{ns}{end}"
        for ns in ("higgsfield-capacity", "higgsfield-health")
        for end in ("", "-binding")
    }
    assert changed <= {"teams-ml-admission", "volcano-queue-ml", "teams-ml-compute", *by_name}, changed


def test_base_with_other_code_is_evaluated_with_its_own_code(checkout, capsys):
    """A change to the program between the commits: the base side runs the base's code."""
    main_py = checkout / "infra" / "__main__.py"
    main_py.write_text(main_py.read_text() + "\n# touched: the program's code differs between the commits\n")
    _git(checkout, "commit", "-qam", "touch the program")
    assert main(["diff", "dev", "--base", "HEAD~1"]) == 0
    assert "0 to add, 0 to change (0 replaced), 0 to delete" in capsys.readouterr().out


def test_deleting_the_cluster_key_is_refused():
    key = {
        "urn": "u1",
        "type": "aws:kms/key:Key",
        "name": "cluster-secrets",
        "inputs": {},
        "dependencies": [],
        "retain_on_delete": True,  # deleted from the stack, kept in AWS: no ScheduleKeyDeletion
    }
    diff = compare({"resources": [key]}, {"resources": []}, allowed=set())
    assert diff.refused == [
        "delete of KMS key cluster-secrets is refused: allow it with --allow cluster-secrets or higgsfield:allowReplace"
    ]


def test_moving_a_node_group_to_another_subnet_is_a_replacement_even_when_ids_are_unknown():
    group = {
        "urn": "g",
        "type": "aws:eks/nodeGroup:NodeGroup",
        "name": "gpu",
        "inputs": {"subnetIds": ["<computed>"]},
        "dependencies": ["subnet-a"],
    }
    moved = {**group, "dependencies": ["subnet-b"]}
    (change,) = compare({"resources": [group]}, {"resources": [moved]}, set()).changed
    assert change.replace_paths == ["subnetIds[0]"]


def _diff(repo: Path, capsys, stack: str, change, *args: str) -> tuple[int, str]:
    """Commit `change` to the stack file, then `higgsfield diff STACK --base HEAD~1 ARGS...`."""
    _edit_stack(repo, stack, change)
    rc = main(["diff", stack, "--base", "HEAD~1", *args])
    captured = capsys.readouterr()
    return rc, captured.out + captured.err  # the report on stdout, each refusal on stderr


# --- consequences: replacement follows the recorded dependencies -------------------------------


def test_changing_vpc_cidr_refuses_replacing_the_cluster_fsx_and_node_groups(repo, capsys):
    rc, out = _diff(repo, capsys, "staging", lambda c: c.update({"higgsfield:vpcCidr": "10.31.0.0/16"}))
    assert rc == 1
    assert "cidrBlock: 10.30.0.0/16 → 10.31.0.0/16" in out
    assert "error: refused: replace of cluster" in out
    assert "error: refused: replace of FSx file system" in out
    assert "+- aws:eks/nodeGroup:NodeGroup system-nodes  REPLACE" in out
    assert "computed from replaced aws:ec2/subnet:Subnet" in out


def test_reordering_availability_zones_refuses_replacing_the_cluster(repo, capsys):
    rc, out = _diff(
        repo, capsys, "dev", lambda c: c.update({"higgsfield:availabilityZones": ["us-west-2b", "us-west-2a"]})
    )
    assert rc == 1
    assert "error: refused: replace of cluster" in out
    assert "cidrBlock: 10.20.0.0/19 → 10.20.32.0/19" in out
    assert "+- aws:eks/nodeGroup:NodeGroup gpu-l40s  REPLACE because of subnetIds[0]\n" in out


def test_downgrading_kubernetes_is_refused(repo, capsys):
    rc, out = _diff(repo, capsys, "dev", lambda c: c.update({"higgsfield:kubernetesVersion": "1.34"}))
    assert rc == 1
    assert "error: refused: downgrade of Kubernetes" in out


def test_an_allow_lets_the_kubernetes_downgrade_through(repo, capsys):
    rc, out = _diff(
        repo,
        capsys,
        "dev",
        lambda c: c.update({"higgsfield:kubernetesVersion": "1.34"}),
        "--allow",
        "kubernetesVersion",
    )
    assert rc == 0
    assert "version: 1.35 → 1.34" in out


def test_shrinking_fsx_is_refused_as_a_replacement(repo, capsys):
    rc, out = _diff(repo, capsys, "prod", lambda c: c["higgsfield:fsx"].update(storageCapacityGiB=12000))
    assert rc == 1
    assert "storageCapacity: 24000 → 12000" in out
    assert "error: refused: replace of FSx file system" in out


def test_changing_a_prod_stacks_environment_is_refused(repo, capsys):
    rc, out = _diff(repo, capsys, "prod", lambda c: c.update({"higgsfield:environment": "staging"}))
    assert rc == 1
    assert "error: refused: changing the environment of a protected stack (prod → staging)" in out


def test_a_tag_change_updates_in_place_and_leaves_the_managed_policies_tags_to_an_administrator(repo, capsys):
    """The deploy role may not tag a managed policy (ManagedPoliciesAreFixed), so in a stack CI deploys the
    boundary's and the teams' log readers' new tags are an administrator's."""
    rc, out = _diff(
        repo,
        capsys,
        "dev",
        lambda c: c.update({"higgsfield:tags": {**c.get("higgsfield:tags", {}), "team": "research"}}),
    )
    assert rc == 1
    assert "(0 replaced)" in out
    assert "tags.team: ml-platform → research" in out
    assert "refused: a changed IAM managed policy monitoring-logs-team-" in out


def test_unchanged_computed_inputs_are_not_blamed():
    subnet = {
        "urn": "s",
        "type": "aws:ec2/subnet:Subnet",
        "name": "a",
        "inputs": {"tags": {"x": "1"}},
        "dependencies": [],
    }
    group = {
        "urn": "g",
        "type": "aws:eks/nodeGroup:NodeGroup",
        "name": "gpu",
        "inputs": {"subnetIds": ["<computed>"]},
        "dependencies": ["s"],
    }
    retagged = {**subnet, "inputs": {"tags": {"x": "2"}}}
    diff = compare({"resources": [subnet, group]}, {"resources": [retagged, group]}, set())
    assert [c.name for c in diff.changed] == ["a"] and not diff.replaced


def test_a_cascade_does_not_blame_inputs_computed_from_resources_that_stay(repo, capsys):
    _, out = _diff(
        repo, capsys, "dev", lambda c: c.update({"higgsfield:availabilityZones": ["us-west-2b", "us-west-2a"]})
    )
    assert "nodeRoleArn: computed from" not in out and "encryptionConfigKeyArn: computed from" not in out


def test_a_long_value_changed_past_its_shown_start_shows_where_it_differs():
    """Two CEL expressions alike for their first 100 characters: cut at the same 57, old and new read the same."""
    common = "variables.specs.all(s, !(((has(s.containers) ? s.containers : []) + " + "x" * 40
    change = offline_diff.Change(
        urn="urn:pulumi:prod::higgsfield::t::teams-llm-admission",
        type="kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy",
        name="teams-llm-admission",
        paths=["spec.validations[19].expression"],
        values={"spec.validations[19].expression": (common + "'h100'].exists(p, p == pool))", common + "'h200k'])")},
    )
    text = offline_diff.render_diff("prod", "base", offline_diff.Diff([], [], [change], []))
    (line,) = [row for row in text.splitlines() if "expression" in row]
    old, new = line.split(": ", 1)[1].split(" → ")
    assert old != new and "'h100'" in old and "'h200k'" in new
