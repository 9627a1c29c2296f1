"""Every upstream version Higgsfield deploys, in one place.

One constant per upstream part. Each says where it comes from (`Source`): verified = read in the
cited upstream file (owner/repo:path@ref, or an AWS documentation page; dates in the comments);
unverified = it could not be confirmed from the build machine (no AWS API, no registry), and
`check` is the command that confirms it before the first real `pulumi up`. `PROVENANCE` holds the
source of every constant that is a plain value; the dataclasses carry their own (a test checks
that nothing is left without one). The Kubernetes range each pinned component supports is data
(`KubernetesRange`): config validation rejects a `kubernetesVersion` outside any of them.
Managed EKS add-on versions are not pinned here: EKS resolves them per cluster version at
deploy time (see `EKS_ADDONS`), unless a stack pins one (`higgsfield:addonVersions`).
Changing a value here is a reviewed, visible change in `higgsfield plan` / `pulumi preview`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Source:
    """Where a pin was read. `verified`: read at `where` (owner/repo:path@ref or a docs page);
    otherwise `check` is the command that verifies it."""

    where: str
    verified: bool
    check: str = ""


def verified(where: str) -> Source:
    return Source(where, True)


def unverified(where: str, check: str) -> Source:
    return Source(where, False, check)


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


@dataclass(frozen=True)
class KubernetesRange:
    """The Kubernetes minor versions a pinned component supports, from its own documentation
    (`maximum` None: no upper bound published)."""

    component: str
    minimum: str
    maximum: str | None
    source: str
    only: tuple[str, ...] = ()  # when set, exactly these minors (one release per minor)

    def admits(self, kubernetes_version: str) -> bool:
        version = _minor(kubernetes_version)
        if self.only:
            return version in {_minor(v) for v in self.only}
        return _minor(self.minimum) <= version and (self.maximum is None or version <= _minor(self.maximum))

    def __str__(self) -> str:
        if self.only:
            return ", ".join(self.only)
        return f"{self.minimum}-{self.maximum}" if self.maximum else f"{self.minimum}+"


# --- Kubernetes -------------------------------------------------------------------------
# EKS standard support: 14 months, then 12 months extended (docs.aws.amazon.com/eks/latest/
# userguide/kubernetes-versions.html). 1.35 GA on EKS 2026-01-28 (endoflife.date/amazon-eks,
# checked 2026-12-02). 1.32 is in extended support until 2027-03; it is accepted so that an
# existing cluster can be upgraded in place, never offered as a default. 1.34 (GA on EKS 2025-10-02)
# left standard support on 2026-12-02.
KUBERNETES_DEFAULT = "1.35"
KUBERNETES_SUPPORTED = ("1.32", "1.33", "1.34", "1.35")
# End of standard support: GA on EKS plus 14 months (the user guide's release calendar; GA 1.32
# 2025-01-23, 1.33 2025-05-29, 1.34 2025-10-02, 1.35 2026-01-28). A minor whose standard support
# ended by EKS_SUPPORT_AS_OF is in extended support (billed at a higher rate); a test keeps the
# tuple equal to the calendar at that date, so moving the date moves the tuple.
EKS_STANDARD_SUPPORT_END = {"1.32": "2026-03-23", "1.33": "2026-07-29", "1.34": "2026-12-02", "1.35": "2027-03-28"}
EKS_SUPPORT_AS_OF = "2026-12-04"
EKS_EXTENDED_SUPPORT = ("1.32", "1.33", "1.34")


# --- EKS managed add-ons -----------------------------------------------------------------
# Resolved by EKS at deploy time, not guessed here: `aws.eks.get_addon_version` (pulumi-aws, the
# DescribeAddonVersions API) for the cluster's Kubernetes version, taking the version EKS marks as
# the *default* for that Kubernetes version (most_recent=False). Default, not most recent: it is
# the version AWS installs and tests for new clusters of that minor, it moves only when AWS moves
# it, and a minor upgrade of the cluster moves every add-on to the new minor's default in the same
# `pulumi up`. Most recent would pull in an add-on release on the day it ships. A stack that wants
# exact control pins a version per add-on in `higgsfield:addonVersions` (checked by `higgsfield
# preflight` against what AWS offers). The offline plan cannot ask EKS and shows
# ADDON_RESOLVED_AT_DEPLOY. Add-on names: docs.aws.amazon.com/eks/latest/userguide/
# workloads-add-ons-available-eks.html (checked 2026-12-02). Unverified here: that EKS marks a
# default for each of these add-ons at each supported Kubernetes version (some add-ons have had
# none: aws-efs-csi-driver in terraform-aws-modules/terraform-aws-eks#2855, adot in #2731); then
# the lookup fails at preview, before anything changes, and a pin is the fix.
ADDON_MOST_RECENT = False
ADDON_RESOLVED_AT_DEPLOY = "<resolved at deploy: EKS default for Kubernetes {k8s}>"
ADDON_VERSION_PATTERN = r"^v\d+\.\d+\.\d+-eksbuild\.\d+$"
# The oldest version of an add-on the platform runs, where an older one does harm: below it a stack's pin is
# refused and `higgsfield preflight` fails the version EKS would pick. The node monitoring agent up to v1.6.3 reads
# XID 13 and 31, which a team's own out-of-bounds CUDA kernel raises, as the GPU failed (Fatal,
# AcceleratedHardwareReady False: WellKnownXidCodes in aws/eks-node-monitoring-agent:monitors/nvidia/dcgm/
# dcgm_policies.go@v1.6.0), and node repair then replaces a shared node under another team's gang; from v1.6.4 the
# list holds hardware XIDs alone (same path @v1.6.4).
ADDON_FLOORS: dict[str, str] = {"eks-node-monitoring-agent": "v1.6.4"}


def addon_release(version: str) -> tuple[int, ...]:
    """v1.6.4-eksbuild.2 -> (1, 6, 4): the release an add-on version builds."""
    return tuple(int(part) for part in version.lstrip("v").split("-")[0].split("."))


def below_floor(name: str, version: str) -> str | None:
    """The floor `version` of add-on `name` is below (ADDON_FLOORS), else None: also for what is no add-on version
    (the offline plan's ADDON_RESOLVED_AT_DEPLOY, an answer without one), which has no release to compare."""
    floor = ADDON_FLOORS.get(name)
    if not floor or not re.match(ADDON_VERSION_PATTERN, version):
        return None
    return floor if addon_release(version) < addon_release(floor) else None


EKS_ADDONS: dict[str, str] = {
    "vpc-cni": "pod networking (NetworkPolicy enforcement on)",
    "kube-proxy": "Service routing on every node",
    "coredns": "cluster DNS",
    "eks-pod-identity-agent": "Pod Identity credentials for the platform's service accounts",
    "aws-fsx-csi-driver": "the Lustre volume (when higgsfield:fsx.enabled)",
    "aws-ebs-csi-driver": "Prometheus' volume (when higgsfield:observability.enabled)",
    "amazon-cloudwatch-observability": "container logs to CloudWatch (when higgsfield:observability.enabled)",
    "eks-node-monitoring-agent": "node health for auto-repair (when higgsfield:observability.enabled)",
}


@dataclass(frozen=True)
class AddonVersion:
    """A managed EKS add-on for one cluster: `pin` if the stack set one, else EKS's default for
    `kubernetes_version`, resolved at deploy time."""

    name: str
    kubernetes_version: str
    pin: str | None = None


def addon_versions(
    kubernetes_version: str, pins: dict[str, str], names: tuple[str, ...] = tuple(EKS_ADDONS)
) -> dict[str, AddonVersion]:
    """The add-ons `names` for a cluster of `kubernetes_version`, with the stack's pins."""
    return {name: AddonVersion(name, kubernetes_version, pins.get(name)) for name in names}


# --- Node images ------------------------------------------------------------------------
# Managed node groups pick the latest EKS-optimized AMI of this type for the cluster version
# at creation; the release is then held until the node group is updated (or pinned with
# higgsfield:nodeReleaseVersion, an AMI release such as 1.35.2-20261120: awslabs/amazon-eks-ami
# releases). docs.aws.amazon.com/eks/latest/APIReference/API_Nodegroup.html (amiType,
# releaseVersion, version), checked 2026-12-02.
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
    "12.0": 525,
    "12.1": 530,
    "12.2": 535,
    "12.3": 545,
    "12.4": 550,
    "12.5": 555,
    "12.6": 560,
    "12.8": 570,
    "12.9": 575,
    "13.0": 580,
    "13.1": 590,
}


@dataclass(frozen=True)
class Chart:
    """A Helm chart pinned to an exact version, from its official repository, with the
    Kubernetes range the component supports (None: the chart is not tied to a range).
    `{version}` in the source and the range's texts is the chart's version: the pin is written once."""

    name: str
    version: str
    repo: str
    source: Source
    kubernetes: KubernetesRange | None = None

    def __post_init__(self) -> None:
        def own(text: str) -> str:
            return text.replace("{version}", self.version)

        source = replace(self.source, where=own(self.source.where), check=own(self.source.check))
        object.__setattr__(self, "source", source)
        if self.kubernetes:
            object.__setattr__(
                self,
                "kubernetes",
                replace(self.kubernetes, component=own(self.kubernetes.component), source=own(self.kubernetes.source)),
            )


# Cluster Autoscaler chart 9.59.0 (appVersion 1.35.0; the newest chart at kubernetes/autoscaler
# 2026-08-22). The image is set per Kubernetes minor below: the autoscaler's versions "match
# Kubernetes minor releases exactly", and a cluster should run "the latest Cluster Autoscaler release
# that corresponds to the minor version of Kubernetes" (the prose of "Releases", kubernetes/autoscaler:
# cluster-autoscaler/README.md@cluster-autoscaler-1.35.2). Its table stops at 1.34.x (chart 9.51.0+),
# even at cluster-autoscaler-1.36.1 and on master: 1.35's pairing rests on the prose and on
# version/version.go, not on that table.
CLUSTER_AUTOSCALER = Chart(
    "cluster-autoscaler",
    "9.59.0",
    "https://kubernetes.github.io/autoscaler",
    verified(
        "kubernetes/autoscaler:cluster-autoscaler/charts/cluster-autoscaler/Chart.yaml"
        "@cluster-autoscaler-chart-{version}"
    ),
)
# The latest patch of each minor: the newest cluster-autoscaler-1.MINOR.PATCH tags of
# kubernetes/autoscaler (mirror of 2026-08-22); version/version.go at each tag says the same
# (e.g. ClusterAutoscalerVersion = "1.35.2" at cluster-autoscaler-1.35.2). Each image supports
# exactly its own minor (the README's Releases table).
CLUSTER_AUTOSCALER_IMAGE = {"1.32": "v1.32.7", "1.33": "v1.33.6", "1.34": "v1.34.5", "1.35": "v1.35.2"}
CLUSTER_AUTOSCALER_IMAGE_SOURCE = (
    "kubernetes/autoscaler:cluster-autoscaler/version/version.go@cluster-autoscaler-{patch}"
)

# NVIDIA device plugin with GPU feature discovery (driver/CUDA labels). kubeVersion ">= 1.10.0-0"
# and "Kubernetes version >= 1.10" (device plugin API v1beta1), no upper bound published.
# 0.19.3, not 0.19.0: 0.19.0 turned MOFED, GDRCopy and GDS on by default (#1550), so every
# GPU pod got every /dev/infiniband/uverbs* - all EFA devices, whatever it asked the EFA plugin for
# (NVIDIA/k8s-device-plugin#1692); 0.19.3 reverts the defaults (commit 2ffedc34b, #1837:
# cmd/nvidia-device-plugin/main.go@v0.19.3, the mofed-enabled/gdrcopy-enabled/gds-enabled flags
# have no Value). The chart's values.yaml is unchanged from v0.19.0 (`git diff --stat v0.19.0
# v0.19.3 -- deployments/helm/nvidia-device-plugin`: Chart.yaml and the service-account templates
# only), so every key components/device_plugins.py sets is still read; mofedEnabled, gdrcopyEnabled
# and gdsEnabled (values.yaml@v0.19.3, rendered as MOFED_ENABLED/... by
# templates/daemonset-device-plugin.yml when a bool) are set false there as well.
NVIDIA_DEVICE_PLUGIN = Chart(
    "nvidia-device-plugin",
    "0.19.3",
    "https://nvidia.github.io/k8s-device-plugin",
    verified("NVIDIA/k8s-device-plugin:deployments/helm/nvidia-device-plugin/Chart.yaml@v{version}"),
    KubernetesRange(
        "NVIDIA device plugin {version}",
        "1.10",
        None,
        "NVIDIA/k8s-device-plugin:deployments/helm/nvidia-device-plugin/Chart.yaml@v{version} (kubeVersion)",
    ),
)
# EKS EFA device plugin chart v0.5.30 = image v0.5.20 (appVersion and values.yaml image.tag),
# published in the chart index (aws/eks-charts:index.yaml@c7f9ea56, gh-pages). The chart states
# no Kubernetes range (no kubeVersion, README: "Helm v3" only); it serves the device plugin API
# v1beta1 that every supported Kubernetes has.
EFA_DEVICE_PLUGIN = Chart(
    "aws-efa-k8s-device-plugin",
    "v0.5.30",
    "https://aws.github.io/eks-charts",
    verified("aws/eks-charts:stable/aws-efa-k8s-device-plugin/Chart.yaml@5239609242f3430be50fb0b714a24d3ef2b47983"),
    KubernetesRange(
        "EFA device plugin v0.5.20",
        "1.10",
        None,
        "the device plugin API v1beta1 (Kubernetes 1.10+); aws/eks-charts states no kubeVersion",
    ),
)

# Lustre client/server version of new file systems (FSx API FileSystemTypeVersion; 2.15 is the
# newest, needed by AL2023 clients). docs.aws.amazon.com/fsx/latest/LustreGuide/lustre-client-matrix.html
# The FSx CSI driver is an EKS add-on (EKS_ADDONS, resolved at deploy). Read at
# kubernetes-sigs/aws-fsx-csi-driver@v1.8.0 for tenancy (components/storage.py): static PVs only
# (examples/kubernetes/static_provisioning), NodePublishVolume mounts `dnsname@tcp:/mountname` with
# the PV's mountname and adds `ro` for read-only publishes (pkg/driver/node.go); the CSIDriver
# declares no Ephemeral lifecycle (charts/aws-fsx-csi-driver/templates/csidriver.yaml), so inline
# csi volumes are refused. Check after EKS moves its default: the add-on vX.Y.Z-eksbuild.N packages
# driver tag vX.Y.Z; `git show vX.Y.Z:pkg/driver/node.go | grep -n mountname`.
LUSTRE_VERSION = "2.15"

# Volcano batch scheduler 1.15.1, official chart. The chart's values take the whole scheduler
# config as custom.scheduler_config_override, a node selector as custom.default_ns and
# custom.leader_elect_enable (volcano-sh/volcano:installer/helm/chart/volcano/values.yaml and
# templates/scheduler.yaml@v1.15.1). Kubernetes 1.23-1.35: the "Kubernetes compatibility" table,
# row "Volcano v1.15" (volcano-sh/volcano:README.md@v1.15.1; v1.13 stops at 1.33, v1.14 at 1.34).
# Published as volcano-1.15.1.tgz at volcano-sh.github.io/helm-charts (the stored index snapshot,
# volcano-sh/helm-charts:index.yaml@be34e957, predates the tag and lists 1.15.0). The Services and
# ports its scheduler and controller declare, which the scrape jobs select: components/
# observability.py SCRAPE_TARGETS (templates/scheduler.yaml, controllers.yaml@v1.15.1).
VOLCANO = Chart(
    "volcano",
    "1.15.1",
    "https://volcano-sh.github.io/helm-charts",
    verified("volcano-sh/volcano:installer/helm/chart/volcano/Chart.yaml@v{version}"),
    KubernetesRange(
        "Volcano {version}", "1.23", "1.35", "volcano-sh/volcano:README.md@v{version} (Kubernetes compatibility)"
    ),
)

# Kubeflow Training Operator v1 (docs/design/training-operator.md): the upstream standalone overlay at this
# ref, through components/kustomize/training-operator/kustomization.yaml (a test checks that file
# names this ref). The repository is kubeflow/trainer (renamed from kubeflow/training-operator; the
# v1.9.4 tag lives there). Flags --gang-scheduler-name, --leader-elect and --metrics-bind-address
# (":8080"): kubeflow/trainer:cmd/training-operator.v1/main.go@v1.9.4. Kubernetes 1.27+ (README.md
# "Version Matrix", latest) and tested up to 1.35 (.github/workflows/integration-tests.yaml: kind
# v1.34.3 and v1.35.0), both @v1.9.4.
TRAINING_OPERATOR_REF = "v1.9.4"
TRAINING_OPERATOR_OVERLAY = "https://github.com/kubeflow/trainer.git//manifests/overlays/standalone"
TRAINING_OPERATOR_KUBERNETES = KubernetesRange(
    f"Kubeflow Training Operator {TRAINING_OPERATOR_REF}",
    "1.27",
    "1.35",
    f"kubeflow/trainer:README.md@{TRAINING_OPERATOR_REF} (Version Matrix; "
    ".github/workflows/integration-tests.yaml: kind 1.34, 1.35)",
)

# metrics-server for the HPA the operator creates for elastic PyTorchJobs (chart 3.13.0 =
# metrics-server 0.8.0).
METRICS_SERVER = Chart(
    "metrics-server",
    "3.13.0",
    "https://kubernetes-sigs.github.io/metrics-server",
    verified("kubernetes-sigs/metrics-server:charts/metrics-server/Chart.yaml@metrics-server-helm-chart-{version}"),
)

# The Lustre layout runs on an EC2 layout client, not in a pod (components/storage.py
# LAYOUT_CLIENT_*: root squash leaves it the only client whose root can chown); no image to pin.

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
    source: Source


# Base: PyTorch's official -devel image (CUDA toolkit for building nccl-tests and the plugin; the
# stacks' cudaVersion 12.8 runs on the EKS AMI's driver 580, see CUDA_MIN_DRIVER_BRANCH). Pinned by
# tag only: no upstream file here publishes its digest. Check with
# `docker buildx imagetools inspect pytorch/pytorch:2.7.1-cuda12.8-cudnn9-devel` and pin the digest.
# Held at 2.7.1 although PyPI has torch 2.15.0 (`pip index versions torch`, 2026-12-04): which CUDA
# and Python the 2.15.0 images carry is in Docker Hub's tags, not readable here; a CUDA 13 image
# moves the runtime to libcudart.so.13 in other wheels (the loader configuration and link check of
# the image name nvidia.cuda_runtime and libcudart.so.12), CUDA 13.1 and later need driver 590 while
# the EKS AMIs ship 580 (EKS_NVIDIA_DRIVER_BRANCH), and a new Python changes every cp3xx wheel the
# image pins. The bump is a change of its own, built and run on a GPU node (docs/verified.md).
TRAINING_BASE_IMAGE = ImagePart(
    "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-devel",
    unverified(
        "hub.docker.com/r/pytorch/pytorch tags (tag only, digest unverified)",
        "docker buildx imagetools inspect pytorch/pytorch:2.7.1-cuda12.8-cudnn9-devel",
    ),
)
# The NCCL the job uses is the one PyTorch's wheel ships (nvidia-nccl-cu12, 2.26.x for torch 2.7.1
# cu128 - unverified here; the image build prints it, and the Dockerfile fails unless it is at
# least AWS_OFI_NCCL_MIN_NCCL).
# EFA user space (libfabric with the efa provider, rdma-core, Open MPI 4 in /opt/amazon/openmpi and
# 5 in /opt/amazon/openmpi5, both by default since 1.30.0): 1.50.0, the installer the EC2 user guide
# names as the latest stable (efa-start-nccl.html, step 5 "Install the EFA software", read in its
# zh_cn copy, 2026-12-04; installer ChangeLog 1.50.0 - Aug 2026). The anchors still pin 1.47.0
# (nccl-tests.Dockerfile@7217859f). 1.51.0 is named upstream of us but was not readable from here
# (no page, repository or tarball listing it): check `curl -fsI https://efa-installer.amazonaws.com/
# aws-efa-installer-1.51.0.tar.gz` and its ChangeLog before moving on.
EFA_INSTALLER = ImagePart(
    "1.50.0",
    verified("docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start-nccl.html (1.50.0, latest stable)"),
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
BOTO3 = ImagePart(
    "1.44.8", verified("boto/boto3:boto3/__init__.py@1.44.8")
)  # __version__, read in the wheel pip installed here from PyPI
AWS_OFI_NCCL = ImagePart("1.21.1", verified("aws/aws-ofi-nccl:RELEASENOTES.md@v1.21.1"))
AWS_OFI_NCCL_MIN_NCCL = (2, 17, 1)
AWS_OFI_NCCL_HAS_TUNER = True
AWS_OFI_NCCL_PREFIX = "/opt/aws-ofi-nccl"
# nccl-tests: the newest tag (NVIDIA/nccl-tests v2.19.6, 2026-07-09; the anchors pin v2.17.9). The
# link line is unchanged from v2.17.9 (-l$(CUDARTLIB) -lnccl, -lmpi with MPI=1; a static
# libnccl_test_os.a added: src/Makefile, src/common.mk@v2.19.6), and every use of an NCCL newer than
# PyTorch's (2.24-2.30 APIs) sits under `NCCL_VERSION_CODE >= NCCL_VERSION(...)` (src/*@v2.19.6), so it
# builds against the wheel's NCCL; the image build is what proves it (.github/workflows/image.yml).
NCCL_TESTS = ImagePart("v2.19.6", verified("NVIDIA/nccl-tests:src/Makefile@v2.19.6"))

# --- the examples of each class of work (docs/workload-classes.md) ----------------
# xgboost in the training image, for examples/xgboost-iris.yaml: the version pip installs from PyPI
# here (2026-12-03); examples/xgboost_iris.py was run with it on CPU, 2 ranks, tracker on rank 0
# (xgboost 3.2.0: xgboost/tracker.py RabitTracker(n_workers, host_ip, port), collective.py
# CommunicatorContext(dmlc_tracker_uri, dmlc_tracker_port, dmlc_task_id)).
XGBOOST = ImagePart("3.2.0", verified("dmlc/xgboost:python-package/xgboost/VERSION@v3.2.0"))
# TensorFlow's GPU image for examples/tf-mnist.yaml (the TFJob): pinned by tag; tensorflow 2.20.0 is
# on PyPI (pip index versions tensorflow, 2026-12-03), the image tag is not verifiable from here.
TENSORFLOW_IMAGE = ImagePart(
    "tensorflow/tensorflow:2.20.0-gpu",
    unverified(
        "hub.docker.com/r/tensorflow/tensorflow tags (tag only, digest unverified)",
        "docker buildx imagetools inspect tensorflow/tensorflow:2.20.0-gpu",
    ),
)


# --- observability ----------------------------------------------------------------------------
# kube-prometheus-stack 88.6.5 (adfinis/helm-charts#1982, 2026-09-07): newer than the stored
# prometheus-community/helm-charts snapshot (2026-08-22, newest tag kube-prometheus-stack-88.5.3,
# kubeVersion ">=1.25.0-0"). Held although upstream is at 91.x (91.2.1, 2026-09-13: the release notes
# in AndreiGavriliu/homelab#7310): three majors, each of which may move the prometheus-operator CRDs
# (which Helm never upgrades) and rename values; none of 89-91 can be read here, so a bump would be
# unreviewed. Check: `helm show values prometheus-community/kube-prometheus-stack --version 91.2.1`
# against prometheus_stack_values (components/observability.py) and the chart's README "Upgrading
# chart" sections for 89.x-91.x.
KUBE_PROMETHEUS_STACK = Chart(
    "kube-prometheus-stack",
    "88.6.5",
    "https://prometheus-community.github.io/helm-charts",
    unverified(
        "prometheus-community/helm-charts:charts/kube-prometheus-stack/Chart.yaml (adfinis/helm-charts#1982)",
        "helm search repo prometheus-community/kube-prometheus-stack --version {version}",
    ),
)
# DCGM exporter chart 4.8.2 (image 4.5.3-4.8.2-distroless), the newest in the chart index
# (NVIDIA/dcgm-exporter:helm-charts/index.yaml on gh-pages, 2026-05-05). Its DaemonSet runs the
# exporter with DCGM_EXPORTER_KUBERNETES=true (templates/daemonset.yaml), so every GPU series carries
# the workload's `pod`, `namespace` and `container` (internal/pkg/transformation/const.go), all
# @4.5.3-4.8.2; kubeVersion ">= 1.19.0-0". From 4.6.0 (`git diff 4.4.1-4.6.0 4.5.3-4.8.2 --
# deployment`): no value we set was renamed (nodeSelector, tolerations, serviceMonitor.enabled); the
# default tolerations became the control plane's taint (we replace them), resources gained limits
# (200m CPU, 512Mi), priorityClassName moved from the template to values (still
# system-node-critical), the service account token is mounted only for pod labels/UIDs or DRA (the
# pod attribution reads the kubelet's pod-resources socket, not the API), and the PCIe byte series
# became gauges (rates) and violation series count ns - neither is read by our rules or dashboard.
DCGM_EXPORTER = Chart(
    "dcgm-exporter",
    "4.8.2",
    "https://nvidia.github.io/dcgm-exporter/helm-charts",
    verified("NVIDIA/dcgm-exporter:deployment/Chart.yaml@4.5.3-4.8.2"),
)
# DCGM's diagnostics (`dcgmi diag`) in the health gate: the exporter's image cannot run them. Its chart's
# default tag (4.5.3-4.8.2-distroless, deployment/values.yaml) copies only libdcgm* from the DCGM packages,
# no dcgmi; its ubuntu22.04 tag installs datacenter-gpu-manager-4-core alone (both in docker/Dockerfile,
# NVIDIA/dcgm-exporter@4.5.3-4.8.2), which holds dcgmi, nv-hostengine and nvvs (`install(TARGETS dcgmi ...
# nv-hostengine COMPONENT Core)`, NVIDIA/DCGM:CMakeLists.txt@v4.5.3) but not the CUDA plugins the deeper
# levels run (memory, pcie, targeted stress: the -cuda12/-cuda13 packages, cmake/packaging.cmake there).
# DCGM's own image of the same release (4.5.3, the exporter's DCGM) installs datacenter-gpu-manager-4-cuda12
# and -cuda13, so dcgmi, the host engine and every level's plugins, entrypoint nv-hostengine
# (NVIDIA/DCGM:docker/Dockerfile.ubuntu22.04@v4.5.3); NVIDIA publishes it as cloud-native/dcgm. The
# repository's Dockerfile names do not say which tags are published (v4.6.0 still holds only the
# ubuntu22.04 one, its releases are tagged -ubuntu24.04): every public pin of 4.5.3 found in the stored
# GitHub index is `4.5.3-1-ubuntu24.04`, none `-ubuntu22.04` (which exists for 4.5.2, the GPU
# Operator's), so the ubuntu24.04 tag; the check that it exists is in PROVENANCE below.
DCGM_VERSION = "4.5.3"
DCGM_IMAGE = f"nvcr.io/nvidia/cloud-native/dcgm:{DCGM_VERSION}-1-ubuntu24.04"
# prometheus-adapter 5.3.0 (appVersion v0.12.0, as 5.2.0): values.yaml only adds nameOverride and
# fullnameOverride; no template changed (`git diff prometheus-adapter-5.2.0 prometheus-adapter-5.3.0`).
PROMETHEUS_ADAPTER = Chart(
    "prometheus-adapter",
    "5.3.0",
    "https://prometheus-community.github.io/helm-charts",
    verified("prometheus-community/helm-charts:charts/prometheus-adapter/Chart.yaml@prometheus-adapter-{version}"),
)
# The CloudWatch Observability add-on (EKS_ADDONS) ships its own DCGM exporter DaemonSet unless
# `dcgmExporter.enabled` is false (aws-observability/helm-charts:charts/amazon-cloudwatch-observability/
# values.yaml and templates/linux/dcgm-exporter-daemonset.yaml@71a298ff, chart 6.4.0, the source of
# the add-on); components/observability.py turns it off so that one exporter holds the GPUs'
# profiling counters ("The profiling module uses hardware subsystems that cannot be shared between
# multiple processes on the same machine": DCGM maintainers in NVIDIA/dcgm-exporter#7, and a
# system-wide driver lock in NVIDIA/DCGM#56). That the add-on's configuration schema takes the key
# is unverified here (EKS validates add-on configuration against that schema, so a key it lacks
# should fail the deploy rather than leave two exporters running).
CLOUDWATCH_DCGM_OFF = {"dcgmExporter": {"enabled": False}}


# --- provenance of the plain values ----------------------------------------------------------
_DOCS = "docs.aws.amazon.com/eks/latest/"
PROVENANCE: dict[str, Source] = {
    "KUBERNETES_DEFAULT": verified(_DOCS + "userguide/kubernetes-versions.html"),
    "KUBERNETES_SUPPORTED": verified(_DOCS + "userguide/kubernetes-versions.html"),
    "EKS_EXTENDED_SUPPORT": verified(_DOCS + "userguide/kubernetes-versions.html"),
    "EKS_STANDARD_SUPPORT_END": verified(_DOCS + "userguide/kubernetes-versions.html (release calendar)"),
    "EKS_ADDONS": verified(_DOCS + "userguide/workloads-add-ons-available-eks.html"),
    "ADDON_MOST_RECENT": unverified(
        "EKS DescribeAddonVersions compatibilities[].defaultVersion (a default per add-on and Kubernetes version)",
        "aws eks describe-addon-versions --kubernetes-version 1.35 --addon-name NAME "
        "--query 'addons[0].addonVersions[?compatibilities[0].defaultVersion].addonVersion'",
    ),
    "ADDON_FLOORS": verified(
        "aws/eks-node-monitoring-agent:monitors/nvidia/dcgm/dcgm_policies.go@v1.6.4 WellKnownXidCodes (hardware XIDs "
        "alone; @v1.6.0 held 13 and 31)"
    ),
    "CPU_AMI_TYPE": verified(_DOCS + "APIReference/API_Nodegroup.html"),
    "GPU_AMI_TYPES": verified(_DOCS + "APIReference/API_Nodegroup.html"),
    "EKS_NVIDIA_DRIVER_BRANCH": unverified(
        "EKS user guide, quoted in NVIDIA/aicr#2743",
        "kubectl get nodes -L nvidia.com/cuda.driver.major (GPU feature discovery label)",
    ),
    "CUDA_MIN_DRIVER_BRANCH": verified(
        "docs.nvidia.com/cuda/cuda-toolkit-release-notes (CUDA Toolkit and Corresponding Driver Versions)"
    ),
    "CLUSTER_AUTOSCALER_IMAGE": verified(
        CLUSTER_AUTOSCALER_IMAGE_SOURCE.format(patch="1.35.2") + " (and each minor's newest tag)"
    ),
    "LUSTRE_VERSION": verified("docs.aws.amazon.com/fsx/latest/LustreGuide/lustre-client-matrix.html"),
    "TRAINING_OPERATOR_REF": verified(
        f"kubeflow/trainer:manifests/overlays/standalone/kustomization.yaml@{TRAINING_OPERATOR_REF}"
    ),
    "TRAINING_OPERATOR_OVERLAY": verified(f"kubeflow/trainer:manifests/overlays/standalone@{TRAINING_OPERATOR_REF}"),
    "AWS_OFI_NCCL_MIN_NCCL": verified("aws/aws-ofi-nccl:RELEASENOTES.md@v1.21.1"),
    "AWS_OFI_NCCL_HAS_TUNER": verified("aws/aws-ofi-nccl:src/Makefile.am@v1.21.1"),
    "CLOUDWATCH_DCGM_OFF": unverified(
        "aws-observability/helm-charts:charts/amazon-cloudwatch-observability/values.yaml@71a298ff",
        "aws eks describe-addon-configuration --addon-name amazon-cloudwatch-observability "
        "--addon-version $(aws eks describe-addon-versions --addon-name amazon-cloudwatch-observability "
        "--kubernetes-version 1.35 --query 'addons[0].addonVersions[?compatibilities[0].defaultVersion].addonVersion' "
        "--output text) --query configurationSchema --output text | jq .properties.dcgmExporter",
    ),
}


# Constants that are our own settings or formats, not upstream pins.
NOT_PINS: tuple[str, ...] = (
    "ADDON_RESOLVED_AT_DEPLOY",
    "ADDON_VERSION_PATTERN",
    "AWS_OFI_NCCL_PREFIX",
    "CLUSTER_AUTOSCALER_IMAGE_SOURCE",
    "PROVENANCE",
    "NOT_PINS",
)
NOT_PINS = (*NOT_PINS, "EKS_SUPPORT_AS_OF")  # the date the support calendar was applied, not a pin


def sources() -> dict[str, Source]:
    """The source of every pin in this module, by constant name."""
    found = dict(PROVENANCE)
    for name, value in globals().items():
        if name.isupper() and isinstance(getattr(value, "source", None), Source):
            found[name] = value.source
        elif name.isupper() and isinstance(value, KubernetesRange):
            found[name] = verified(value.source)
    return found


def kubernetes_ranges() -> list[KubernetesRange]:
    """The Kubernetes range of every pinned component that constrains the cluster's version
    (the Cluster Autoscaler: exactly the minors it has an image for)."""
    ranges = [c.kubernetes for c in (VOLCANO, NVIDIA_DEVICE_PLUGIN, EFA_DEVICE_PLUGIN) if c.kubernetes]
    pinned = tuple(sorted(CLUSTER_AUTOSCALER_IMAGE, key=_minor))
    autoscaler = KubernetesRange(
        "Cluster Autoscaler (an image per minor)",
        pinned[0],
        pinned[-1],
        CLUSTER_AUTOSCALER_IMAGE_SOURCE.format(patch="1.MINOR.PATCH"),
        only=pinned,
    )
    return [*ranges, TRAINING_OPERATOR_KUBERNETES, autoscaler]


def components_outside(kubernetes_version: str) -> list[KubernetesRange]:
    """The pinned components that do not support `kubernetes_version`."""
    return [r for r in kubernetes_ranges() if not r.admits(kubernetes_version)]


# --- delivery (.github/workflows, components/delivery.py) ---------------------------------------
# Every third-party action the workflows use, pinned to the commit its release tag points at
# (read with `git rev-parse TAG^{commit}` in a clone of the action's repository, 2026-12-03);
# tests/delivery/test_workflows.py checks every `uses:` against this table. Inputs used were read in each
# action.yml at the tag (owner/repo:action.yml@TAG).
@dataclass(frozen=True)
class Action:
    version: str
    commit: str
    source: str


GITHUB_ACTIONS = {
    "actions/checkout": Action(
        "v7.0.1", "3d3c42e5aac5ba805825da76410c181273ba90b1", "actions/checkout:action.yml@v7.0.1"
    ),
    "actions/setup-python": Action(
        "v7.0.0", "5fda3b95a4ea91299a34e894583c3862153e4b97", "actions/setup-python:action.yml@v7.0.0"
    ),
    "aws-actions/configure-aws-credentials": Action(
        "v6.2.3", "e6de054238d6b7531b4efff3b6587d9aade6a06c", "aws-actions/configure-aws-credentials:action.yml@v6.2.3"
    ),
    # pulumi/actions v7 installs the Pulumi CLI itself (pulumi-version input) and runs on node24.
    "pulumi/actions": Action("v7.0.0", "8e5e406f4007fca908480587cb9893c07090f58d", "pulumi/actions:action.yml@v7.0.0"),
}
# The CodeBuild image of the GitHub Actions runners: Ubuntu 22.04 with Python 3 and the AWS CLI
# (docs.aws.amazon.com/codebuild/latest/userguide/ec2-compute-images.html). Unverified here:
# that actions/setup-python finds a Python 3.11 build for it (`python -V` in a first runner job). A bump
# changes the runner projects, an administrator's deploy (components/delivery.py RunnersAreTheAdministrators).
CODEBUILD_RUNNER_IMAGE = "aws/codebuild/standard:7.0"
PROVENANCE.update(
    {
        "DCGM_VERSION": verified(
            "NVIDIA/dcgm-exporter:deployment/values.yaml@4.5.3-4.8.2 (image tag <dcgm>-<exporter>)"
        ),
        "DCGM_IMAGE": unverified(
            "NVIDIA/DCGM:docker/Dockerfile.ubuntu22.04@v4.5.3 (contents; the tag as NVIDIA publishes it)",
            f"docker buildx imagetools inspect {DCGM_IMAGE} && "
            f"docker run --rm --entrypoint dcgmi {DCGM_IMAGE} --version",
        ),
    }
)
PROVENANCE["GITHUB_ACTIONS"] = verified(
    "actions/checkout:action.yml@v7.0.1 (each action's action.yml at its tag; commits by git rev-parse TAG^{commit})"
)
PROVENANCE["CODEBUILD_RUNNER_IMAGE"] = unverified(
    "docs.aws.amazon.com/codebuild/latest/userguide/ec2-compute-images.html",
    "aws codebuild list-curated-environment-images (then `python -V` after actions/setup-python in a first runner job)",
)

# --- the deploy job's pinned toolchain ------------------------------------------------------------
# The Pulumi CLI the preview and deploy jobs run: exact (pulumi/actions' `pulumi-version` input,
# pulumi/actions:src/config.ts@v7.0.0 defaults it to the range '^3'), the same release as the
# `pulumi` SDK pinned in requirements/deploy.txt (CLI and SDK are released together under one
# version; tests/delivery/test_ci_supply_chain.py keeps them equal). No checksum: the action downloads
# get.pulumi.com/releases/sdk/pulumi-v<version>-linux-x64.tar.gz with @actions/tool-cache and
# verifies nothing (pulumi/actions:src/libs/pulumi-cli.ts@v7.0.0 downloadCli), and it has no input
# for one (pulumi/actions:action.yml@v7.0.0).
PULUMI_CLI = "3.272.0"
PROVENANCE["PULUMI_CLI"] = unverified(
    "pulumi/actions:src/libs/pulumi-cli.ts@v7.0.0 (install path); version = the pulumi SDK in requirements/deploy.txt",
    "docker run --rm pulumi/pulumi-base:3.272.0 pulumi version (the release exists), then compare sha256sum of the "
    "tarball "
    "the deploy job downloads with https://get.pulumi.com/releases/sdk/pulumi-v3.272.0-checksums.txt",
)
# The deploy and preview jobs install exactly this (every wheel by sha256, no dev extras), made by
# `uv pip compile pyproject.toml --generate-hashes --python-version 3.11 --python-platform
# x86_64-manylinux_2_28 -o requirements/deploy.txt` (uv 0.13.9, from PyPI, 2026-12-03).
DEPLOY_LOCK = "requirements/deploy.txt"
NOT_PINS = (*NOT_PINS, "DEPLOY_LOCK")  # a path, not a pin: the pins are in the file (with hashes)

# --- the driver the image needs, and the driver each AMI release ships -------------------
# The CUDA of the training image: TRAINING_BASE_IMAGE's tag (pytorch/pytorch:2.7.1-cuda12.8-...;
# a test keeps them equal). The health gate wants at least CUDA_MIN_DRIVER_BRANCH of it on every
# node (NVIDIA's table "CUDA Toolkit and Corresponding Driver Versions" in the CUDA Toolkit release
# notes), not one branch constant: the AMI moves its branch (570 -> 580 in 2025-10, the table below).
TRAINING_IMAGE_CUDA = "12.8"
# kmod-nvidia-latest-dkms of AL2023_x86_64_NVIDIA in each EKS AMI release (its "Release version" per
# Kubernetes minor), Kubernetes 1.32-1.35, releases v20251023 (the first with 580) to v20260714:
# awslabs/amazon-eks-ami:CHANGELOG.md@81fec2e8 (2026-07-23), read with a script over its tables.
# The arm64 NVIDIA AMI ships the same version (its el9 build). A higgsfield:nodeReleaseVersion in
# this table is cross-checked (its driver against the CUDA's minimum; the gate expects exactly it);
# a newer release is not known here: `higgsfield check` says so, and the gate still demands the minimum.
EKS_AMI_NVIDIA_DRIVER = {
    "1.32.9-20251023": "570.195.03",
    "1.33.5-20251023": "570.195.03",
    "1.34.1-20251023": "580.95.05",
    "1.32.9-20251029": "570.195.03",
    "1.33.5-20251029": "580.95.05",
    "1.34.1-20251029": "580.95.05",
    "1.32.9-20251108": "580.95.05",
    "1.33.5-20251108": "580.95.05",
    "1.34.1-20251108": "580.95.05",
    "1.32.9-20251112": "580.95.05",
    "1.33.5-20251112": "580.95.05",
    "1.34.1-20251112": "580.95.05",
    "1.32.9-20251120": "580.105.08",
    "1.33.5-20251120": "580.105.08",
    "1.34.2-20251120": "580.105.08",
    "1.32.9-20251209": "580.105.08",
    "1.33.5-20251209": "580.105.08",
    "1.34.2-20251209": "580.105.08",
    "1.32.9-20251217": "580.105.08",
    "1.33.5-20251217": "580.105.08",
    "1.34.2-20251217": "580.105.08",
    "1.32.9-20260107": "580.105.08",
    "1.33.5-20260107": "580.105.08",
    "1.34.2-20260107": "580.105.08",
    "1.32.9-20260114": "580.105.08",
    "1.33.5-20260114": "580.105.08",
    "1.34.2-20260114": "580.105.08",
    "1.35.0-20260114": "580.105.08",
    "1.32.9-20260116": "580.105.08",
    "1.33.5-20260116": "580.105.08",
    "1.34.2-20260116": "580.105.08",
    "1.35.0-20260116": "580.105.08",
    "1.32.9-20260120": "580.126.09",
    "1.33.5-20260120": "580.126.09",
    "1.34.2-20260120": "580.126.09",
    "1.35.0-20260120": "580.126.09",
    "1.32.9-20260128": "580.126.09",
    "1.33.5-20260128": "580.126.09",
    "1.34.2-20260128": "580.126.09",
    "1.35.0-20260128": "580.126.09",
    "1.32.9-20260129": "580.126.09",
    "1.33.5-20260129": "580.126.09",
    "1.34.2-20260129": "580.126.09",
    "1.35.0-20260129": "580.126.09",
    "1.32.11-20260209": "580.126.09",
    "1.33.7-20260209": "580.126.09",
    "1.34.3-20260209": "580.126.09",
    "1.35.0-20260209": "580.126.09",
    "1.32.12-20260224": "580.126.09",
    "1.33.8-20260224": "580.126.09",
    "1.34.4-20260224": "580.126.09",
    "1.35.0-20260224": "580.126.09",
    "1.32.12-20260304": "580.126.09",
    "1.33.8-20260304": "580.126.09",
    "1.34.4-20260304": "580.126.09",
    "1.35.2-20260304": "580.126.09",
    "1.32.12-20260311": "580.126.09",
    "1.33.8-20260311": "580.126.09",
    "1.34.4-20260311": "580.126.09",
    "1.35.2-20260311": "580.126.09",
    "1.32.12-20260318": "580.126.09",
    "1.33.8-20260318": "580.126.09",
    "1.34.4-20260318": "580.126.09",
    "1.35.2-20260318": "580.126.09",
    "1.32.12-20260403": "580.126.09",
    "1.33.8-20260403": "580.126.09",
    "1.34.4-20260403": "580.126.09",
    "1.35.2-20260403": "580.126.09",
    "1.32.13-20260409": "580.126.09",
    "1.33.10-20260409": "580.126.09",
    "1.34.6-20260409": "580.126.09",
    "1.35.3-20260409": "580.126.09",
    "1.32.13-20260415": "580.126.09",
    "1.33.10-20260415": "580.126.09",
    "1.34.6-20260415": "580.126.09",
    "1.35.3-20260415": "580.126.09",
    "1.32.13-20260423": "580.126.09",
    "1.33.11-20260423": "580.126.09",
    "1.34.7-20260423": "580.126.09",
    "1.35.4-20260423": "580.126.09",
    "1.32.13-20260505": "580.126.09",
    "1.33.11-20260505": "580.126.09",
    "1.34.7-20260505": "580.126.09",
    "1.35.4-20260505": "580.126.09",
    "1.32.13-20260610": "580.159.03",
    "1.33.12-20260610": "580.159.03",
    "1.34.8-20260610": "580.159.03",
    "1.35.5-20260610": "580.159.03",
    "1.32.13-20260618": "580.159.03",
    "1.33.13-20260618": "580.159.03",
    "1.34.9-20260618": "580.159.03",
    "1.35.6-20260618": "580.159.03",
    "1.32.13-20260625": "580.159.03",
    "1.33.13-20260625": "580.159.03",
    "1.34.9-20260625": "580.159.03",
    "1.35.6-20260625": "580.159.03",
    "1.32.13-20260714": "580.159.03",
    "1.33.13-20260714": "580.159.03",
    "1.34.9-20260714": "580.159.03",
    "1.35.6-20260714": "580.159.03",
}


def nvidia_driver_of_release(release: str | None) -> str | None:
    """The NVIDIA driver an EKS AL2023 NVIDIA AMI release ships, where this module knows it."""
    return EKS_AMI_NVIDIA_DRIVER.get(release) if release else None


PROVENANCE["TRAINING_IMAGE_CUDA"] = unverified(
    "the tag of TRAINING_BASE_IMAGE (cuda12.8)",
    "docker run --rm pytorch/pytorch:2.7.1-cuda12.8-cudnn9-devel nvcc --version",
)
PROVENANCE["EKS_AMI_NVIDIA_DRIVER"] = verified(
    "awslabs/amazon-eks-ami:CHANGELOG.md@81fec2e8 (kmod-nvidia-latest-dkms per release)"
)

# Container logs with pod labels: our own application-log.conf for the add-on's Fluent Bit, given as
# add-on configuration under this key (components/container_logs.py; the chart's values at
# aws-observability/helm-charts:charts/amazon-cloudwatch-observability/values.yaml@71a298ff).
CLOUDWATCH_LOGS_LABELS_ON = "containerLogs.fluentBit.config.extraFiles"
PROVENANCE["CLOUDWATCH_LOGS_LABELS_ON"] = unverified(
    "aws-observability/helm-charts:charts/amazon-cloudwatch-observability/values.yaml@71a298ff "
    "(containerLogs.fluentBit.config.extraFiles)",
    "aws eks describe-addon-configuration --addon-name amazon-cloudwatch-observability --addon-version VERSION "
    "--query configurationSchema --output text | jq .properties.containerLogs.properties.fluentBit.properties.config",
)


# --- the GPU nodes' container toolkit and the AMI it comes with -----------------------------
# Not pins of ours: the EKS AL2023 NVIDIA AMI installs nvidia-container-toolkit from NVIDIA's
# repository at build time (awslabs/amazon-eks-ami:templates/al2023/provisioners/
# install-nvidia-driver.sh@v20260724, `dnf -y install nvidia-container-toolkit`). The settings
# components/gpu_pools.py writes (accept-nvidia-visible-devices-envvar-when-unprivileged,
# accept-nvidia-visible-devices-as-volume-mounts) and `nvidia-ctk config --in-place --set` were
# read at this toolkit tag; the user data powers the node off if they don't take.
NVIDIA_CONTAINER_TOOLKIT_READ = "v1.20.0"
EKS_AMI_READ = "v20260724"
PROVENANCE["NVIDIA_CONTAINER_TOOLKIT_READ"] = unverified(
    "NVIDIA/nvidia-container-toolkit:api/config/v1/config.go@v1.20.0 (the AMI's toolkit version is NVIDIA's latest "
    "when the AMI was built)",
    "kubectl debug node/<gpu-node> -it --image=busybox -- chroot /host nvidia-ctk --version",
)
PROVENANCE["EKS_AMI_READ"] = verified(
    "awslabs/amazon-eks-ami:templates/al2023/runtime/rootfs/etc/systemd/system/nodeadm-run.service@v20260724"
)


# --- the training image's runtime stage, and Karpenter -----------------------------------------
# The training image's runtime stage (images/training/Dockerfile): PyTorch's -runtime image of the
# same PyTorch/CUDA/cuDNN as TRAINING_BASE_IMAGE (the build stage), without compilers or CUDA headers.
TRAINING_RUNTIME_IMAGE = ImagePart(
    "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
    unverified(
        "hub.docker.com/r/pytorch/pytorch tags (tag only, digest unverified)",
        "docker buildx imagetools inspect pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
    ),
)
# Karpenter (a per-pool option for on-demand and spot GPU pools, docs/design/karpenter.md). The
# release script packages the chart with the tag's version (helm package --version "${version}",
# hack/release/common.sh@v1.14.1; Chart.yaml at the tag still reads 1.13.0) and pushes it to
# oci://public.ecr.aws/karpenter. Kubernetes 1.35 needs Karpenter >= 1.9 and 1.36 1.13.x
# (website/content/en/docs/upgrading/compatibility.md@v1.14.1). CRDs read at
# pkg/apis/crds/karpenter.sh_nodepools.yaml and karpenter.k8s.aws_ec2nodeclasses.yaml@v1.14.1
# (both v1), values at charts/karpenter/values.yaml@v1.14.1, IAM and the interruption queue at
# website/content/en/docs/getting-started/getting-started-with-karpenter/cloudformation.yaml@v1.14.1.
KARPENTER = Chart(
    "karpenter",
    "1.14.1",
    "oci://public.ecr.aws/karpenter",
    unverified(
        "aws/karpenter-provider-aws:hack/release/common.sh@v{version} (chart version = release tag)",
        "helm show chart oci://public.ecr.aws/karpenter/karpenter --version {version}",
    ),
    KubernetesRange(
        "Karpenter {version}",
        "1.30",
        "1.35",
        "aws/karpenter-provider-aws:website/content/en/docs/upgrading/compatibility.md@v{version}",
    ),
)
# Karpenter's CRDs as their own chart, released with the same version: Helm installs a chart's crds/
# only on first install and never upgrades them, so the upgrade guide recommends the karpenter-crd
# chart for the CRDs' lifecycle (website/content/en/docs/upgrading/upgrade-guide.md@v1.14.1, "CRD
# Upgrades"; charts/karpenter-crd/templates holds the same five CRDs as charts/karpenter/crds).
KARPENTER_CRD = Chart(
    "karpenter-crd",
    KARPENTER.version,
    KARPENTER.repo,
    unverified(
        "aws/karpenter-provider-aws:website/content/en/docs/upgrading/upgrade-guide.md@v{version} (CRD Upgrades)",
        "helm show chart oci://public.ecr.aws/karpenter/karpenter-crd --version {version}",
    ),
    KARPENTER.kubernetes,
)
# --- images the controllers pull, chart image pins, the operator's leader election ------------
# The Training Operator injects two images into team namespaces unless its flags say otherwise
# (kubeflow/trainer:cmd/training-operator.v1/main.go@v1.9.4 flags --pytorch-init-container-image and
# --mpi-kubectl-delivery-image; defaults in pkg/config/config.go@v1.9.4: "alpine:3.10", EOL since
# 2021-05, and "ghcr.io/kubeflow/training-v1/kubectl-delivery:latest"). Our kustomization passes both
# (components/kustomize/training-operator/kustomization.yaml; a test checks they are these values).
#
# PyTorch init container: `sh -c 'for i in $(seq N); do if nslookup MASTER; ...'` (pkg/controller.v1/
# pytorch/initcontainer.go@v1.9.4), so any Alpine has what it needs. Alpine 3.22 (supported to
# 2027-05). The index digest is the one independent projects pin for alpine:3.22.2 (e.g. the
# envoyproxy/ratelimit Dockerfile's `FROM alpine:3.22.2@sha256:4b7ce070...`); not read from the
# registry here (Docker Hub publishes it; no upstream file does).
PYTORCH_INIT_CONTAINER_IMAGE = (
    "docker.io/library/alpine:3.22.2@sha256:4b7ce07002c69e8f3d704a9c5d6fd3053be500b7f1c69fc0d80990c2ad8dd412"
)
# MPIJob launcher's init container (copies kubectl): built and pushed by the same workflow run as the
# operator image, tagged `v1-<short sha>` (.github/workflows/publish-core-images.yaml: kubectl-delivery
# in the matrix; template-publish-image/action.yaml: `type=sha,prefix=v1-`, @v1.9.4). The v1.9.4
# standalone overlay pins the operator at v1-93c5489 (manifests/overlays/standalone/kustomization.yaml
# `newTag`), so kubectl-delivery from that same commit. No digest is published upstream.
# The operator's own image, as the upstream overlay pins it (a commit tag; no digest upstream).
TRAINING_OPERATOR_IMAGE = "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489"
_OPERATOR_TAG = TRAINING_OPERATOR_IMAGE.rpartition(":")[2]
MPI_KUBECTL_DELIVERY_IMAGE = f"ghcr.io/kubeflow/training-v1/kubectl-delivery:{_OPERATOR_TAG}"
# controller-runtime leader election at the operator's pinned version (go.mod: controller-runtime
# v0.24.1): resource lock "leases" by default, in the namespace the pod runs in (the service account's
# namespace file), named --leader-election-id (main.go default "1ca428e5.training-operator.kubeflow.org").
# client-go's LeaseLock calls Get, Create and Update (tools/leaderelection/resourcelock/leaselock.go@v0.36.3).
TRAINING_OPERATOR_NAMESPACE = "kubeflow"  # the standalone overlay's `namespace:` @v1.9.4
TRAINING_OPERATOR_LEADER_ELECTION_ID = "1ca428e5.training-operator.kubeflow.org"
# Volcano images: vc-{scheduler,controller-manager,webhook-manager} at
# basic.image_tag_version (values.yaml@v1.15.1: "v1.15.1"); set explicitly so the chart's default can
# not drift. The chart's grafana (grafana/grafana:latest) and prometheus (prom/prometheus, no tag)
# render only with custom.metrics_enable (templates/grafana.yaml, prometheus.yaml@v1.15.1), which we
# keep false.
VOLCANO_IMAGE_TAG = f"v{VOLCANO.version}"
# ... pulled from GitHub's registry, not docker.io (anonymous pulls there are rate-limited per
# source address, and every node of a NAT gateway shares one): Volcano's release workflow pushes
# every tag's images to ghcr.io/volcano-sh as well as to docker.io/volcanosh (.github/workflows/
# release.yaml@v1.15.1, "Daily Release to GitHub Container Registry": IMAGE_PREFIX=ghcr.io/<owner>,
# on `push: tags: v*.*.*`; Makefile `images`: vc-scheduler, vc-controller-manager, vc-webhook-manager,
# vc-agent, vc-agent-scheduler). The chart joins basic.image_registry, basic.<component>_image_name
# and the tag (templates/scheduler.yaml, controllers.yaml, admission.yaml, admission-init.yaml@v1.15.1).
VOLCANO_IMAGE_REGISTRY = "ghcr.io"
VOLCANO_IMAGE_NAMES = {
    "scheduler_image_name": "volcano-sh/vc-scheduler",
    "controller_image_name": "volcano-sh/vc-controller-manager",
    "admission_image_name": "volcano-sh/vc-webhook-manager",
    "agent_image_name": "volcano-sh/vc-agent",
    "agent_scheduler_image_name": "volcano-sh/vc-agent-scheduler",
}
# IfNotPresent, not the chart's `Always` (values.yaml@v1.15.1 basic.image_pull_policy): a tag of a
# release is not rewritten, and with `Always` a registry outage stops a restarted scheduler.
VOLCANO_IMAGE_PULL_POLICY = "IfNotPresent"
PROVENANCE.update(
    {
        "PYTORCH_INIT_CONTAINER_IMAGE": unverified(
            "alpine:3.22.2 index digest as pinned by independent Dockerfiles (envoyproxy/ratelimit:Dockerfile)",
            "docker buildx imagetools inspect docker.io/library/alpine:3.22.2 --format '{{.Manifest.Digest}}'",
        ),
        "MPI_KUBECTL_DELIVERY_IMAGE": unverified(
            f"kubeflow/trainer:.github/workflows/template-publish-image/action.yaml@{TRAINING_OPERATOR_REF}"
            " (tag v1-<sha>) + "
            f"manifests/overlays/standalone/kustomization.yaml@{TRAINING_OPERATOR_REF} ({_OPERATOR_TAG})",
            f"docker buildx imagetools inspect {MPI_KUBECTL_DELIVERY_IMAGE}",
        ),
        "TRAINING_OPERATOR_IMAGE": verified(
            f"kubeflow/trainer:manifests/overlays/standalone/kustomization.yaml@{TRAINING_OPERATOR_REF} (images newTag)"
        ),
        "TRAINING_OPERATOR_NAMESPACE": verified(
            f"kubeflow/trainer:manifests/overlays/standalone/kustomization.yaml@{TRAINING_OPERATOR_REF}"
        ),
        "TRAINING_OPERATOR_LEADER_ELECTION_ID": verified(
            f"kubeflow/trainer:cmd/training-operator.v1/main.go@{TRAINING_OPERATOR_REF} (--leader-election-id)"
        ),
        "VOLCANO_IMAGE_TAG": verified(
            f"volcano-sh/volcano:installer/helm/chart/volcano/values.yaml@{VOLCANO_IMAGE_TAG} (basic.image_tag_version)"
        ),
        # No digest: none is published in a file upstream; the chart takes one as `<tag>@sha256:...` in
        # basic.<component>_image_tag_version (it renders registry/name:tag) once read from the registry.
        "VOLCANO_IMAGE_REGISTRY": unverified(
            f"volcano-sh/volcano:.github/workflows/release.yaml@{VOLCANO_IMAGE_TAG} (pushes each tag to "
            "ghcr.io/volcano-sh; tag only, digest unverified)",
            f"docker buildx imagetools inspect ghcr.io/volcano-sh/vc-scheduler:{VOLCANO_IMAGE_TAG} (and "
            "vc-controller-manager, vc-webhook-manager)",
        ),
        "VOLCANO_IMAGE_NAMES": verified(
            f"volcano-sh/volcano:Makefile@{VOLCANO_IMAGE_TAG} (images: ${{IMAGE_PREFIX}}/vc-<component>) + "
            ".github/workflows/release.yaml"
        ),
        "VOLCANO_IMAGE_PULL_POLICY": verified(
            f"volcano-sh/volcano:installer/helm/chart/volcano/values.yaml@{VOLCANO_IMAGE_TAG} (basic.image_pull_policy)"
        ),
    }
)
