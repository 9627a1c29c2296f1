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
# Past 14 months of standard support on 2026-12-02 (extended support is billed at a higher rate).
EKS_EXTENDED_SUPPORT = ("1.32", "1.33")


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

GPU_AMI_TYPES = {"x86_64": "AL2023_x86_64_NVIDIA", "arm64": "AL2023_ARM_64_NVIDIA"}


def gpu_ami_type(architectures: tuple[str, ...]) -> str:
    """The EKS AL2023 NVIDIA AMI type for an instance's CPU architecture (x86_64 preferred)."""
    return next(GPU_AMI_TYPES[a] for a in ("x86_64", "arm64") if a in architectures)

# NVIDIA driver branch in the EKS-optimized AL2023 NVIDIA AMIs: 580 ("The EKS-optimized
# accelerated AMIs currently include NVIDIA driver version 580", EKS user guide, quoted in
# NVIDIA/aicr#2743, 2026; AMI v20260917 adds 595 for G7 only, awslabs/amazon-eks-ami#2768).
EKS_NVIDIA_DRIVER_BRANCH = 580

# Minimum driver branch for each CUDA toolkit (NVIDIA CUDA Toolkit release notes, table
# "CUDA Toolkit and Corresponding Driver Versions", Linux x86_64 column; checked 2026-12-02).
# Minor-version compatibility can run newer 12.x on older 12.x drivers with limits; we hold
# the stricter "toolkit driver" line so that every CUDA feature works.
CUDA_MIN_DRIVER_BRANCH = {
    "12.0": 525, "12.1": 530, "12.2": 535, "12.3": 545, "12.4": 550, "12.5": 555,
    "12.6": 560, "12.8": 570, "12.9": 575, "13.0": 580, "13.1": 590,
}


@dataclass(frozen=True)
class Chart:
    """A Helm chart pinned to an exact version, from its official repository."""

    name: str
    version: str
    repo: str
    source: str


# kubernetes/autoscaler chart 9.59.0 ships Cluster Autoscaler 1.35.0 (appVersion), the minor
# that matches Kubernetes 1.35 (kubermatic/kubermatic#16253, 2026-08-13). The image tag is set
# per Kubernetes minor below, as the autoscaler's README asks (same minor as the cluster).
CLUSTER_AUTOSCALER = Chart(
    "cluster-autoscaler", "9.59.0", "https://kubernetes.github.io/autoscaler",
    "kubernetes/autoscaler charts/cluster-autoscaler; kubermatic/kubermatic#16253 (2026-08-13)",
)
# 1.35.0 is the chart's appVersion (verified above); 1.34.2 and 1.33.0 are chart appVersions
# listed in kubernetes/autoscaler#8891; 1.32.1 is unverified.
CLUSTER_AUTOSCALER_IMAGE = {"1.32": "v1.32.1", "1.33": "v1.33.0", "1.34": "v1.34.2", "1.35": "v1.35.0"}

# NVIDIA device plugin with GPU feature discovery (driver/CUDA labels): v0.19.0 released
# 2026-03/04 (NVIDIA/k8s-device-plugin CHANGELOG v0.19.0, via shaman007/home-k3s#111).
NVIDIA_DEVICE_PLUGIN = Chart(
    "nvidia-device-plugin", "0.19.0", "https://nvidia.github.io/k8s-device-plugin",
    "NVIDIA/k8s-device-plugin deployments/helm/nvidia-device-plugin (release v0.19.0)",
)
# EKS EFA device plugin chart: v0.5.20 (aws/eks-charts stable/aws-efa-k8s-device-plugin/
# Chart.yaml at de5fdc1d). Newer charts carry image v0.5.21-eksbuild.x (aws/eks-charts#1366,
# 2026-09-10); bump after reading that chart's version.
EFA_DEVICE_PLUGIN = Chart(
    "aws-efa-k8s-device-plugin", "v0.5.20", "https://aws.github.io/eks-charts",
    "aws/eks-charts stable/aws-efa-k8s-device-plugin/Chart.yaml",
)

# FSx for Lustre CSI driver as an EKS add-on (docs.aws.amazon.com/eks/latest/userguide/
# fsx-csi-create.html). Unverified from here: confirm with
# `aws eks describe-addon-versions --addon-name aws-fsx-csi-driver --kubernetes-version 1.35`.
# The add-on vX.Y.Z-eksbuild.N packages driver tag vX.Y.Z (EKS add-on naming; unverified here).
# Read at kubernetes-sigs/aws-fsx-csi-driver@v1.8.0 for tenancy (components/storage.py): static
# PVs only (examples/kubernetes/static_provisioning), NodePublishVolume mounts
# `dnsname@tcp:/mountname` with the PV's mountname and adds `ro` for read-only publishes
# (pkg/driver/node.go); the CSIDriver declares no Ephemeral lifecycle (charts/aws-fsx-csi-driver/
# templates/csidriver.yaml), so inline csi volumes are refused. The `subDir` provisioning mode is
# not in v1.8.0. Check after a bump: `git show vX.Y.Z:pkg/driver/node.go | grep -n mountname`.
FSX_CSI_ADDON = AddonVersion("aws-fsx-csi-driver", "v1.8.0-eksbuild.1", False, _ADDON_SOURCE.format(k8s="1.35", name="aws-fsx-csi-driver"))
# Lustre client/server version of new file systems (FSx API FileSystemTypeVersion; 2.15 is the
# newest, needed by AL2023 clients). docs.aws.amazon.com/fsx/latest/LustreGuide/lustre-client-matrix.html
LUSTRE_VERSION = "2.15"

# Volcano batch scheduler, official chart (volcano-sh/helm-charts; the chart's values take the
# whole scheduler config as custom.scheduler_config_override, and a node selector as
# custom.default_ns: volcano-sh/volcano installer/helm/chart/volcano/values.yaml). Tagged charts
# v1.13.0-v1.15.0 exist (published comparison of their default volcano-scheduler.conf).
VOLCANO = Chart("volcano", "1.13.0", "https://volcano-sh.github.io/helm-charts", "volcano-sh/volcano installer/helm/chart/volcano")

# Kubeflow Training Operator v1 (DESIGN.md decision 4): the upstream standalone overlay at this
# ref, through components/kustomize/training-operator/kustomization.yaml (a test checks that file
# names this ref). Flags --gang-scheduler-name and --leader-elect: kubeflow/training-operator
# cmd/training-operator.v1/main.go.
TRAINING_OPERATOR_REF = "v1.9.4"
TRAINING_OPERATOR_OVERLAY = "https://github.com/kubeflow/training-operator.git//manifests/overlays/standalone"

# metrics-server for the HPA the operator creates for elastic PyTorchJobs
# (kubernetes-sigs/metrics-server charts/metrics-server; chart 3.13.0 = metrics-server 0.8.0).
METRICS_SERVER = Chart("metrics-server", "3.13.0", "https://kubernetes-sigs.github.io/metrics-server", "kubernetes-sigs/metrics-server charts/metrics-server")

# The one-shot Job that makes the team and dataset directories on Lustre (mkdir, chown, chmod:
# busybox has all three). Unverified tag: `docker manifest inspect` it before the first deploy.
LUSTRE_LAYOUT_IMAGE = "public.ecr.aws/docker/library/busybox:1.37"

# --- the training image (images/training/Dockerfile, built by .github/workflows/image.yml) -----
# What every training and health-check pod runs; a test checks that the Dockerfile's ARG defaults
# are these values. The EFA stack follows the anchors' nccl-tests image
# (aws-samples/awsome-distributed-training:micro-benchmarks/nccl-tests/nccl-tests.Dockerfile@7217859f,
# 2026-02-21): EFA installer run with `-y -g -d --skip-kmod --skip-limit-conf --no-verify`, then
# nccl-tests built with MPI against the NCCL the job uses.


@dataclass(frozen=True)
class ImagePart:
    """One thing the training image is built from, pinned, with where the pin was read."""

    version: str
    source: str
    verified: bool


# Base: PyTorch's official -devel image (CUDA toolkit for building nccl-tests and the plugin; the
# stacks' cudaVersion 12.8 runs on the EKS AMI's driver 580, see CUDA_MIN_DRIVER_BRANCH). Pinned by
# tag only: no upstream file here publishes its digest. Check with
# `docker buildx imagetools inspect pytorch/pytorch:2.7.1-cuda12.8-cudnn9-devel` and pin the digest.
TRAINING_BASE_IMAGE = ImagePart(
    "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-devel",
    "hub.docker.com/r/pytorch/pytorch tags (tag only, digest unverified)", False,
)
# The NCCL the job uses is the one PyTorch's wheel ships (nvidia-nccl-cu12, 2.26.x for torch 2.7.1
# cu128 - unverified here; the image build prints it, and the Dockerfile fails unless it is at
# least AWS_OFI_NCCL_MIN_NCCL).
# EFA user space (libfabric with the efa provider, rdma-core, Open MPI under /opt/amazon): the
# anchors' pin (nccl-tests.Dockerfile@7217859f: EFA_INSTALLER_VERSION=1.47.0).
EFA_INSTALLER = ImagePart(
    "1.47.0", "aws-samples/awsome-distributed-training:micro-benchmarks/nccl-tests/nccl-tests.Dockerfile@7217859f", True,
)
# aws-ofi-nccl, built from its release tarball (aws/aws-ofi-nccl:INSTALL.md@v1.21.1 recommends the
# tarball) with --enable-platform-aws into AWS_OFI_NCCL_PREFIX. "tested with NCCL v2.31.2-1 while
# maintaining backward compatibility with ... NCCL v2.17.1 and later"; needs Libfabric >= 1.22 for
# AWS support (aws/aws-ofi-nccl:RELEASENOTES.md@v1.21.1, tag commit 2475c4c7). Its tuner is built
# into the net plugin and, on AWS, also as libnccl-tuner-ofi.so / libnccl-ofi-tuner.so
# (aws/aws-ofi-nccl:src/Makefile.am@v1.21.1).
# boto3 in the image, for the health gate's SetInstanceHealth (images/training/health_gate.py); EKS
# Pod Identity credentials need a 2023-11 or newer SDK. The version the dev environment installs
# from PyPI (pip, 2026-12-03).
BOTO3 = ImagePart("1.44.8", "pypi.org/project/boto3 (installed here by pip, 2026-12-03)", True)
AWS_OFI_NCCL = ImagePart("1.21.1", "aws/aws-ofi-nccl:RELEASENOTES.md@v1.21.1", True)
AWS_OFI_NCCL_MIN_NCCL = (2, 17, 1)
AWS_OFI_NCCL_HAS_TUNER = True
AWS_OFI_NCCL_PREFIX = "/opt/aws-ofi-nccl"
# nccl-tests: the anchors' pin (nccl-tests.Dockerfile@7217859f: NCCL_TESTS_VERSION=v2.17.9).
NCCL_TESTS = ImagePart(
    "v2.17.9", "aws-samples/awsome-distributed-training:micro-benchmarks/nccl-tests/nccl-tests.Dockerfile@7217859f", True,
)

# --- observability ----------------------------------------------------------------------------
# kube-prometheus-stack 88.6.5 (prometheus-community/helm-charts; adfinis/helm-charts#1982, 2026-09-07).
KUBE_PROMETHEUS_STACK = Chart(
    "kube-prometheus-stack", "88.6.5", "https://prometheus-community.github.io/helm-charts",
    "prometheus-community/helm-charts charts/kube-prometheus-stack (adfinis/helm-charts#1982)",
)
# Unverified from here: confirm with `helm search repo <repo>/<chart> --versions` before deploying.
DCGM_EXPORTER = Chart("dcgm-exporter", "4.6.0", "https://nvidia.github.io/dcgm-exporter/helm-charts", "NVIDIA/dcgm-exporter deployment/ (unverified)")
PROMETHEUS_ADAPTER = Chart("prometheus-adapter", "5.2.0", "https://prometheus-community.github.io/helm-charts", "prometheus-community/helm-charts charts/prometheus-adapter (unverified)")


def _observability_addon(name: str, version: str) -> AddonVersion:
    return AddonVersion(name, version, False, _ADDON_SOURCE.format(k8s="1.35", name=name))


EBS_CSI_ADDON = _observability_addon("aws-ebs-csi-driver", "v1.53.0-eksbuild.1")
CLOUDWATCH_ADDON = _observability_addon("amazon-cloudwatch-observability", "v4.6.0-eksbuild.1")
NODE_MONITORING_ADDON = _observability_addon("eks-node-monitoring-agent", "v1.4.0-eksbuild.1")
