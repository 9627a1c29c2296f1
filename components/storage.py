"""FSx for Lustre next to the GPUs, and the volumes jobs mount it through."""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.addons import managed_addon
from components.identity import pod_identity_role
from components.kubernetes_objects import KubernetesObject, deny_binding
from components.logs import account_key_policy, key_with_policy
from components.node_admission import FIXED_NODE_FIELDS_MESSAGE, fixed_node_fields_unchanged
from infra.config import Fsx
from infra.core.names import KUBE_SYSTEM, NODE_NAME_EXTRA
from infra.core.versions import AddonVersion

LUSTRE_PORTS = (
    (988, 988),
    (1018, 1023),
)  # docs.aws.amazon.com/fsx/latest/LustreGuide/limit-access-security-groups.html
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
TEAM_DIR_MODE, DATASET_DIR_MODE = "2770", "2755"  # setgid: new files keep the directory's group
# Inside each dataset, the owner's checkpoints (higgsfield:checkpoints.exportToS3 writes there, so the
# S3 link exports them): the owner's UID alone - the dataset itself is world-readable (2755) for its reader
# teams, whose pods mount it whole, and model weights are not theirs to read. No group bits: a reader's pod
# carries more GIDs than the team policy names, every group its image's /etc/group lists its UID's /etc/passwd name
# in (supplementalGroupsPolicy Merge, Kubernetes' default: containerSpecOpts in containerd/containerd:internal/cri/
# server/container_create_linux.go@v2.1.9 adds WithAdditionalGIDs, containerd/containerd:pkg/oci/spec_opts.go@v2.1.9;
# containerd 2.1 is the EKS AL2023 AMIs' from Kubernetes 1.32, awslabs/amazon-eks-ami#2469, and 1.7 and 2.2 do the
# same), the owner's among them if its image says so. The owner's pods run as its UID (the team policy), so they need
# none; nor does the S3 link's export, which holds no team's GID, so 2770's group bits gave it nothing 2700 takes
# away (FSx exports the mode as metadata: docs.aws.amazon.com/fsx/latest/LustreGuide/posix-metadata-support.html,
# checked 2026-12-07). The kubelet leaves the mode alone: the driver's fsGroupPolicy skips our volumes
# (docs/security-platform.md). (A team directory is reached by its own claim only.)
DATASET_CHECKPOINTS = "checkpoints"
DATASET_CHECKPOINTS_MODE = "2700"
TEAMS_DIR_MODE = "0711"  # traverse only: no client but root lists the team names
# Root squash (FSx API LustreRootSquashConfiguration: RootSquash "UID:GID", NoSquashNids
# "a.b.c.d@tcp": botocore/data/fsx/2018-03-01/service-2.json@0e6e2404b; pulumi-aws
# fsx.LustreFileSystemRootSquashConfigurationArgs root_squash, no_squash_nids): root on every
# client, every node included, is nobody on the file system. The only client exempted is the
# layout client (LAYOUT_CLIENT_*), the one machine that must chown directories to team UIDs.
NOBODY = 65534
ROOT_SQUASH = f"{NOBODY}:{NOBODY}"
HEALTH_DIR_OWNER, HEALTH_DIR_MODE = NOBODY, "0700"  # the gate runs as root, squashed to nobody
# The layout client: a small EC2 instance in the file system's subnet at an address held by an
# explicit subnet CIDR reservation (EC2 assigns addresses from an explicit reservation only when
# asked by address, so no node or pod ENI - the VPC CNI asks for any free address - gets it:
# docs.aws.amazon.com/vpc/latest/userguide/subnet-cidr-reservation.html; SubnetCidrReservationType
# "explicit", botocore/data/ec2/2016-11-15/service-2.json@0e6e2404b). It boots, installs the
# Lustre client (dnf install lustre-client on AL2023: docs.aws.amazon.com/fsx/latest/LustreGuide/
# install-lustre-client.html), mounts the file system, runs layout_script as root (not squashed:
# its NID is the only NoSquashNids entry), unmounts and powers off (instance-initiated shutdown:
# stop; `aws ec2 get-console-output` shows `higgsfield-lustre-layout-done DIGEST`). A new layout changes its user data
# and replaces it (user_data_replace_on_change), which
# runs the new layout once. It has no instance profile (it calls no AWS API) and IMDSv2 only.
LAYOUT_CLIENT_TYPE = "t3.small"
LAYOUT_TAG = "higgsfield.io/lustre-layout"  # the layout script's digest, on the layout client: which layout ran
# docs.aws.amazon.com/linux/al2023/ug/ec2.html
LAYOUT_CLIENT_AMI = "resolve:ssm:/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"


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


def layout_client_ip(subnet_cidr: str) -> str:
    """The layout client's address: the subnet's last usable one (AWS reserves the broadcast address)."""
    return str(ipaddress.ip_network(subnet_cidr)[-2])


def layout_script(teams: Mapping[str, int], datasets: Sequence[tuple[str, int]]) -> str:
    """The shell script that makes each team's and dataset's directory with its owner and mode
    (idempotent; a directory of a team no longer configured is left as it is, data included).
    /teams is traverse-only; a team's directory is its UID's and GID's alone (2770: no access for
    any other UID, a squashed root included); /health belongs to nobody, which the root-running
    health gate is squashed to. Each dataset is readable by its reader teams (2755) but for its
    `checkpoints` directory, its owner's UID's alone (2700)."""
    lines = [
        "set -eu",
        f"mkdir -p /fsx{TEAMS_DIR} /fsx{DATASETS_DIR} /fsx{HEALTH_DIR}",
        f"chown 0:0 /fsx{TEAMS_DIR} /fsx{DATASETS_DIR} && chmod {TEAMS_DIR_MODE} /fsx{TEAMS_DIR} && chmod 0755 "
        f"/fsx{DATASETS_DIR}",
        f"chown {HEALTH_DIR_OWNER}:{HEALTH_DIR_OWNER} /fsx{HEALTH_DIR} && chmod {HEALTH_DIR_MODE} /fsx{HEALTH_DIR}",
    ]
    entries = [(f"{TEAMS_DIR}/{t}", uid, TEAM_DIR_MODE) for t, uid in sorted(teams.items())]
    for d, uid in sorted(datasets):
        entries += [
            (f"{DATASETS_DIR}/{d}", uid, DATASET_DIR_MODE),
            (f"{DATASETS_DIR}/{d}/{DATASET_CHECKPOINTS}", uid, DATASET_CHECKPOINTS_MODE),
        ]
    for path, uid, mode in entries:
        where = shlex.quote(f"/fsx{path}")
        lines.append(f"mkdir -p {where} && chown {uid}:{uid} {where} && chmod {mode} {where}")
    return "\n".join(lines) + "\n"


def layout_of(settings: Fsx, team_uids: Mapping[str, int]) -> str:
    """The layout script of a stack's FSx settings and its teams' UIDs: what the layout client runs, and what
    `higgsfield verify` (aws.layout-client) holds its live user data to."""
    return layout_script(team_uids, [(d.name, team_uids[d.owner]) for d in settings.datasets])


def layout_digest(script: str) -> str:
    return hashlib.sha256(script.encode()).hexdigest()[:16]


def layout_user_data(script: str, dns_name: str, mount_name: str) -> str:
    """The layout client's boot script: mount as root (exempt from squash), lay out, power off."""
    return (
        "\n".join(
            [
                "#!/bin/bash",
                "set -euxo pipefail",
                "trap 'shutdown -h now' EXIT",  # stop whatever happens; the console output says how it went
                "dnf install -y lustre-client",
                f"mkdir -p {MOUNT_PATH}",
                f"mount -t lustre -o relatime,flock {shlex.quote(dns_name)}@tcp:/{shlex.quote(mount_name)} "
                f"{MOUNT_PATH}",
                f"sh -c {shlex.quote(script)}",
                f"umount {MOUNT_PATH}",
                f"echo higgsfield-lustre-layout-done {layout_digest(script)}",
            ]
        )
        + "\n"
    )


# The FSx CSI node plugin's ClusterRole grants get and patch on every node (kubernetes-sigs/
# aws-fsx-csi-driver:charts/aws-fsx-csi-driver/templates/clusterrole-csi-node.yaml@v1.8.0), used for
# one thing: removing the startup taint fsx.csi.aws.com/agent-not-ready from its own node
# (removeNotReadyTaint, pkg/driver/node.go: a JSON patch of /spec/taints on CSI_NODE_NAME). The
# add-on's RBAC is EKS's to manage, so instead of editing the role the admission policy below
# holds the node plugin's account to that: its own node (the node its pod-bound token was issued
# for), that taint only, no label, annotation or cordon change.
CSI_NODE_USER = "system:serviceaccount:kube-system:fsx-csi-node-sa"  # values.yaml node.serviceAccount.name@v1.8.0
CSI_NOT_READY_TAINT = "fsx.csi.aws.com/agent-not-ready"  # pkg/driver/constants.go@v1.8.0


def csi_node_policy() -> dict:
    """A ValidatingAdmissionPolicy: the FSx CSI node plugin may only remove its startup taint
    from its own node."""
    old_taints = "(has(oldObject.spec.taints) ? oldObject.spec.taints : [])"
    new_taints = "(has(object.spec.taints) ? object.spec.taints : [])"
    meta = lambda obj, field: f"(has({obj}.metadata.{field}) ? {obj}.metadata.{field} : {{}})"  # noqa: E731
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "higgsfield-fsx-csi-node-own-node"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["UPDATE"],
                        "resources": ["nodes", "nodes/status"],
                    }
                ]
            },
            "matchConditions": [
                {"name": "fsx-csi-node-only", "expression": f"request.userInfo.username == '{CSI_NODE_USER}'"}
            ],
            "validations": [
                {
                    "expression": f"has(request.userInfo.extra) && '{NODE_NAME_EXTRA}' in request.userInfo.extra && "
                    f"request.userInfo.extra['{NODE_NAME_EXTRA}'] == [object.metadata.name]",
                    "message": "the FSx CSI node plugin may change only the node its pod runs on",
                    "reason": "Forbidden",
                },
                {
                    "expression": f"{new_taints} == {old_taints}.filter(t, t.key != '{CSI_NOT_READY_TAINT}')",
                    "message": f"the FSx CSI node plugin may only remove the taint {CSI_NOT_READY_TAINT}",
                    "reason": "Forbidden",
                },
                {
                    "expression": f"{meta('object', 'labels')} == {meta('oldObject', 'labels')} && "
                    f"{meta('object', 'annotations')} == {meta('oldObject', 'annotations')} && "
                    "(has(object.spec.unschedulable) && object.spec.unschedulable) == "
                    "(has(oldObject.spec.unschedulable) && oldObject.spec.unschedulable)",
                    "message": "the FSx CSI node plugin may not change a node's labels, annotations or cordon it",
                    "reason": "Forbidden",
                },
                {
                    "expression": fixed_node_fields_unchanged(),
                    "message": f"the FSx CSI node plugin may not change a node's {FIXED_NODE_FIELDS_MESSAGE}",
                    "reason": "Forbidden",
                },
            ],
        },
    }


def csi_node_policy_binding() -> dict:
    return deny_binding("higgsfield-fsx-csi-node-own-node")


@dataclass(frozen=True, kw_only=True)
class LustreArgs:
    cluster_name: str
    settings: Fsx
    lustre_version: str
    csi_addon: AddonVersion
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    subnet_cidr: pulumi.Input[str]  # the layout client's fixed address comes from it
    node_security_group_id: pulumi.Input[str]
    namespaces: Mapping[str, pulumi.Resource]
    team_uids: Mapping[str, int]  # team -> its UID (= GID): owner of its directory
    provider: pulumi.ProviderResource
    addon_depends_on: Sequence[pulumi.Resource]
    protect: bool
    deployer_arn: pulumi.Input[str]  # deploying_identity(): the file system key's partition and account
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
    aws-fsx-csi-driver add-on with a Pod Identity role; root squash (root on every client is
    65534:65534) with one exemption, the layout client: an EC2 instance at a reserved address that
    makes /teams/TEAM (owner: the team's UID/GID, 2770) and /datasets/NAME (owner: the owning
    team, 2755) and powers off; an admission policy holding the CSI node plugin to its own node's
    startup taint; per team namespace a static PersistentVolume of *its own directory only* and a
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
            key = key_with_policy(
                f"{name}-key",
                description=f"FSx for Lustre of {args.cluster_name}",
                deployer_arn=args.deployer_arn,
                policy=account_key_policy,
                tags=tags,
                opts=keep,
            )
        # The group exists before the cluster does, so the file system (the slowest resource)
        # starts right after the VPC; the rule naming the node group comes once the cluster is up.
        group = aws.ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=args.vpc_id,
            description="FSx for Lustre: Lustre ports from cluster nodes only",
            tags=tags,
            opts=child,
        )
        # The layout client's address is reserved as soon as the subnet exists, long before any
        # node asks the subnet for addresses.
        layout_ip = pulumi.Output.from_input(args.subnet_cidr).apply(layout_client_ip)
        self.layout_reservation = aws.ec2.SubnetCidrReservation(
            f"{name}-layout-ip",
            subnet_id=args.subnet_id,
            cidr_block=layout_ip.apply(lambda ip: f"{ip}/32"),
            reservation_type="explicit",
            description="FSx layout client (the only root-squash exemption)",
            opts=child,
        )
        self.layout_group = aws.ec2.SecurityGroup(
            f"{name}-layout-sg",
            vpc_id=args.vpc_id,
            description="FSx layout client: out to FSx and the package repositories",
            egress=[
                aws.ec2.SecurityGroupEgressArgs(
                    protocol="-1", from_port=0, to_port=0, cidr_blocks=["0.0.0.0/0"], description="Lustre and dnf"
                )
            ],
            tags=tags,
            opts=child,
        )
        for lo, hi in LUSTRE_PORTS:
            for source, peer in (
                ("self", group.id),
                ("nodes", args.node_security_group_id),
                ("layout", self.layout_group.id),
            ):
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
            f"{name}-egress",
            security_group_id=group.id,
            ip_protocol="-1",
            cidr_ipv4="0.0.0.0/0",
            description="replies and S3",
            tags=tags,
            opts=child,
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
            root_squash_configuration=aws.fsx.LustreFileSystemRootSquashConfigurationArgs(
                root_squash=ROOT_SQUASH,
                no_squash_nids=[layout_ip.apply(lambda ip: f"{ip}@tcp")],
            ),
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
                f"{name}-s3-versioning",
                bucket=fsx.s3.bucket,
                versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(status="Enabled"),
                opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
            )
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
                    auto_import_policy=aws.fsx.DataRepositoryAssociationS3AutoImportPolicyArgs(
                        events=["NEW", "CHANGED", "DELETED"]
                    )
                    if fsx.s3.auto_import
                    else None,
                    auto_export_policy=aws.fsx.DataRepositoryAssociationS3AutoExportPolicyArgs(events=exported),
                ),
                tags=tags,
                opts=child,
            )

        # The node plugin's guard is in place before the add-on's DaemonSet can patch a node.
        guard = KubernetesObject(
            f"{name}-csi-node-policy",
            csi_node_policy(),
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.addon_depends_on)),
        )
        guard_binding = KubernetesObject(
            f"{name}-csi-node-policy-binding",
            csi_node_policy_binding(),
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[guard]),
        )
        role, _ = pod_identity_role(
            f"{name}-csi",
            tags,
            self,
            cluster=args.cluster_name,
            namespace=KUBE_SYSTEM,  # the add-on's namespace
            service_account=CSI_CONTROLLER_SA,
            inline_policy=csi_policy(),
        )
        managed_addon(
            f"{name}-csi",
            args.cluster_name,
            args.csi_addon,
            tags=tags,
            identity=(role.arn, CSI_CONTROLLER_SA),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.addon_depends_on, guard_binding]),
        )

        layout = self._layout(name, args, layout_ip, link=link)
        for team, ns in args.namespaces.items():
            self._volume(name, args, team, "shared", PVC_NAME, f"{TEAMS_DIR}/{team}", ns, layout, read_only=False)
            for dataset in fsx.datasets:
                if team == dataset.owner or team in dataset.readers:
                    claim = DATASET_CLAIM.format(name=dataset.name)
                    self._volume(
                        name,
                        args,
                        team,
                        f"ds-{dataset.name}",
                        claim,
                        f"{DATASETS_DIR}/{dataset.name}",
                        ns,
                        layout,
                        read_only=team != dataset.owner,
                    )
        if args.health_namespace is not None:  # the gate writes and reads a file here on every new node
            namespace, ns = args.health_namespace
            volume, claim_obj = self._pv_claim(
                args, f"{args.cluster_name}-fsx-health", namespace, HEALTH_CLAIM, HEALTH_DIR, read_only=False
            )
            opts = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[ns, layout])
            KubernetesObject(f"{name}-pv-health", volume, opts=opts)
            KubernetesObject(f"{name}-pvc-health", claim_obj, opts=opts)
        self.register_outputs({"file_system_id": self.file_system.id, "dns_name": self.file_system.dns_name})

    def _pv_claim(
        self, args: LustreArgs, pv_name: str, namespace: str, claim: str, subpath: str | None, read_only: bool
    ) -> tuple[dict, dict]:
        fsx = args.settings
        access = ["ReadOnlyMany"] if read_only else ["ReadWriteMany"]
        mountname = self.file_system.mount_name.apply(lambda m: mountname_of(m, subpath))
        volume = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {
                "name": pv_name,
                "labels": {"higgsfield.io/storage": "fsx"},
                "annotations": {LUSTRE_PATH_ANNOTATION: subpath or "/"},
            },
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
            "spec": {
                "accessModes": access,
                "storageClassName": "",
                "volumeName": pv_name,
                "resources": {"requests": {"storage": f"{fsx.storage_capacity_gib}Gi"}},
            },
        }
        return volume, claim_obj

    def _volume(
        self,
        name: str,
        args: LustreArgs,
        team: str,
        suffix: str,
        claim: str,
        subpath: str,
        ns: pulumi.Resource,
        layout: pulumi.Resource,
        *,
        read_only: bool,
    ) -> None:
        """A team's volume of one directory (and its claim), once the directory exists."""
        pv_name = (
            f"{args.cluster_name}-fsx-{team}" if suffix == "shared" else f"{args.cluster_name}-fsx-{team}-{suffix}"
        )
        volume, claim_obj = self._pv_claim(args, pv_name, team, claim, subpath, read_only)
        key = "" if suffix == "shared" else f"-{suffix}"
        opts = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[ns, layout])
        KubernetesObject(f"{name}-pv-{team}{key}", volume, opts=opts)
        KubernetesObject(f"{name}-pvc-{team}{key}", claim_obj, opts=opts)

    def _layout(
        self, name: str, args: LustreArgs, layout_ip: pulumi.Output[str], link: pulumi.Resource | None
    ) -> pulumi.Resource:
        """The layout client (LAYOUT_CLIENT_*): an instance that makes the team and dataset
        directories with their owners as unsquashed root, then stops. Its user data carries the
        layout, so a new team or dataset replaces it and the new layout runs once."""
        script = layout_of(args.settings, args.team_uids)
        user_data = pulumi.Output.all(self.file_system.dns_name, self.file_system.mount_name).apply(
            lambda v: base64.b64encode(layout_user_data(script, v[0], v[1]).encode()).decode()
        )
        template = aws.ec2.LaunchTemplate(
            f"{name}-layout",
            image_id=LAYOUT_CLIENT_AMI,
            instance_type=LAYOUT_CLIENT_TYPE,
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=1
            ),
            block_device_mappings=[
                aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                    device_name="/dev/xvda",
                    ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                        volume_size=8, volume_type="gp3", encrypted="true", delete_on_termination="true"
                    ),
                )
            ],
            tag_specifications=[
                aws.ec2.LaunchTemplateTagSpecificationArgs(
                    resource_type="instance", tags={**args.tags, "Name": f"{args.cluster_name}-fsx-layout"}
                )
            ],
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self),
        )
        return aws.ec2.Instance(
            f"{name}-layout",
            launch_template=aws.ec2.InstanceLaunchTemplateArgs(
                id=template.id, version=template.latest_version.apply(str)
            ),
            subnet_id=args.subnet_id,
            private_ip=layout_ip,
            vpc_security_group_ids=[self.layout_group.id],
            user_data_base64=user_data,
            user_data_replace_on_change=True,
            instance_initiated_shutdown_behavior="stop",
            tags={**args.tags, "Name": f"{args.cluster_name}-fsx-layout", LAYOUT_TAG: layout_digest(script)},
            # Its replacement takes the same address: the old one goes first.
            opts=pulumi.ResourceOptions(
                parent=self,
                delete_before_replace=True,
                depends_on=[self.file_system, self.layout_reservation, *([link] if link is not None else [])],
            ),
        )
