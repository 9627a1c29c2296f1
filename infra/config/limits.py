"""What AWS and Kubernetes refuse, refused here first: tags, bucket names, principals,
endpoint CIDRs, node labels and taints. Each rule cites where AWS or Kubernetes states it.

These are plain functions over values (raising ValueError with the message), used as pydantic
validators by the models of the other modules; nothing here reads config.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata

from infra.config.base import NAMESPACE, shown
from infra.core.names import GPU_RESOURCE as GPU_TAINT_KEY
from infra.core.names import HOSTNAME_LABEL, STARTUP_TAINT_KEY

# --- tags -------------------------------------------------------------------------------------
# "Tag naming limits and requirements" (docs.aws.amazon.com/tag-editor/latest/userguide/tagging.html,
# and the same list in docs.aws.amazon.com/general/latest/gr/aws_tagging.html): at most 50 tags per
# resource; keys 1-128 and values 0-256 Unicode characters; "letters, numbers, and spaces
# representable in UTF-8, and the following characters: + - = . _ : / @"; the aws: prefix is
# reserved for AWS's use. (Some services allow fewer characters; EC2 allows all of these.)
# As a pattern: `^([\p{L}\p{Z}\p{N}_.:/=+\-@]*)$` for TagKey and TagValue
# (botocore/data/fsx/2018-03-01/service-2.json, the strictest of the services the program tags):
# Unicode letters, separators (any space, not only ASCII's) and numbers, by general category.
MAX_TAGS = 50
TAG_KEY_LENGTH, TAG_VALUE_LENGTH = 128, 256
_TAG_PUNCTUATION = frozenset("_.:/=+-@")


def _tag_character(c: str) -> bool:
    return c in _TAG_PUNCTUATION or unicodedata.category(c)[0] in "LZN"


# Tags the program sets itself besides higgsfield:stack / higgsfield:environment: Name, the cluster
# and load-balancer role tags on subnets (components/network.py), the pool tag on node groups and
# ASGs (components/gpu_pools.py), the Cluster Autoscaler's (components/autoscaler.py). A config tag
# with one of these keys would be overwritten silently.
PROGRAM_TAG_KEYS = ("Name", "higgsfield.io/pool")
PROGRAM_TAG_PREFIXES = ("kubernetes.io/", "k8s.io/", "karpenter.sh/", "eks:", "eks.amazonaws.com/")
# The most tags the program adds to one resource on top of the configured ones (subnets: the two
# higgsfield:* tags, Name, kubernetes.io/cluster/..., kubernetes.io/role/...); a test checks every
# resource of every shipped stack's plan against it (tests/config/test_hostile_inputs.py).
PROGRAM_TAGS = 6


def tag_text(value: str, what: str, limit: int) -> str:
    if len(value) > limit or not all(_tag_character(c) for c in value):
        raise ValueError(
            f"{shown(value)} is not a valid AWS tag {what}: at most {limit} of letters, digits, spaces and + - = . _ "
            ": / @ "
            "(AWS tagging rules, docs.aws.amazon.com/tag-editor/latest/userguide/tagging.html)"
        )
    return value


def tag_key(name: str) -> str:
    if not name:
        raise ValueError("a tag key is 1 to 128 characters, not empty")
    tag_text(name, "key", TAG_KEY_LENGTH)
    if name.lower().startswith("aws:"):
        raise ValueError(f"{shown(name)}: the aws: prefix is reserved for AWS (AWS tagging rules)")
    if name.lower().startswith(f"{NAMESPACE}:"):
        raise ValueError(
            f"{shown(name)}: {NAMESPACE}:* tags are set by the program (higgsfield:stack, higgsfield:environment), "
            "not by config"
        )
    if name in PROGRAM_TAG_KEYS or name.startswith(PROGRAM_TAG_PREFIXES):
        raise ValueError(
            f"{shown(name)} is a tag the program sets itself ({', '.join(PROGRAM_TAG_KEYS)}, "
            f"{', '.join(p + '*' for p in PROGRAM_TAG_PREFIXES)}): it would be overwritten"
        )
    return name


def tag_value(value: str) -> str:
    tag_text(value, "value", TAG_VALUE_LENGTH)
    # "Don't use aws:, AWS:, or any upper or lowercase combination of such as a prefix for either
    # keys or values" (docs.aws.amazon.com/batch/latest/userguide/tag-restrictions.html)
    if value.lower().startswith("aws:"):
        raise ValueError(f"{shown(value)}: the aws: prefix is reserved for AWS, in tag values too (AWS tagging rules)")
    return value


# --- S3 bucket names ----------------------------------------------------------------------------
# "General purpose bucket naming rules" (docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html):
# 3-63 characters of a-z 0-9 . -; begin and end with a letter or number; no two adjacent periods;
# not formatted as an IP address; not beginning with xn--, sthree- or amzn-s3-demo-; not ending with
# -s3alias, --ol-s3, .mrap, --x-s3 or --table-s3. (Periods also break virtual-hosted HTTPS: refused
# by nothing here, but said in the message of no rule.)
S3_BUCKET_PATTERN = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
_BUCKET_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_BUCKET_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
_S3_RULES = "docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html"


def s3_bucket(name: str) -> str:
    if not re.fullmatch(S3_BUCKET_PATTERN, name):
        raise ValueError(
            f"{shown(name)} is not an S3 bucket name: 3-63 of a-z 0-9 . -, starting and ending with a letter or "
            f"digit ({_S3_RULES})"
        )
    if ".." in name:
        raise ValueError(f"{shown(name)} is not an S3 bucket name: no two adjacent periods ({_S3_RULES})")
    if re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+", name):
        raise ValueError(
            f"{shown(name)} is not an S3 bucket name: it must not be formatted as an IP address ({_S3_RULES})"
        )
    if name.startswith(_BUCKET_PREFIXES) or name.endswith(_BUCKET_SUFFIXES):
        raise ValueError(
            f"{shown(name)} is not an S3 bucket name: S3 reserves the prefixes {', '.join(_BUCKET_PREFIXES)} and the "
            f"suffixes {', '.join(_BUCKET_SUFFIXES)} ({_S3_RULES})"
        )
    return name


# --- EKS access-entry principals ----------------------------------------------------------------
# "An access entry includes the Amazon Resource Name (ARN) of one, and only one, existing IAM
# principal. An IAM principal can't be included in more than one access entry." -- an IAM role or
# user; an STS assumed-role ARN names one session of a role, not an IAM principal, and ends when
# the session does (docs.aws.amazon.com/eks/latest/userguide/creating-access-entries.html). Not
# checked here what EKS answers for one: `aws eks create-access-entry --cluster-name C
# --principal-arn arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION`.
_ASSUMED_ROLE = re.compile(r"^arn:(aws[a-z-]*):sts::([0-9]{12}):assumed-role/([\w+=,.@-]+)/.+$", re.ASCII)


# IAM's own grammar (botocore/data/iam/2010-05-08/service-2.json): roleNameType and userNameType
# `[\w+=,.@-]+` of 1-64 characters (AWS's \w: ASCII letters, digits and _), pathType
# `(\u002F)|(\u002F[\u0021-\u007E]+\u002F)` of 1-512; an IAM ARN has no region. The stack's region
# is one of the aws partition's (infra/config/stack.py eks_regions), so its cluster's principals
# are too: an aws-cn or aws-us-gov ARN names an account the cluster's partition cannot reach.
STACK_PARTITION = "aws"
IAM_NAME_LENGTH, IAM_PATH_LENGTH = 64, 512
_IAM_NAME = re.compile(r"[A-Za-z0-9_+=,.@-]{1,64}", re.ASCII)
_IAM_PATH = re.compile(r"/([\x21-\x7e]+/)?", re.ASCII)
_IAM_DOC = "botocore/data/iam/2010-05-08/service-2.json roleNameType, userNameType, pathType"


def access_entry_principal(arn: str) -> str:
    """`arn` if an EKS access entry can take it: an IAM role or user of the stack's partition, by
    IAM's grammar; an STS session, another partition's or another service's ARN is refused."""
    found = _ASSUMED_ROLE.match(arn)
    if found:
        partition, account, role = found.groups()
        raise ValueError(
            f"{shown(arn)} is an STS session of role {role}, not an IAM principal: an EKS access entry takes the "
            "role's ARN, "
            f"arn:{partition}:iam::{account}:role/{role} (with its path, if it has one; `aws iam get-role "
            f"--role-name {role}`) "
            "(docs.aws.amazon.com/eks/latest/userguide/creating-access-entries.html)"
        )
    parts = arn.split(":", 5)
    if len(parts) != 6:
        return arn  # the pattern on the setting names what it is not
    _, partition, service, region, _, resource = parts
    if partition != STACK_PARTITION:
        raise ValueError(
            f"{shown(arn)} is in partition {partition}, but the stack's region is in {STACK_PARTITION}: "
            f"its principals are arn:{STACK_PARTITION}:iam::ACCOUNT:role/NAME"
        )
    if service != "iam" or region:
        raise ValueError(f"{shown(arn)} is not an IAM role or user ARN (arn:aws:iam::ACCOUNT:role/NAME, no region)")
    kind, _, rest = resource.partition("/")
    folder, _, name = rest.rpartition("/")
    path = f"/{folder}/" if folder else "/"
    if not _IAM_NAME.fullmatch(name):
        raise ValueError(
            f"{shown(arn)}: IAM {kind} names are 1-{IAM_NAME_LENGTH} of A-Z a-z 0-9 and + = , . @ _ - ({_IAM_DOC})"
        )
    if len(path) > IAM_PATH_LENGTH or not _IAM_PATH.fullmatch(path) or "//" in path:
        raise ValueError(
            f"{shown(arn)}: an IAM path is / or /SEGMENTS/ of printable ASCII, "
            f"at most {IAM_PATH_LENGTH} characters ({_IAM_DOC})"
        )
    return arn


# --- the public endpoint ------------------------------------------------------------------------
# "Public endpoint access CIDR ranges per cluster: 40" (docs.aws.amazon.com/eks/latest/userguide/
# service-quotas.html, a quota AWS does not raise; aws/containers-roadmap#2174 asks for more).
# The public endpoint sees the internet addresses requests come from, so a private, shared
# (carrier-grade NAT), loopback, link-local, multicast or reserved range can never match one: EKS
# answers "The following CIDRs are invalid in publicAccessCidrs" for CIDRs it does not take
# (docs.aws.amazon.com/eks/latest/userguide/cluster-endpoint.html); which of these ranges it
# refuses with that message is not checked here: `aws eks update-cluster-config --name C
# --resources-vpc-config publicAccessCidrs=10.0.0.0/8`. The ranges: IANA IPv4 Special-Purpose
# Address Registry (RFC 6890). The documentation ranges (RFC 5737: 192.0.2.0/24, 198.51.100.0/24,
# 203.0.113.0/24) are accepted: the example stacks use one as a placeholder, which `check` reports
# (no request comes from it) and `init` does not copy.
MAX_PUBLIC_CIDRS = 40
NOT_ON_THE_INTERNET = {
    "0.0.0.0/8": "'this network'",
    "10.0.0.0/8": "private (RFC 1918)",
    "100.64.0.0/10": "shared carrier-grade NAT (RFC 6598)",
    "127.0.0.0/8": "loopback",
    "169.254.0.0/16": "link-local",
    "172.16.0.0/12": "private (RFC 1918)",
    "192.168.0.0/16": "private (RFC 1918)",
    "224.0.0.0/4": "multicast",
    "240.0.0.0/4": "reserved (and broadcast)",
}


DOCUMENTATION_RANGES = ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")


def documentation_range(cidr: str) -> bool:
    """A range of RFC 5737's, for examples only: no request to the public endpoint comes from it."""
    try:
        net = ipaddress.IPv4Network(cidr, strict=False)
    except ValueError:
        return False  # not a CIDR at all: the stack's validation names it
    return any(net.subnet_of(ipaddress.IPv4Network(r)) for r in DOCUMENTATION_RANGES)


def public_cidr(cidr: str) -> str:
    net = ipaddress.IPv4Network(cidr)
    if net.prefixlen == 0:
        return cidr  # the whole internet: allowed outside prod (the stack's rule)
    what = off_the_internet(net)
    if what:
        raise ValueError(
            f"{net} is a {what} range: requests to the public endpoint never come from it (the VPC reaches the "
            "private endpoint); list the public egress ranges of your office or VPN"
        )
    return cidr


def off_the_internet(net: ipaddress.IPv4Network) -> str | None:
    """What kind of range of NOT_ON_THE_INTERNET holds `net`, or None: one the stack settings refuse as an allow-list
    entry. Not Python's is_private, which also holds ranges the settings accept and the policy pack counts
    (198.18.0.0/15, the documentation ranges)."""
    return next(
        (what for special, what in NOT_ON_THE_INTERNET.items() if net.subnet_of(ipaddress.IPv4Network(special))), None
    )


# --- node labels and taints ---------------------------------------------------------------------
# What the kubelet refuses to register itself with (--node-labels; EKS managed node groups pass a
# node group's labels that way): a label in the kubernetes.io or k8s.io namespaces (or a subdomain
# of either) unless it is one of the kubelet's own labels or in the kubelet.kubernetes.io /
# node.kubernetes.io namespaces -- kubernetes/kubernetes:cmd/kubelet/app/options/options.go
# (ValidateKubeletFlags, isKubernetesLabel: "unknown 'kubernetes.io' or 'k8s.io' labels specified
# with --node-labels", and the kubelet exits) and pkg/kubelet/apis/well_known_labels.go
# (kubeletLabels, kubeletLabelNamespaces, IsKubeletLabel), read in the stored copy at commit
# 04575f01b0426f8494d17dc85d47200fcdef3a5e; the NodeRestriction admission plugin refuses the same
# set from a kubelet (plugin/pkg/admission/noderestriction/admission.go getForbiddenLabels). So
# node-role.kubernetes.io/* is refused too. Not re-read at the v1.35 tag here (the repository is
# too large to fetch): `git -C kubernetes show v1.35.0:pkg/kubelet/apis/well_known_labels.go`.
KUBELET_LABELS = (
    HOSTNAME_LABEL,
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "failure-domain.kubernetes.io/zone",
    "failure-domain.kubernetes.io/region",
    "kubernetes.io/instance-type",
)
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")


def _namespace(key: str) -> str:
    return key.split("/", 1)[0] if "/" in key else ""


def _in(namespace: str, domain: str) -> bool:
    return namespace == domain or namespace.endswith("." + domain)


def kubelet_refuses(key: str) -> bool:
    """Whether the kubelet refuses to start with `key` among its --node-labels."""
    namespace = _namespace(key)
    if not (_in(namespace, "kubernetes.io") or _in(namespace, "k8s.io")):
        return False
    return key not in KUBELET_LABELS and not any(_in(namespace, allowed) for allowed in KUBELET_LABEL_NAMESPACES)


# The platform's own node labels and taints (components/gpu_pools.py pool_labels/pool_taints,
# components/cpu_nodes.py): a pool may neither override nor duplicate them. higgsfield.io/* is the
# platform's namespace as a whole (the pool, the health gate's marks, the system nodes' role and
# taint). The EKS accelerator label and the NVIDIA/EFA labels are the device plugins' and the
# autoscaler's contract (components/device_plugins.py, components/gpu_pools.py).
PLATFORM_LABEL_NAMESPACES = ("higgsfield.io",)
PLATFORM_LABELS = ("nvidia.com/gpu.present", "vpc.amazonaws.com/efa.present", "k8s.amazonaws.com/accelerator")
# The health gate's taint on every new node of a gated pool (components/healthgate.py): the Cluster
# Autoscaler's startup-taint prefix (StartupTaintPrefix, kubernetes/autoscaler:cluster-autoscaler/
# utils/taints/taints.go@cluster-autoscaler-1.35.0), so scale-from-zero plans ignore it. At most 63
# characters: EKS refuses a node group taint key of more ("Length Constraints: Minimum length of 1.
# Maximum length of 63", docs.aws.amazon.com/eks/latest/APIReference/API_Taint.html; botocore's
# eks/2017-11-01 shape taintKey); this one is 62.
# The GPU taint, the health gate's startup taint and the system nodes' taint
# (higgsfield.io/system), by key: a pool's own taint with one of these keys, any value or effect,
# would replace or shadow the platform's.
PLATFORM_TAINT_KEYS = (GPU_TAINT_KEY, STARTUP_TAINT_KEY, "higgsfield.io/system")
# Taint keys the Cluster Autoscaler reads as startup/status taints of its own (it ignores them when it
# plans a node: kubernetes/autoscaler:cluster-autoscaler/utils/taints/taints.go@cluster-autoscaler-1.35.0,
# StartupTaintPrefix / StatusTaintPrefix / IgnoreTaintPrefix).
AUTOSCALER_TAINT_PREFIXES = (
    "startup-taint.cluster-autoscaler.kubernetes.io/",
    "status-taint.cluster-autoscaler.kubernetes.io/",
    "ignore-taint.cluster-autoscaler.kubernetes.io/",
)


def pool_label(key: str) -> str | None:
    """Why a pool may not set node label `key`, or None."""
    if key in PLATFORM_LABELS or any(_in(_namespace(key), ns) for ns in PLATFORM_LABEL_NAMESPACES):
        return (
            f"{shown(key)} is the platform's own node label ({', '.join(PLATFORM_LABELS)}, higgsfield.io/*): a "
            "pool may not override it"
        )
    if kubelet_refuses(key):
        return (
            f"{shown(key)} is in the kubernetes.io/k8s.io namespaces, which the kubelet refuses to register a node "
            "with (it would not start: "
            f"allowed are {', '.join(KUBELET_LABEL_NAMESPACES)}/* and the kubelet's own labels; kubernetes/kubernetes "
            "cmd/kubelet/app/options/options.go ValidateKubeletFlags); set node-role and the like after the node "
            "joins, or use your own prefix"
        )
    return None


def pool_taint(key: str) -> str | None:
    """Why a pool may not set a taint with `key`, or None."""
    if key in PLATFORM_TAINT_KEYS or _in(_namespace(key), "higgsfield.io"):
        return (
            f"{shown(key)} is a taint the platform sets ({', '.join(PLATFORM_TAINT_KEYS)}, higgsfield.io/*): a "
            "pool may not override or duplicate it"
        )
    if key.startswith(AUTOSCALER_TAINT_PREFIXES):
        return (
            f"{shown(key)} is in a Cluster Autoscaler taint namespace ({', '.join(AUTOSCALER_TAINT_PREFIXES)}): "
            "the autoscaler would ignore it when it plans nodes"
        )
    return None


# --- Karpenter's labels ---------------------------------------------------------------------------
# A NodePool's template labels may not use Karpenter's own label domains, karpenter.sh and (the AWS
# provider's) karpenter.k8s.aws, beyond the few well-known labels Karpenter sets itself, nor
# kubernetes.io/hostname: the NodePool CRD's validations refuse them ("label domain \"karpenter.sh\"
# is restricted", a test on the key's domain ending in the restricted one) --
# aws/karpenter-provider-aws:pkg/apis/crds/karpenter.sh_nodepools.yaml@v1.14.1
# (spec.template.metadata.labels x-kubernetes-validations), from kubernetes-sigs/karpenter:
# pkg/apis/v1/labels.go@6e7eab7a0f48 (RestrictedLabelDomains = karpenter.sh, RestrictedLabels =
# kubernetes.io/hostname; the version aws/karpenter-provider-aws's go.mod pins at v1.14.1) and
# aws/karpenter-provider-aws:pkg/apis/v1/labels.go@v1.14.1 (adds its group, karpenter.k8s.aws).
# A pool's labels are the NodePool's (components/karpenter.py).
KARPENTER_RESTRICTED_LABEL_DOMAINS = ("karpenter.sh", "karpenter.k8s.aws")
KARPENTER_RESTRICTED_LABELS = (HOSTNAME_LABEL,)
KARPENTER_SOURCE = "aws/karpenter-provider-aws:pkg/apis/crds/karpenter.sh_nodepools.yaml@v1.14.1"


def karpenter_label(key: str) -> str | None:
    """Why a Karpenter pool may not set node label `key`, or None."""
    domain = _namespace(key)
    if key in KARPENTER_RESTRICTED_LABELS or any(domain.endswith(d) for d in KARPENTER_RESTRICTED_LABEL_DOMAINS):
        return (
            f"{shown(key)}: Karpenter reserves the label domains {', '.join(KARPENTER_RESTRICTED_LABEL_DOMAINS)} and "
            f"{', '.join(KARPENTER_RESTRICTED_LABELS)} (it sets them itself; "
            f"the NodePool is refused: {KARPENTER_SOURCE}); use your own prefix"
        )
    return None
