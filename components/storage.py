"""FSx for Lustre next to the GPUs, and the volumes jobs mount it through."""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.addons import managed_addon
from components.cpu_nodes import SYSTEM_LABELS
from components.identity import pod_identity_role
from components.kubernetes_objects import KubernetesObject
from infra.config import Fsx
from infra.versions import AddonVersion

LUSTRE_PORTS = ((988, 988), (1018, 1023))  # docs.aws.amazon.com/fsx/latest/LustreGuide/limit-access-security-groups.html
MOUNT_OPTIONS = ("flock", "noatime")
PVC_NAME = "shared-data"
MOUNT_PATH = "/fsx"
CSI_DRIVER = "fsx.csi.aws.com"
CSI_CONTROLLER_SA = "fsx-csi-controller-sa"
TEAMS_DIR, DATASETS_DIR = "/teams", "/datasets"  # inside the file system: one directory per team / dataset
HEALTH_DIR, HEALTH_CLAIM = "/health", "lustre-health"  # the health gate's scratch directory (root only) and its claim
DATASET_CLAIM = "dataset-{name}"  # the claim of a shared dataset in each of its teams' namespaces
DATASET_MOUNT = "/datasets/{name}"
LUSTRE_PATH_ANNOTATION = "higgsfield.io/lustre-path"  # the directory a volume mounts, for people and tests
PLATFORM_NAMESPACE = "higgsfield-storage"  # where the layout job mounts the whole file system
TEAM_DIR_MODE, DATASET_DIR_MODE = "2770", "2755"  # setgid: new files keep the directory's group


def s3_path(dataset: str) -> str:
    """Where the S3 data repository association links: the dataset's directory."""
    return f"{DATASETS_DIR}/{dataset}"


def mountname_of(mount_name: str, path: str | None) -> str:
    """The PV's `mountname`: the driver mounts `dnsname@tcp:/MOUNTNAME` (node.go@v1.8.0), so a
    path after the file system's mount name is a Lustre subdirectory mount of just that path."""
    return f"{mount_name}{path}" if path else mount_name


def volume_handle(file_system_id: str, path: str | None) -> str:
    """Unique per volume: kubelet names a CSI volume by driver and handle, so two volumes of one
    file system on a node must not share it. The driver mounts from dnsname/mountname only and
    never parses the handle (node.go@v1.8.0)."""
    return f"{file_system_id}::{path or '/'}"


def layout_script(teams: Mapping[str, int], datasets: Sequence[tuple[str, int]]) -> str:
    """The shell script that makes each team's and dataset's directory with its owner and mode
    (idempotent; a directory of a team no longer configured is left as it is, data included)."""
    lines = ["set -eu", f"mkdir -p /fsx{TEAMS_DIR} /fsx{DATASETS_DIR} /fsx{HEALTH_DIR}", f"chmod 0755 /fsx{TEAMS_DIR} /fsx{DATASETS_DIR}", f"chmod 0700 /fsx{HEALTH_DIR}"]
    entries = [(f"{TEAMS_DIR}/{t}", uid, TEAM_DIR_MODE) for t, uid in sorted(teams.items())]
    entries += [(f"{DATASETS_DIR}/{d}", uid, DATASET_DIR_MODE) for d, uid in sorted(datasets)]
    for path, uid, mode in entries:
        where = shlex.quote(f"/fsx{path}")
        lines.append(f"mkdir -p {where} && chown {uid}:{uid} {where} && chmod {mode} {where}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class LustreArgs:
    cluster_name: str
    settings: Fsx
    lustre_version: str
    csi_addon: AddonVersion
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    node_security_group_id: pulumi.Input[str]
    namespaces: Mapping[str, pulumi.Resource]
    team_uids: Mapping[str, int]  # team -> its UID (= GID): owner of its directory
    layout_image: str
    provider: pulumi.ProviderResource
    addon_depends_on: Sequence[pulumi.Resource]
    protect: bool
    tags: Mapping[str, str]
    health_namespace: tuple[str, pulumi.Resource] | None = None  # the health gate's: a volume of HEALTH_DIR there


def csi_policy() -> str:
    """The CSI controller only describes file systems: volumes here are static (this stack creates
    the file system), so it needs no create, update (expand), delete or tag rights. The driver's
    whole FSx API is CreateFileSystem, DeleteFileSystem, DescribeFileSystems and UpdateFileSystem
    (kubernetes-sigs/aws-fsx-csi-driver:pkg/cloud/cloud.go@v1.8.0); it never tags.
    DescribeFileSystems takes no resource ARN, hence "*"."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": ["fsx:DescribeFileSystems"], "Resource": "*"}],
        }
    )


class LustreFileSystem(pulumi.ComponentResource):
    """FSx for Lustre in the GPU pools' AZ, mounted into every team namespace.

    Creates: a KMS key (PERSISTENT_2; SCRATCH_2 uses an AWS key), a security group allowing
    TCP 988 and 1018-1023 only from the node security group and itself, the file system,
    an S3 data repository association (PERSISTENT_2) or import/export paths (SCRATCH_2) with
    versioning enabled on the linked bucket (exports overwrite its objects), the
    aws-fsx-csi-driver add-on with a Pod Identity role; a one-shot Job in the platform namespace
    that makes /teams/TEAM (owner: the team's UID/GID, 2770) and /datasets/NAME (owner: the owning
    team, 2755); per team namespace a static PersistentVolume of *its own directory only* and a
    ReadWriteMany claim `shared-data`, and per shared dataset of the team a volume of that
    directory (read-write for the owner, read-only mount for readers) with claim `dataset-NAME`.
    Isolation is the mount: the CSI driver mounts `dnsname@tcp:/mountname` with the PV's
    `mountname` (kubernetes-sigs/aws-fsx-csi-driver:pkg/driver/node.go@v1.8.0), so a mountname of
    `MOUNT/teams/TEAM` is a Lustre subdirectory mount and nothing above it is reachable from the
    pod; PVs are cluster-scoped (teams cannot make one) and pinned to their claim by claimRef.
    Replaced when: deployment type, subnet (AZ), KMS key or S3 import path change - the data
    is lost then, which is why prod protects and retains the file system and its key.
    """

    def __init__(self, name: str, args: LustreArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("higgsfield:storage:LustreFileSystem", name, None, opts)
        fsx, tags = args.settings, dict(args.tags)
        child = pulumi.ResourceOptions(parent=self)
        keep = pulumi.ResourceOptions(parent=self, protect=args.protect, retain_on_delete=args.protect)

        key = None
        if fsx.deployment_type == "PERSISTENT_2":
            key = aws.kms.Key(f"{name}-key", description=f"FSx for Lustre of {args.cluster_name}", enable_key_rotation=True, deletion_window_in_days=30, tags=tags, opts=keep)
        # The group exists before the cluster does, so the file system (the slowest resource)
        # starts right after the VPC; the rule naming the node group comes once the cluster is up.
        group = aws.ec2.SecurityGroup(
            f"{name}-sg", vpc_id=args.vpc_id, description="FSx for Lustre: Lustre ports from cluster nodes only", tags=tags, opts=child
        )
        for lo, hi in LUSTRE_PORTS:
            for source, peer in (("self", group.id), ("nodes", args.node_security_group_id)):
                aws.vpc.SecurityGroupIngressRule(
                    f"{name}-lustre-{lo}-{source}",
                    security_group_id=group.id,
                    referenced_security_group_id=peer,
                    ip_protocol="tcp",
                    from_port=lo,
                    to_port=hi,
                    description=f"Lustre {lo}-{hi} from {source}",
                    tags=tags,
                    opts=child,
                )
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-egress", security_group_id=group.id, ip_protocol="-1", cidr_ipv4="0.0.0.0/0", description="replies and S3", tags=tags, opts=child
        )
        scratch_link = {}
        if fsx.s3 and fsx.deployment_type == "SCRATCH_2":
            scratch_link = {
                "import_path": fsx.s3.import_path,
                "export_path": fsx.s3.export_path,
                "auto_import_policy": "NEW_CHANGED_DELETED" if fsx.s3.auto_import else "NONE",
            }
        self.file_system = aws.fsx.LustreFileSystem(
            f"{name}",
            deployment_type=fsx.deployment_type,
            storage_type="SSD",
            storage_capacity=fsx.storage_capacity_gib,
            per_unit_storage_throughput=fsx.throughput_per_tib if fsx.deployment_type == "PERSISTENT_2" else None,
            file_system_type_version=args.lustre_version,
            subnet_ids=args.subnet_id,
            security_group_ids=[group.id],
            kms_key_id=key.arn if key else None,
            data_compression_type=fsx.compression,
            automatic_backup_retention_days=fsx.backup_retention_days,
            copy_tags_to_backups=fsx.backup_retention_days > 0,
            tags={**tags, "Name": f"{args.cluster_name}-lustre"},
            opts=keep,
            **scratch_link,
        )
        link = None
        if fsx.s3 and (fsx.deployment_type == "PERSISTENT_2" or fsx.s3.export_path):
            # The file system writes back into the bucket (NEW and CHANGED files export, over the
            # S3 copy): the bucket keeps every version, so an overwrite by the dataset's owner team
            # (or a bad job) is recoverable (`aws s3api list-object-versions`). Retained on
            # delete: deleting the resource would suspend versioning (pulumi_aws.s3.BucketVersioning
            # @7.51.1 docstring). Noncurrent versions are kept until the bucket's own lifecycle
            # rules expire them (ours would replace the owner's whole lifecycle configuration).
            aws.s3.BucketVersioning(
                f"{name}-s3-versioning", bucket=fsx.s3.bucket,
                versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(status="Enabled"),
                opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True))
        if fsx.s3 and fsx.deployment_type == "PERSISTENT_2":
            # Deletions on Lustre reach S3 only when the stack asks (export_deletions): an
            # `rm -rf` in a pod must not delete the S3 copy of a dataset.
            exported = ["NEW", "CHANGED"] + (["DELETED"] if fsx.s3.export_deletions else [])
            link = aws.fsx.DataRepositoryAssociation(
                f"{name}-s3",
                file_system_id=self.file_system.id,
                data_repository_path=fsx.s3.import_path,
                file_system_path=s3_path(fsx.s3.dataset),
                batch_import_meta_data_on_create=True,
                s3=aws.fsx.DataRepositoryAssociationS3Args(
                    auto_import_policy=aws.fsx.DataRepositoryAssociationS3AutoImportPolicyArgs(events=["NEW", "CHANGED", "DELETED"]) if fsx.s3.auto_import else None,
                    auto_export_policy=aws.fsx.DataRepositoryAssociationS3AutoExportPolicyArgs(events=exported),
                ),
                tags=tags,
                opts=child,
            )

        role, _ = pod_identity_role(f"{name}-csi", tags, self, inline_policy=csi_policy())
        csi = managed_addon(
            f"{name}-csi", args.cluster_name, args.csi_addon, tags=tags, identity=(role.arn, CSI_CONTROLLER_SA),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.addon_depends_on)),
        )

        layout = self._layout(name, args, csi_depends=[*args.addon_depends_on, csi], link=link)
        for team, ns in args.namespaces.items():
            self._volume(name, args, team, "shared", PVC_NAME, f"{TEAMS_DIR}/{team}", ns, layout, read_only=False)
            for dataset in fsx.datasets:
                if team == dataset.owner or team in dataset.readers:
                    claim = DATASET_CLAIM.format(name=dataset.name)
                    self._volume(name, args, team, f"ds-{dataset.name}", claim, f"{DATASETS_DIR}/{dataset.name}", ns, layout, read_only=team != dataset.owner)
        if args.health_namespace is not None:  # the gate writes and reads a file here on every new node
            namespace, ns = args.health_namespace
            volume, claim_obj = self._pv_claim(args, f"{args.cluster_name}-fsx-health", namespace, HEALTH_CLAIM, HEALTH_DIR, read_only=False)
            opts = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[ns, layout])
            KubernetesObject(f"{name}-pv-health", volume, opts=opts)
            KubernetesObject(f"{name}-pvc-health", claim_obj, opts=opts)
        self.register_outputs({"file_system_id": self.file_system.id, "dns_name": self.file_system.dns_name})

    def _pv_claim(self, args: LustreArgs, pv_name: str, namespace: str, claim: str, subpath: str | None, read_only: bool) -> tuple[dict, dict]:
        fsx = args.settings
        access = ["ReadOnlyMany"] if read_only else ["ReadWriteMany"]
        mountname = self.file_system.mount_name.apply(lambda m: mountname_of(m, subpath))
        volume = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv_name, "labels": {"higgsfield.io/storage": "fsx"}, "annotations": {LUSTRE_PATH_ANNOTATION: subpath or "/"}},
            "spec": {
                "capacity": {"storage": f"{fsx.storage_capacity_gib}Gi"},
                "volumeMode": "Filesystem",
                "accessModes": access,
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "mountOptions": [*MOUNT_OPTIONS, *(["ro"] if read_only else [])],
                "claimRef": {"namespace": namespace, "name": claim},
                "csi": {
                    "driver": CSI_DRIVER,
                    "volumeHandle": self.file_system.id.apply(lambda i: volume_handle(i, subpath)),
                    "readOnly": read_only,
                    "volumeAttributes": {"dnsname": self.file_system.dns_name, "mountname": mountname},
                },
            },
        }
        claim_obj = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {"accessModes": access, "storageClassName": "", "volumeName": pv_name, "resources": {"requests": {"storage": f"{fsx.storage_capacity_gib}Gi"}}},
        }
        return volume, claim_obj

    def _volume(self, name: str, args: LustreArgs, team: str, suffix: str, claim: str, subpath: str, ns: pulumi.Resource, layout: pulumi.Resource, *, read_only: bool) -> None:
        """A team's volume of one directory (and its claim), once the directory exists."""
        pv_name = f"{args.cluster_name}-fsx-{team}" if suffix == "shared" else f"{args.cluster_name}-fsx-{team}-{suffix}"
        volume, claim_obj = self._pv_claim(args, pv_name, team, claim, subpath, read_only)
        key = "" if suffix == "shared" else f"-{suffix}"
        opts = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[ns, layout])
        KubernetesObject(f"{name}-pv-{team}{key}", volume, opts=opts)
        KubernetesObject(f"{name}-pvc-{team}{key}", claim_obj, opts=opts)

    def _layout(self, name: str, args: LustreArgs, csi_depends: Sequence[pulumi.Resource], link: pulumi.Resource | None) -> pulumi.Resource:
        """The platform namespace, a volume of the whole file system there, and the Job that
        makes the team and dataset directories with their owners. Its name carries a hash of
        the layout, so a new team or dataset runs a new Job."""
        fsx = args.settings
        datasets = [(d.name, args.team_uids[d.owner]) for d in fsx.datasets]
        script = layout_script(args.team_uids, datasets)
        digest = hashlib.sha256(script.encode()).hexdigest()[:8]
        in_cluster = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(csi_depends))
        namespace = KubernetesObject(f"{name}-platform-namespace", {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": PLATFORM_NAMESPACE, "labels": {"pod-security.kubernetes.io/enforce": "baseline"}},
        }, opts=in_cluster)
        volume, claim = self._pv_claim(args, f"{args.cluster_name}-fsx-root", PLATFORM_NAMESPACE, "lustre-root", None, read_only=False)
        after_ns = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[namespace])
        KubernetesObject(f"{name}-pv-root", volume, opts=after_ns)
        root_claim = KubernetesObject(f"{name}-pvc-root", claim, opts=after_ns)
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": f"lustre-layout-{digest}", "namespace": PLATFORM_NAMESPACE},
            "spec": {
                "backoffLimit": 3,
                "template": {
                    "spec": {
                        "restartPolicy": "OnFailure",
                        "automountServiceAccountToken": False,
                        "nodeSelector": dict(SYSTEM_LABELS),
                        "containers": [{
                            "name": "layout",
                            "image": args.layout_image,
                            "command": ["sh", "-c", script],
                            # root, for chown; only the two capabilities that needs.
                            "securityContext": {
                                "runAsUser": 0, "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]},
                                "seccompProfile": {"type": "RuntimeDefault"},
                            },
                            "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
                            "volumeMounts": [{"name": "lustre", "mountPath": MOUNT_PATH}],
                        }],
                        "volumes": [{"name": "lustre", "persistentVolumeClaim": {"claimName": "lustre-root"}}],
                    }
                },
            },
        }
        depends = [root_claim, *([link] if link is not None else [])]
        return KubernetesObject(f"{name}-layout", job, opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=depends, delete_before_replace=True))
