"""Every upstream version Higgsfield deploys, in one place.

One constant per upstream part, each with where it comes from and when it was checked.
"verified" means the value was read from the cited source on the date given; "unverified"
means it could not be confirmed from this build machine (no AWS API, no chart index) and
must be confirmed before the first real `pulumi up` with the command in the comment.
Changing a value here is a reviewed, visible change in `higgsfield plan` / `pulumi preview`.
"""

from __future__ import annotations

from dataclasses import dataclass

# --- Kubernetes -------------------------------------------------------------------------
# EKS standard support: 14 months, then 12 months extended (docs.aws.amazon.com/eks/latest/
# userguide/kubernetes-versions.html). 1.35 GA on EKS 2026-01-28 (endoflife.date/amazon-eks,
# checked 2026-12-02). 1.32 is in extended support until 2027-03; it is accepted so that an
# existing cluster can be upgraded in place, never offered as a default.
KUBERNETES_DEFAULT = "1.35"
KUBERNETES_SUPPORTED = ("1.32", "1.33", "1.34", "1.35")


@dataclass(frozen=True)
class AddonVersion:
    """A managed EKS add-on pinned for one Kubernetes minor version."""

    name: str
    version: str
    verified: bool
    source: str


_ADDON_SOURCE = (
    "aws eks describe-addon-versions --kubernetes-version {k8s} --addon-name {name} "
    "(unverified here: no AWS API from the build machine, 2026-12-02)"
)


def _addons(k8s: str, vpc_cni: str, coredns: str, kube_proxy: str, pod_identity: str) -> dict[str, AddonVersion]:
    pins = {
        "vpc-cni": vpc_cni,
        "coredns": coredns,
        "kube-proxy": kube_proxy,
        "eks-pod-identity-agent": pod_identity,
    }
    return {
        name: AddonVersion(name, version, False, _ADDON_SOURCE.format(k8s=k8s, name=name))
        for name, version in pins.items()
    }


# Managed add-ons per Kubernetes minor version. The coredns 1.33 pin is from the EKS user
# guide's CoreDNS version table (awsdocs/amazon-eks-user-guide:latest/ug/networking/
# managing-coredns.adoc); the others follow the same eksbuild scheme and are unverified.
EKS_ADDONS: dict[str, dict[str, AddonVersion]] = {
    "1.32": _addons("1.32", "v1.20.4-eksbuild.1", "v1.11.4-eksbuild.22", "v1.32.6-eksbuild.13", "v1.3.8-eksbuild.2"),
    "1.33": _addons("1.33", "v1.20.4-eksbuild.1", "v1.12.3-eksbuild.1", "v1.33.3-eksbuild.11", "v1.3.8-eksbuild.2"),
    "1.34": _addons("1.34", "v1.20.4-eksbuild.1", "v1.12.4-eksbuild.1", "v1.34.0-eksbuild.5", "v1.3.8-eksbuild.2"),
    "1.35": _addons("1.35", "v1.20.4-eksbuild.1", "v1.12.4-eksbuild.1", "v1.35.0-eksbuild.2", "v1.3.8-eksbuild.2"),
}

# --- Node images ------------------------------------------------------------------------
# Managed node groups pick the latest EKS-optimized AMI of this type for the cluster version
# at creation; the release is then held until the node group is updated.
# docs.aws.amazon.com/eks/latest/APIReference/API_Nodegroup.html (amiType), checked 2026-12-02.
CPU_AMI_TYPE = "AL2023_x86_64_STANDARD"
