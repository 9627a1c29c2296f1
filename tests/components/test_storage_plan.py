"""FSx for Lustre: next to the GPUs, encrypted, reachable only from nodes, kept in prod, linked
to S3, and mounted into every team namespace through valid Kubernetes objects."""

from __future__ import annotations

import pytest

from components.storage import (
    LAYOUT_TAG,
    LUSTRE_PATH_ANNOTATION,
    MOUNT_OPTIONS,
    PVC_NAME,
    layout_digest,
    layout_script,
    mountname_of,
    volume_handle,
)
from infra.cli.main import main
from infra.offline import kubernetes_schema
from infra.offline.evaluate import Plan, Resource, record
from infra.offline.manifests import manifests
from infra.offline.plan import lustre_throughput_mb_s
from tests.conftest import ROOT, STACKS, assert_plan_rejects, config_of, plan_of, set_field, set_key

FS = "aws:fsx/lustreFileSystem:LustreFileSystem"
CRD_KINDS = {"Queue", "PyTorchJob", "MPIJob"}
WITH_FSX = [s for s in STACKS if config_of(s).fsx.enabled]


@pytest.fixture(params=WITH_FSX)
def fsx_plan(request) -> Plan:
    return plan_of(request.param)


def _deps(plan: Plan, r: Resource, type_: str) -> list[Resource]:
    return plan.dependencies_of(r, type_)


def _closure(plan: Plan, r: Resource) -> set[str]:
    seen, todo = set(), list(r.dependencies)
    while todo:
        urn = todo.pop()
        if urn not in seen:
            seen.add(urn)
            todo.extend(plan.by_urn(urn).dependencies)
    return seen


def test_staging_and_prod_ship_fsx_and_dev_does_not():
    assert set(WITH_FSX) == {"staging", "prod"}
    assert plan_of("dev").of_type(FS) == []


def test_file_system_sits_in_the_subnet_of_every_efa_pool(fsx_plan):
    (fs,) = fsx_plan.of_type(FS)
    (fs_subnet,) = _deps(fsx_plan, fs, "aws:ec2/subnet:Subnet")
    for group in fsx_plan.of_type("aws:eks/nodeGroup:NodeGroup"):
        if group.inputs["labels"].get("vpc.amazonaws.com/efa.present") == "true":
            assert _deps(fsx_plan, group, "aws:ec2/subnet:Subnet") == [fs_subnet], group.name


def test_file_system_is_encrypted_with_our_rotating_key(fsx_plan):
    (fs,) = fsx_plan.of_type(FS)
    (key,) = _deps(fsx_plan, fs, "aws:kms/key:Key")
    assert key.inputs["enableKeyRotation"] is True
    assert fs.inputs["deploymentType"] == "PERSISTENT_2"


def test_lustre_ports_are_open_only_to_nodes_the_layout_client_and_the_file_system_itself(fsx_plan):
    (fs,) = fsx_plan.of_type(FS)
    (group,) = _deps(fsx_plan, fs, "aws:ec2/securityGroup:SecurityGroup")
    rules = [
        r
        for r in fsx_plan.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
        if group.urn in r.dependencies
    ]
    assert sorted({(r.inputs["fromPort"], r.inputs["toPort"]) for r in rules}) == [
        (988, 988),
        (1018, 1023),
    ]  # FSx Lustre guide
    assert all(
        r.inputs["ipProtocol"] == "tcp" and "referencedSecurityGroupId" in r.inputs and "cidrIpv4" not in r.inputs
        for r in rules
    )
    assert "ingress" not in group.inputs
    sources = {next(iter(set(r.dependencies) - {group.urn}), group.urn) for r in rules}
    assert any(fsx_plan.by_urn(u).type == "eks:index:Cluster" for u in sources)  # the node security group
    assert group.urn in sources  # itself
    (instance,) = fsx_plan.of_type("aws:ec2/instance:Instance")
    (layout_group,) = _deps(fsx_plan, instance, "aws:ec2/securityGroup:SecurityGroup")
    assert sources == {
        group.urn,
        layout_group.urn,
        *(u for u in sources if fsx_plan.by_urn(u).type == "eks:index:Cluster"),
    }


def test_file_system_does_not_wait_for_the_cluster(fsx_plan):
    (fs,) = fsx_plan.of_type(FS)
    assert not any(fsx_plan.by_urn(u).type == "eks:index:Cluster" for u in _closure(fsx_plan, fs))


def test_prod_protects_and_retains_the_file_system_and_its_key():
    plan = plan_of("prod")
    (fs,) = plan.of_type(FS)
    (key,) = _deps(plan, fs, "aws:kms/key:Key")
    assert fs.protect and fs.retain_on_delete and key.protect and key.retain_on_delete


@pytest.mark.parametrize("stack_name", ["staging", "prod"])
def test_s3_link_fills_its_dataset_and_exports_without_deletions(stack_name):
    import yaml

    wanted = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack_name}.yaml").read_text())["config"]["higgsfield:fsx"][
        "s3"
    ]
    plan = plan_of(stack_name)
    (link,) = plan.of_type("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation")
    assert link.inputs["dataRepositoryPath"] == wanted["importPath"]
    assert link.inputs["fileSystemPath"] == f"/datasets/{wanted['dataset']}"
    assert link.inputs["s3"]["autoExportPolicy"]["events"] == ["NEW", "CHANGED"]  # an rm on Lustre never deletes in S3
    assert ("autoImportPolicy" in link.inputs["s3"]) is wanted["autoImport"]


def test_export_of_deletions_only_when_the_stack_opts_in(project_copy):
    def opt_in(config):
        config[FSX] = {**config[FSX], "s3": {**config[FSX]["s3"], "exportDeletions": True}}

    plan = record("bad", root=project_copy("staging", opt_in))
    (link,) = plan.of_type("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation")
    assert link.inputs["s3"]["autoExportPolicy"]["events"] == ["NEW", "CHANGED", "DELETED"]


def _team_namespaces(plan: Plan) -> set[str]:
    return {
        n.inputs["metadata"]["name"]
        for n in plan.of_type("kubernetes:core/v1:Namespace")
        if "higgsfield.io/team" in n.inputs["metadata"].get("labels", {})
    }


def test_every_team_namespace_gets_a_read_write_many_claim_of_its_own_directory_only(fsx_plan):
    namespaces = _team_namespaces(fsx_plan)
    claims = {
        c.inputs["metadata"]["namespace"]: c
        for c in fsx_plan.of_type("kubernetes:core/v1:PersistentVolumeClaim")
        if c.inputs["metadata"]["name"] == PVC_NAME
    }
    volumes = {v.inputs["metadata"]["name"]: v for v in fsx_plan.of_type("kubernetes:core/v1:PersistentVolume")}
    assert set(claims) == namespaces and namespaces
    for ns, claim in claims.items():
        assert claim.inputs["spec"]["accessModes"] == ["ReadWriteMany"]
        volume = volumes[claim.inputs["spec"]["volumeName"]]
        assert volume.inputs["spec"]["claimRef"] == {"namespace": ns, "name": PVC_NAME}
        assert volume.inputs["spec"]["csi"]["driver"] == "fsx.csi.aws.com"
        assert volume.inputs["metadata"]["annotations"][LUSTRE_PATH_ANNOTATION] == f"/teams/{ns}"
        assert volume.inputs["spec"]["mountOptions"] == list(MOUNT_OPTIONS)


def test_no_namespace_can_claim_the_whole_file_system(fsx_plan):
    """The layout runs outside the cluster, so no volume of the file system root exists at all."""
    whole = [
        v
        for v in fsx_plan.of_type("kubernetes:core/v1:PersistentVolume")
        if v.inputs["metadata"]["annotations"][LUSTRE_PATH_ANNOTATION] == "/"
    ]
    assert whole == []


def test_subdirectory_mount_names_and_unique_volume_handles():
    assert mountname_of("abcdefgh", "/teams/llm") == "abcdefgh/teams/llm"  # dnsname@tcp:/abcdefgh/teams/llm
    assert mountname_of("abcdefgh", None) == "abcdefgh"
    assert len({volume_handle("fs-1", p) for p in ("/teams/a", "/teams/b", "/datasets/x", None)}) == 4


def test_prod_dataset_is_read_write_for_its_owner_read_only_for_readers_and_absent_elsewhere():
    plan = plan_of("prod")
    cfg = plan.config
    (dataset,) = cfg.fsx.datasets
    claim = f"dataset-{dataset.name}"
    volumes = {v.inputs["metadata"]["name"]: v for v in plan.of_type("kubernetes:core/v1:PersistentVolume")}
    by_team = {
        c.inputs["metadata"]["namespace"]: volumes[c.inputs["spec"]["volumeName"]]
        for c in plan.of_type("kubernetes:core/v1:PersistentVolumeClaim")
        if c.inputs["metadata"]["name"] == claim
    }
    assert set(by_team) == {dataset.owner, *dataset.readers}
    for team, volume in by_team.items():
        spec = volume.inputs["spec"]
        assert volume.inputs["metadata"]["annotations"][LUSTRE_PATH_ANNOTATION] == f"/datasets/{dataset.name}"
        reader = team != dataset.owner
        assert spec["csi"]["readOnly"] is reader
        assert ("ro" in spec["mountOptions"]) is reader
        assert spec["accessModes"] == (["ReadOnlyMany"] if reader else ["ReadWriteMany"])
    outsiders = {t.name for t in cfg.scheduler.teams} - set(by_team)
    assert not outsiders or all(
        claim
        not in {
            c.inputs["metadata"]["name"]
            for c in plan.of_type("kubernetes:core/v1:PersistentVolumeClaim")
            if c.inputs["metadata"]["namespace"] == t
        }
        for t in outsiders
    )


def _layout_script(plan: Plan) -> str:
    """The layout the plan's layout client runs: its user data is unknown offline (it names the
    file system's DNS name), so the client carries the script's digest, checked here."""
    cfg = plan.config
    script = layout_script(
        {t.name: t.uid for t in cfg.scheduler.teams},
        [(d.name, next(t.uid for t in cfg.scheduler.teams if t.name == d.owner)) for d in cfg.fsx.datasets],
    )
    (instance,) = plan.of_type("aws:ec2/instance:Instance")
    assert instance.inputs["tags"][LAYOUT_TAG] == layout_digest(script)
    return script


def test_layout_client_gives_each_team_directory_to_its_uid_before_any_team_volume_exists(fsx_plan):
    cfg = fsx_plan.config
    (instance,) = fsx_plan.of_type("aws:ec2/instance:Instance")
    script = _layout_script(fsx_plan)
    for team in cfg.scheduler.teams:
        assert f"chown {team.uid}:{team.uid} /fsx/teams/{team.name} && chmod 2770 /fsx/teams/{team.name}" in script
    for dataset in cfg.fsx.datasets:
        owner = next(t for t in cfg.scheduler.teams if t.name == dataset.owner)
        assert (
            f"chown {owner.uid}:{owner.uid} /fsx/datasets/{dataset.name} && chmod 2755 /fsx/datasets/{dataset.name}"
            in script
        )
    for volume in fsx_plan.of_type("kubernetes:core/v1:PersistentVolume"):
        assert instance.urn in volume.dependencies, volume.name
    (link,) = fsx_plan.of_type("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation")
    assert link.urn in instance.dependencies  # the link makes /datasets/NAME; the layout then gives it its owner


def test_a_new_layout_replaces_the_layout_client_so_it_runs_again(fsx_plan):
    a = layout_script({"llm": 20002}, [])
    b = layout_script({"llm": 20002, "vision": 20003}, [])
    assert a != b and "set -eu" in a
    (instance,) = fsx_plan.of_type("aws:ec2/instance:Instance")
    assert instance.inputs["userDataReplaceOnChange"] is True


def test_rendered_kubernetes_objects_validate_against_the_stack_kubernetes_version(plan, stack_settings):
    version = stack_settings["higgsfield:kubernetesVersion"]
    objects = manifests(plan)
    for obj in objects:
        if obj["kind"] in CRD_KINDS:
            continue  # no schema in kubernetes-validate; checked field by field in test_training_plan
        kubernetes_schema.validate(obj, version)
    if plan.of_type(FS):
        assert {"PersistentVolume", "PersistentVolumeClaim"} <= {o["kind"] for o in objects}


def test_fsx_csi_add_on_runs_with_a_pod_identity_role(fsx_plan):
    (addon,) = [a for a in fsx_plan.of_type("aws:eks/addon:Addon") if a.inputs["addonName"] == "aws-fsx-csi-driver"]
    (association,) = addon.inputs["podIdentityAssociations"]
    assert association["serviceAccount"] == "fsx-csi-controller-sa"
    assert addon.inputs["addonVersion"]
    assert any(fsx_plan.by_urn(u).type == "aws:iam/role:Role" for u in addon.dependencies)


def test_plan_shows_capacity_throughput_and_mount_path(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    main(["plan", "prod"])
    out = capsys.readouterr().out
    assert "24000 GiB x 500 MB/s/TiB = 12,000 MB/s" in out
    assert "PVC shared-data at /fsx" in out


def test_throughput_is_capacity_in_fsx_tib_times_the_rate():
    assert lustre_throughput_mb_s({"storageCapacity": 4800, "perUnitStorageThroughput": 250}) == 1200
    assert lustre_throughput_mb_s({"storageCapacity": 1200}) == 240  # SCRATCH_2: 200 MB/s/TiB


def test_scratch_file_system_uses_aws_key_and_links_s3_on_the_file_system(project_copy):
    root = project_copy(
        "dev",
        set_key(
            "higgsfield:fsx",
            {
                "enabled": True,
                "deploymentType": "SCRATCH_2",
                "storageCapacityGiB": 2400,
                "s3": {
                    "bucket": "dev-data",
                    "importPath": "s3://dev-data/in",
                    "exportPath": "s3://dev-data/out",
                    "autoImport": False,
                },
            },
        ),
    )
    plan = record("bad", root=root)
    (fs,) = plan.of_type(FS)
    assert "kmsKeyId" not in fs.inputs and "perUnitStorageThroughput" not in fs.inputs
    assert (fs.inputs["importPath"], fs.inputs["exportPath"], fs.inputs["autoImportPolicy"]) == (
        "s3://dev-data/in",
        "s3://dev-data/out",
        "NONE",
    )
    assert fs.protect is False


FSX = "higgsfield:fsx"
BAD = {
    "capacity_not_a_valid_size": (
        "staging",
        set_field(FSX, "storageCapacityGiB", 3000),
        f"{FSX}.storageCapacityGiB",
        "1200 or a multiple of 2400",
    ),
    "throughput_not_allowed": (
        "staging",
        set_field(FSX, "throughputPerTiB", 300),
        f"{FSX}.throughputPerTiB",
        "125, 250, 500, 1000",
    ),
    "throughput_on_scratch": (
        "staging",
        set_key(
            FSX, {"enabled": True, "deploymentType": "SCRATCH_2", "storageCapacityGiB": 1200, "throughputPerTiB": 125}
        ),
        f"{FSX}.throughputPerTiB",
        "SCRATCH_2 has a fixed",
    ),
    "zone_differs_from_efa_pools": (
        "staging",
        set_field(FSX, "availabilityZone", "us-east-1b"),
        f"{FSX}.availabilityZone",
        "differs from the EFA GPU pools' zone us-east-1a",
    ),
    "s3_path_not_a_url": (
        "staging",
        set_field(FSX, "s3", {"bucket": "b-data", "importPath": "b-data/train"}),
        f"{FSX}.s3.importPath",
        "not an s3:// URL",
    ),
    "s3_path_in_another_bucket": (
        "staging",
        set_field(FSX, "s3", {"bucket": "b-data", "importPath": "s3://other/train"}),
        f"{FSX}.s3.importPath",
        "not in bucket",
    ),
    "persistent_export_elsewhere": (
        "staging",
        set_field(FSX, "s3", {"bucket": "b-data", "importPath": "s3://b-data/in", "exportPath": "s3://b-data/out"}),
        f"{FSX}.s3.exportPath",
        "one S3 path both ways",
    ),
    "unknown_deployment_type": (
        "staging",
        set_field(FSX, "deploymentType", "PERSISTENT_1"),
        f"{FSX}.deploymentType",
        "PERSISTENT_2, SCRATCH_2",
    ),
    "s3_link_without_its_dataset": (
        "staging",
        set_field(
            FSX, "s3", {"bucket": "higgsfield-staging-datasets", "importPath": "s3://higgsfield-staging-datasets/train"}
        ),
        f"{FSX}.s3.dataset",
        "name the dataset",
    ),
    "s3_link_to_an_unknown_dataset": (
        "staging",
        set_field(FSX, "s3", {"bucket": "higgsfield-staging-datasets", "dataset": "nope"}),
        f"{FSX}.s3.dataset",
        "unknown dataset 'nope'",
    ),
    "dataset_owned_by_an_unknown_team": (
        "staging",
        set_field(FSX, "datasets", [{"name": "train", "owner": "robotics"}]),
        f"{FSX}.datasets[0].owner",
        "unknown team 'robotics'",
    ),
    "dataset_read_by_an_unknown_team": (
        "staging",
        set_field(FSX, "datasets", [{"name": "train", "owner": "llm", "readers": ["vision", "audio"]}]),
        f"{FSX}.datasets[0].readers[1]",
        "unknown team 'audio'",
    ),
    "duplicate_dataset": (
        "staging",
        set_field(FSX, "datasets", [{"name": "train", "owner": "llm"}] * 2),
        f"{FSX}.datasets[1]",
        "duplicate name 'train'",
    ),
    "backups_on_scratch": (
        "staging",
        set_key(
            FSX, {"enabled": True, "deploymentType": "SCRATCH_2", "storageCapacityGiB": 1200, "backupRetentionDays": 7}
        ),
        f"{FSX}.backupRetentionDays",
        "0 for SCRATCH_2",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_fsx_setting_exits_2_and_names_the_key(case, project_copy, capsys):
    assert_plan_rejects(project_copy, capsys, *BAD[case])
