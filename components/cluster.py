"""The EKS control plane and the pieces every node needs before it can join."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as k8s

from components.addons import BEFORE_NODES, CLUSTER_ADDONS, managed_addon
from components.identity import trust_policy
from components.logs import account_key_policy, key_with_policy
from infra.core.names import CLUSTER_ADMIN_POLICY
from infra.core.versions import AddonVersion

CONTROL_PLANE_LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")
# Managed add-ons (components/addons.py CLUSTER_ADDONS). EKS bootstraps self-managed vpc-cni,
# kube-proxy and coredns with the cluster; the managed add-ons adopt them (resolve conflicts:
# OVERWRITE) at the version EKS resolves for the cluster's Kubernetes version. Node groups wait
# for BEFORE_NODES, so an upgrade goes control plane -> add-ons -> node groups; CoreDNS needs a
# node to turn ACTIVE and comes up alongside the node groups.
# The VPC CNI enforces Kubernetes NetworkPolicies only when asked (chart value and add-on
# configuration key `enableNetworkPolicy`, a string: aws/amazon-vpc-cni-k8s:charts/aws-vpc-cni/
# values.yaml@v1.20.4; docs.aws.amazon.com/eks/latest/userguide/cni-network-policy-configure.html).
ADDON_CONFIGURATION = {"vpc-cni": {"enableNetworkPolicy": "true"}}


@dataclass(frozen=True, kw_only=True)
class ClusterArgs:
    cluster_name: str
    kubernetes_version: str
    vpc_id: pulumi.Input[str]
    private_subnet_ids: Sequence[pulumi.Input[str]]
    public_access_cidrs: Sequence[str]
    admins: Sequence[str]
    addons: Mapping[str, AddonVersion]
    protect: bool
    log_retention_days: int
    log_key_arn: pulumi.Input[str]
    log_key_ready: Sequence[pulumi.Resource]  # the log key, created with the policy that lets CloudWatch Logs use it
    deployer_arn: pulumi.Input[str]  # deploying_identity(): the Secrets key's partition and account
    tags: Mapping[str, str]


class Cluster(pulumi.ComponentResource):
    """An EKS cluster with secure defaults.

    Creates: a KMS key (rotation on) for envelope encryption of Secrets, the EKS cluster via
    pulumi_eks (authentication mode API, access entries for the admins, all five control-plane
    log types, private endpoint plus an optional CIDR allow-list, no default node group, no IRSA
    OIDC provider: pods get AWS roles through Pod Identity), the cluster's service role (ours, with
    AmazonEKSClusterPolicy, so that it carries the stack's permissions boundary), the control-plane log group (encrypted
    with our logs key), the vpc-cni
    (NetworkPolicy enforcement on), kube-proxy, coredns and eks-pod-identity-agent managed add-ons
    (EKS's default version for the cluster's Kubernetes version unless pinned), and a Kubernetes
    provider for the components that deploy into the cluster. A new `kubernetes_version` updates
    the control plane in place, then the add-ons (they depend on it).
    Replaced when: the cluster name, subnets or the KMS key change (EKS cannot move them).
    With `protect`, the cluster and the key are protected, and the key is retained on delete.
    """

    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("higgsfield:cluster:Cluster", name, None, opts)
        tags = dict(args.tags)
        keep = pulumi.ResourceOptions(parent=self, protect=args.protect, retain_on_delete=args.protect)

        key = key_with_policy(
            f"{name}-secrets",
            description=f"Envelope encryption of Kubernetes Secrets in {args.cluster_name}",
            deployer_arn=args.deployer_arn,
            policy=account_key_policy,
            tags=tags,
            opts=keep,
        )
        aws.kms.Alias(
            f"{name}-secrets",
            name=f"alias/{args.cluster_name}-secrets",
            target_key_id=key.key_id,
            opts=pulumi.ResourceOptions(parent=self),
        )

        # EKS writes control-plane logs here; creating the group first makes its retention ours.
        control_plane_logs = aws.cloudwatch.LogGroup(
            f"{name}-control-plane-logs",
            name=f"/aws/eks/{args.cluster_name}/cluster",
            retention_in_days=args.log_retention_days,
            kms_key_id=args.log_key_arn,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.log_key_ready)),
        )
        # The role EKS manages the cluster with. pulumi-eks makes one itself unless given one
        # (pulumi/pulumi-eks:nodejs/eks/cluster/cluster.ts@v4.3.0, `if (!args.serviceRole)`: a
        # ServiceRole trusting eks.amazonaws.com with AmazonEKSClusterPolicy); ours is the same,
        # but registered here, so that bound_every_role (components/delivery.py) reaches it.
        # No aws:SourceAccount/aws:SourceArn: the EKS user guide gives the cluster role's trust policy
        # without them and documents source keys only for the Fargate pod execution role
        # (awsdocs/amazon-eks-user-guide:latest/ug/security/iam-reference/cluster-iam-role.adoc and
        # security-iam.adoc@4d52b4d0); a condition EKS may not send would refuse EKS itself. The role is
        # passed only by someone allowed iam:PassRole on it, and never to another account.
        service_role = aws.iam.Role(
            f"{name}-service",
            assume_role_policy=trust_policy("eks.amazonaws.com"),
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect),
        )
        service_policy = aws.iam.RolePolicyAttachment(
            f"{name}-service",
            role=service_role.name,
            policy_arn="arn:aws:iam::aws:policy/AmazonEKSClusterPolicy",
            opts=pulumi.ResourceOptions(parent=self),
        )
        public = bool(args.public_access_cidrs)
        self.eks = eks.Cluster(
            f"{name}-eks",
            name=args.cluster_name,
            version=args.kubernetes_version,
            vpc_id=args.vpc_id,
            private_subnet_ids=list(args.private_subnet_ids),
            node_associate_public_ip_address=False,
            endpoint_private_access=True,
            endpoint_public_access=public,
            public_access_cidrs=list(args.public_access_cidrs) if public else None,
            authentication_mode=eks.AuthenticationMode.API,
            access_entries={
                f"admin-{i}": eks.AccessEntryArgs(
                    principal_arn=arn,
                    access_policies={
                        "cluster-admin": eks.AccessPolicyAssociationArgs(
                            policy_arn=CLUSTER_ADMIN_POLICY,
                            access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"),
                        )
                    },
                )
                for i, arn in enumerate(args.admins)
            },
            enabled_cluster_log_types=list(CONTROL_PLANE_LOG_TYPES),
            encryption_config_key_arn=key.arn,
            skip_default_node_group=True,
            create_instance_role=False,
            skip_default_security_groups=False,
            service_role=service_role,
            # No IRSA: every pod role here is a Pod Identity association (components/identity.py),
            # and nothing reads the provider (pulumi-eks creates it only when asked:
            # pulumi/pulumi-eks:nodejs/eks/cluster/cluster.ts@v4.3.0 `if (args.createOidcProvider)`).
            create_oidc_provider=False,
            bootstrap_self_managed_addons=True,
            use_default_vpc_cni=True,
            coredns_addon_options=eks.CoreDnsAddonOptionsArgs(enabled=False),
            kube_proxy_addon_options=eks.KubeProxyAddonOptionsArgs(enabled=False),
            deletion_protection=args.protect,
            tags=tags,
            opts=pulumi.ResourceOptions(
                parent=self, protect=args.protect, depends_on=[control_plane_logs, service_policy]
            ),
        )

        self.cluster_name = args.cluster_name
        self.node_security_group_id = self.eks.node_security_group_id
        addons = {
            addon: managed_addon(
                f"{name}-{addon}",
                args.cluster_name,
                args.addons[addon],
                tags=tags,
                configuration=ADDON_CONFIGURATION.get(addon),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.eks]),
            )
            for addon in CLUSTER_ADDONS
        }
        self.addons = list(addons.values())
        # What a node group waits for besides the control plane (see CLUSTER_ADDONS).
        self.node_prerequisites: list[pulumi.Resource] = [self.eks, *(addons[a] for a in BEFORE_NODES)]
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.eks.kubeconfig_json,
            enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.kubeconfig = pulumi.Output.secret(self.eks.kubeconfig_json)
        self.register_outputs({"cluster_name": self.cluster_name, "kubeconfig": self.kubeconfig})
