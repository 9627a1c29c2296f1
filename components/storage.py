"""FSx for Lustre next to the GPUs, and the volumes jobs mount it through."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.addons import managed_addon
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
FILE_SYSTEM_PATH = "/data"  # where the S3 link appears inside the file system


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
    provider: pulumi.ProviderResource
    addon_depends_on: Sequence[pulumi.Resource]
    protect: bool
    tags: Mapping[str, str]


def csi_policy() -> str:
    """The CSI controller only describes and tags file systems: volumes here are static (this
    stack creates the file system), so it needs no create/delete rights."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": ["fsx:DescribeFileSystems", "fsx:ListTagsForResource", "fsx:TagResource"], "Resource": "*"}],
        }
    )


class LustreFileSystem(pulumi.ComponentResource):
    """FSx for Lustre in the GPU pools' AZ, mounted into every team namespace.

    Creates: a KMS key (PERSISTENT_2; SCRATCH_2 uses an AWS key), a security group allowing
    TCP 988 and 1018-1023 only from the node security group and itself, the file system,
    an S3 data repository association (PERSISTENT_2) or import/export paths (SCRATCH_2), the
    aws-fsx-csi-driver add-on with a Pod Identity role, and per team namespace a static
    PersistentVolume and a ReadWriteMany PersistentVolumeClaim `shared-data`.
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
        if fsx.s3 and fsx.deployment_type == "PERSISTENT_2":
            events = ["NEW", "CHANGED", "DELETED"]
            aws.fsx.DataRepositoryAssociation(
                f"{name}-s3",
                file_system_id=self.file_system.id,
                data_repository_path=fsx.s3.import_path,
                file_system_path=FILE_SYSTEM_PATH,
                batch_import_meta_data_on_create=True,
                s3=aws.fsx.DataRepositoryAssociationS3Args(
                    auto_import_policy=aws.fsx.DataRepositoryAssociationS3AutoImportPolicyArgs(events=events) if fsx.s3.auto_import else None,
                    auto_export_policy=aws.fsx.DataRepositoryAssociationS3AutoExportPolicyArgs(events=events),
                ),
                tags=tags,
                opts=child,
            )

        role, _ = pod_identity_role(f"{name}-csi", tags, self, inline_policy=csi_policy())
        managed_addon(
            f"{name}-csi", args.cluster_name, args.csi_addon, tags=tags, identity=(role.arn, CSI_CONTROLLER_SA),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.addon_depends_on)),
        )

        for namespace, ns in args.namespaces.items():
            pv_name = f"{args.cluster_name}-fsx-{namespace}"
            in_cluster = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[ns])
            KubernetesObject(
                f"{name}-pv-{namespace}",
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolume",
                    "metadata": {"name": pv_name, "labels": {"higgsfield.io/storage": "fsx"}},
                    "spec": {
                        "capacity": {"storage": f"{fsx.storage_capacity_gib}Gi"},
                        "volumeMode": "Filesystem",
                        "accessModes": ["ReadWriteMany"],
                        "persistentVolumeReclaimPolicy": "Retain",
                        "storageClassName": "",
                        "mountOptions": list(MOUNT_OPTIONS),
                        "claimRef": {"namespace": namespace, "name": PVC_NAME},
                        "csi": {
                            "driver": CSI_DRIVER,
                            "volumeHandle": self.file_system.id,
                            "volumeAttributes": {"dnsname": self.file_system.dns_name, "mountname": self.file_system.mount_name},
                        },
                    },
                },
                opts=in_cluster,
            )
            KubernetesObject(
                f"{name}-pvc-{namespace}",
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": {"name": PVC_NAME, "namespace": namespace},
                    "spec": {
                        "accessModes": ["ReadWriteMany"],
                        "storageClassName": "",
                        "volumeName": pv_name,
                        "resources": {"requests": {"storage": f"{fsx.storage_capacity_gib}Gi"}},
                    },
                },
                opts=in_cluster,
            )
        self.register_outputs({"file_system_id": self.file_system.id, "dns_name": self.file_system.dns_name})
