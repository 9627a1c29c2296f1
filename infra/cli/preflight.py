"""`higgsfield preflight STACK`: ask the AWS account, before `pulumi up`, whether the stack can
come up at all: GPU types offered where the pools are, EFA where asked, vCPU quotas for every
pool at maxSize, reservations and Capacity Blocks that exist and match, the EKS AL2023 NVIDIA
AMI for the Kubernetes version, FSx for Lustre reachable in the AZ, and the version EKS would
install of every managed add-on (or that a pinned one is offered).

Each check asks AWS on its own and ends in one line of the report: passed, failed (with its fix)
or not checked (with the reason: the IAM action the caller lacks, a network failure, throttling,
an answer that could not be read). Only missing or rejected credentials stop the whole run, since
then every call would fail the same way.

The error codes handled are AWS's own: EC2's from the EC2 API reference "Error codes for the
Amazon EC2 API" (docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html:
UnauthorizedOperation, AuthFailure, RequestLimitExceeded, InvalidCapacityReservationId.NotFound;
EC2 errors are not in botocore's model), the others from botocore's service models
(botocore/data/<service>/<version>/service-2.json: service-quotas GetServiceQuota
AccessDeniedException and TooManyRequestsException; ssm GetParameter ParameterNotFound; eks
AccessDeniedException and ThrottlingException shapes).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
from botocore import exceptions as aws_errors

from infra.config import GpuPool, StackConfig
from infra.core import versions

# EC2 vCPU quotas (Service Quotas, service code ec2): on-demand and spot, per instance family group.
QUOTAS = {
    ("on-demand", "standard"): ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"),
    ("on-demand", "g"): ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    ("on-demand", "p"): ("L-417A185B", "Running On-Demand P instances"),
    ("spot", "standard"): ("L-34B43A08", "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests"),
    ("spot", "g"): ("L-3819A6DF", "All G and VT Spot Instance Requests"),
    ("spot", "p"): ("L-7212CCBC", "All P Spot Instance Requests"),
}
AMI_PARAMETER = "/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{arch}/nvidia/recommended/image_id"


# The IAM action behind every call preflight makes (the service authorization reference's
# "Actions defined by ..." tables name them service:Operation), reported when AWS refuses one.
IAM_ACTIONS = {
    "DescribeInstanceTypeOfferings": "ec2:DescribeInstanceTypeOfferings",
    "DescribeInstanceTypes": "ec2:DescribeInstanceTypes",
    "DescribeCapacityReservations": "ec2:DescribeCapacityReservations",
    "DescribeAvailabilityZones": "ec2:DescribeAvailabilityZones",
    "GetServiceQuota": "servicequotas:GetServiceQuota",
    "GetParameter": "ssm:GetParameter",
    "DescribeFileSystems": "fsx:DescribeFileSystems",
    "DescribeAddonVersions": "eks:DescribeAddonVersions",
    "DescribeAddonConfiguration": "eks:DescribeAddonConfiguration",
}
PERMISSIONS = tuple(sorted(set(IAM_ACTIONS.values())))

# The caller may not do this (EC2: UnauthorizedOperation; JSON services: AccessDeniedException).
DENIED_CODES = {"UnauthorizedOperation", "Client.UnauthorizedOperation", "AccessDenied", "AccessDeniedException"}
# The credentials themselves were refused: every other call would fail alike, so the run stops.
REJECTED = {
    "AuthFailure",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "ExpiredToken",
    "ExpiredTokenException",
    "RequestExpired",
    "SignatureDoesNotMatch",
    "MissingAuthenticationToken",
}
_THROTTLED = {"RequestLimitExceeded", "Throttling", "ThrottlingException", "TooManyRequestsException"}
# No credentials could be found or refreshed (profile, SSO session, container or instance role).
NO_CREDENTIALS = (
    aws_errors.NoCredentialsError,
    aws_errors.PartialCredentialsError,
    aws_errors.CredentialRetrievalError,
    aws_errors.TokenRetrievalError,
    aws_errors.SSOError,
    aws_errors.ProfileNotFound,
)
_NETWORK = (aws_errors.ConnectionError, aws_errors.HTTPClientError)


class CredentialsRejected(Exception):
    """AWS refused the credentials (expired, unknown, wrong signature): nothing can be checked."""


@dataclass(frozen=True)
class Check:
    """One line of the report. `checked` False: AWS could not be asked, `detail` says why."""

    check: str
    target: str
    ok: bool
    detail: str
    fix: str = ""
    checked: bool = True
    unreachable: bool = False  # not checked because AWS could not be reached at all

    @property
    def status(self) -> str:
        return "ok" if self.ok else ("FAIL" if self.checked else "n/c")


@dataclass(frozen=True)
class Clients:
    """The AWS clients preflight talks to (injected so tests can use moto and stubs)."""

    ec2: Any
    service_quotas: Any
    ssm: Any
    fsx: Any
    eks: Any

    @classmethod
    def for_region(cls, region: str) -> Clients:
        import boto3
        from botocore.config import Config

        # Standard retries (throttling and connection errors, with backoff), bounded so that an
        # unreachable endpoint is reported in seconds rather than minutes.
        config = Config(retries={"mode": "standard", "max_attempts": 4}, connect_timeout=5, read_timeout=20)
        session = boto3.Session(region_name=region)
        return cls(*(session.client(name, config=config) for name in ("ec2", "service-quotas", "ssm", "fsx", "eks")))


def _not_checked(check: str, target: str, exc: Exception) -> Check:
    """The report line of a check whose call to AWS failed, saying why and what to do."""
    if isinstance(exc, aws_errors.ClientError):
        error = exc.response.get("Error", {})
        code, message, operation = error.get("Code", "?"), error.get("Message", ""), exc.operation_name
        if code in REJECTED:
            raise CredentialsRejected(f"AWS rejected the credentials ({code}: {message})") from exc
        action = IAM_ACTIONS.get(operation, operation)
        if code in DENIED_CODES:
            return Check(
                check,
                target,
                False,
                f"not checked: needs {action} ({code})",
                f"allow {action} to the identity running preflight",
                checked=False,
            )
        if code in _THROTTLED:
            return Check(
                check,
                target,
                False,
                f"not checked: AWS throttled {operation} ({code}) after retries",
                "rerun preflight in a minute",
                checked=False,
            )
        return Check(check, target, False, f"not checked: {operation} failed: {code}: {message}", checked=False)
    if isinstance(exc, _NETWORK):
        return Check(
            check,
            target,
            False,
            f"not checked: network failure: {exc}",
            "check the network path to AWS (DNS, proxy, firewall, VPC endpoints), then rerun",
            checked=False,
            unreachable=True,
        )
    return Check(
        check, target, False, f"not checked: unreadable answer from AWS ({type(exc).__name__}: {exc})", checked=False
    )


def _checked(check: str, target: str, ask: Callable[[], Check]) -> Check:
    """Run one check on its own: any failure of its calls becomes its own "not checked" line,
    except missing or rejected credentials, which stop the run."""
    try:
        return ask()
    except NO_CREDENTIALS:
        raise
    except Exception as exc:  # noqa: BLE001 - every other failure is this check's, reported in its line
        return _not_checked(check, target, exc)


def _error_code(exc: aws_errors.ClientError) -> str:
    return exc.response.get("Error", {}).get("Code", "")


def _family_group(instance_type: str) -> str:
    family = instance_type.split(".")[0]
    if family.startswith("p"):
        return "p"
    if family.startswith(("g", "vt")):
        return "g"
    return "standard"


def _offered(clients: Clients, pool: GpuPool) -> Iterable[Check]:
    for instance_type in pool.instance_types:
        target = f"{pool.name}: {instance_type} in {pool.availability_zone}"

        def ask(instance_type: str = instance_type, target: str = target) -> Check:
            found = clients.ec2.describe_instance_type_offerings(
                LocationType="availability-zone",
                Filters=[
                    {"Name": "instance-type", "Values": [instance_type]},
                    {"Name": "location", "Values": [pool.availability_zone]},
                ],
            )["InstanceTypeOfferings"]
            return Check(
                "offered in AZ",
                target,
                bool(found),
                "offered" if found else "not offered",
                "" if found else _offered_instead(clients, instance_type, pool.availability_zone),
            )

        yield _checked("offered in AZ", target, ask)


def _instance_type(clients: Clients, instance_type: str) -> dict:
    (info,) = clients.ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"]
    return info


def _offered_instead(clients: Clients, instance_type: str, zone: str) -> str:
    """Where the account is offered the type in the region, else where AWS's bundled catalog has it."""
    from infra.core.bundled import where_offered

    rows = clients.ec2.describe_instance_type_offerings(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [instance_type]}]
    )["InstanceTypeOfferings"]
    zones = sorted(r["Location"] for r in rows)
    if zones:
        return f"this account is offered it in {', '.join(zones)}: set the pool's availabilityZone to one of them"
    return f"offered to this account in no AZ of this region; {where_offered(instance_type, zone[:-1])}"


def _efa(clients: Clients, pool: GpuPool) -> Iterable[Check]:
    if not pool.efa:
        return
    for instance_type in pool.instance_types:
        target = f"{pool.name}: {instance_type}"

        def ask(instance_type: str = instance_type, target: str = target) -> Check:
            supported = bool(_instance_type(clients, instance_type).get("NetworkInfo", {}).get("EfaSupported"))
            return Check(
                "EFA supported",
                target,
                supported,
                "EFA supported" if supported else "no EFA",
                "" if supported else "set efa: false or use an EFA type",
            )

        yield _checked("EFA supported", target, ask)


def _quotas(clients: Clients, cfg: StackConfig) -> Iterable[Check]:
    """One check per vCPU quota the stack draws on: what every group at maxSize needs."""
    needed: dict[tuple[str, str], list[tuple[str, int]]] = defaultdict(list)
    for nodes in (cfg.cpu_nodes, cfg.team_cpu_nodes):  # the system nodes and the teams' CPU nodes
        for instance_type in nodes.instance_types[:1]:
            needed[("on-demand", _family_group(instance_type))].append((instance_type, nodes.max_size))
    for pool in cfg.gpu_pools:
        if pool.capacity_type == "capacity-block":
            continue  # Capacity Blocks are bought capacity, not drawn from the on-demand vCPU quota
        market = "spot" if pool.capacity_type == "spot" else "on-demand"
        needed[(market, _family_group(pool.instance_types[0]))].append((pool.instance_types[0], pool.max_size))
    for key, groups in sorted(needed.items()):
        code, label = QUOTAS[key]
        target = f"{label} ({code})"

        def ask(groups: list[tuple[str, int]] = groups, code: str = code, target: str = target) -> Check:
            vcpus = sum(nodes * int(_instance_type(clients, t)["VCpuInfo"]["DefaultVCpus"]) for t, nodes in groups)
            quota = int(clients.service_quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])
            ok = quota >= vcpus
            return Check(
                "vCPU quota",
                target,
                ok,
                f"{vcpus} vCPUs needed at maxSize, quota {quota}",
                "" if ok else f"request {vcpus} in Service Quotas (ec2 {code}) or lower maxSize",
            )

        yield _checked("vCPU quota", target, ask)


def _reservation(clients: Clients, cfg: StackConfig, pool: GpuPool) -> Check:
    try:
        (r,) = clients.ec2.describe_capacity_reservations(CapacityReservationIds=[pool.reservation_id])[
            "CapacityReservations"
        ]
    except aws_errors.ClientError as exc:
        if _error_code(exc) != "InvalidCapacityReservationId.NotFound":
            raise
        return Check(
            "reservation",
            f"{pool.name}: {pool.reservation_id}",
            False,
            f"AWS knows no reservation {pool.reservation_id} in {cfg.region} ({_error_code(exc)})",
            "check the id and the region, and that the reservation belongs to or is shared with this account (aws "
            f"ec2 describe-capacity-reservations --region {cfg.region})",
        )
    problems = []
    if r.get("State") not in ("active", "scheduled"):
        problems.append(f"state {r.get('State')}")
    if r.get("InstanceType") not in pool.instance_types:
        problems.append(f"instance type {r.get('InstanceType')}")
    if r.get("AvailabilityZone") != pool.availability_zone:
        problems.append(f"AZ {r.get('AvailabilityZone')} (pool is in {pool.availability_zone})")
    kind = "capacity-block" if pool.capacity_type == "capacity-block" else "default"
    if (r.get("ReservationType") or "default") != kind:
        problems.append(f"reservation type {r.get('ReservationType')} (pool expects {kind})")
    return Check(
        "reservation",
        f"{pool.name}: {pool.reservation_id}",
        not problems,
        "; ".join(problems)
        or f"{r['State']} {r['InstanceType']} x{r.get('TotalInstanceCount')} in {r['AvailabilityZone']}",
        "" if not problems else "point the pool at a matching active/scheduled reservation",
    )


def _reservations(clients: Clients, cfg: StackConfig, pool: GpuPool) -> Iterable[Check]:
    if pool.reservation_id:
        yield _checked("reservation", f"{pool.name}: {pool.reservation_id}", lambda: _reservation(clients, cfg, pool))


def _ami(clients: Clients, cfg: StackConfig) -> Iterable[Check]:
    architectures = {("x86_64" if "x86_64" in p.instance.architectures else "arm64") for p in cfg.gpu_pools}
    for arch in sorted(architectures):
        name = AMI_PARAMETER.format(k8s=cfg.kubernetes_version, arch=arch)
        target = f"Kubernetes {cfg.kubernetes_version} {arch}"

        def ask(name: str = name, target: str = target) -> Check:
            try:
                image = clients.ssm.get_parameter(Name=name)["Parameter"]["Value"]
            except clients.ssm.exceptions.ParameterNotFound:
                return Check(
                    "EKS NVIDIA AMI",
                    target,
                    False,
                    f"{name} not found",
                    "use a Kubernetes version with an AL2023 NVIDIA AMI in this region",
                )
            return Check("EKS NVIDIA AMI", target, True, image)

        yield _checked("EKS NVIDIA AMI", target, ask)


def _fsx(clients: Clients, cfg: StackConfig) -> Iterable[Check]:
    if not cfg.fsx.enabled:
        return
    zone = cfg.fsx.availability_zone

    def ask() -> Check:
        zones = clients.ec2.describe_availability_zones(ZoneNames=[zone])["AvailabilityZones"]
        available = bool(zones) and zones[0].get("State") == "available"
        clients.fsx.describe_file_systems(
            MaxResults=1
        )  # the FSx API answers in the region (an endpoint that isn't there is a network failure)
        detail = f"AZ {'available' if available else 'not available'}, FSx API reachable in {cfg.region}"
        return Check(
            "FSx for Lustre",
            zone,
            available,
            detail,
            "" if available else "choose an AZ that is available for FSx for Lustre",
        )

    yield _checked("FSx for Lustre", zone, ask)


def _addon(clients: Clients, kubernetes_version: str, name: str, pin: str | None, chosen: list[list[str]]) -> Check:
    """What EKS would install of add-on `name` on a `kubernetes_version` cluster: the version it
    marks default (what `higgsfield:addonVersions` leaves unpinned resolves to at deploy), or
    whether the stack's pin is among the versions it offers. A version that passes is added to `chosen`, with the
    newer offered versions at or above the floor after it, newest first (what a pin could name instead)."""
    target = f"{name} on Kubernetes {kubernetes_version}"
    # EKS DescribeAddonVersions: addons[].addonVersions[].{addonVersion, compatibilities[].{clusterVersion,
    # defaultVersion}}
    addons = clients.eks.describe_addon_versions(addonName=name, kubernetesVersion=kubernetes_version)["addons"]
    offered = [
        v["addonVersion"]
        for a in addons
        for v in a.get("addonVersions", [])
        if any(c.get("clusterVersion") == kubernetes_version for c in v.get("compatibilities", []))
    ]
    default = next(
        (
            v["addonVersion"]
            for a in addons
            for v in a.get("addonVersions", [])
            if any(
                c.get("clusterVersion") == kubernetes_version and c.get("defaultVersion")
                for c in v.get("compatibilities", [])
            )
        ),
        None,
    )
    listed = ", ".join(offered[:5]) + (f" and {len(offered) - 5} more" if len(offered) > 5 else "")
    key = f"higgsfield:addonVersions.{name}"
    if not offered:
        return Check(
            "EKS add-on",
            target,
            False,
            f"EKS offers no version of {name} for Kubernetes {kubernetes_version}",
            f"choose a kubernetesVersion {name} supports (aws eks describe-addon-versions --addon-name {name})",
        )
    if pin:
        ok = pin in offered
        if ok:
            chosen.append(_and_newer(name, pin, offered))
        return Check(
            "EKS add-on",
            target,
            ok,
            f"pinned {pin} {'is offered' if ok else 'is not offered'}; AWS would pick {default or 'no default'}",
            "" if ok else f"set {key} to an offered version ({listed}) or remove the pin",
        )
    floor = versions.below_floor(name, default or "")
    if floor:
        newer = [v for v in offered if not versions.below_floor(name, v)]
        return Check(
            "EKS add-on",
            target,
            False,
            f"AWS would pick {default} (its default for {kubernetes_version}), below {floor}, the oldest this platform "
            "runs (infra/core/versions.py ADDON_FLOORS)",
            f"pin an offered version at or above {floor} in {key}" + (f" ({', '.join(newer[:3])})" if newer else ""),
        )
    if default is None:
        return Check(
            "EKS add-on",
            target,
            False,
            f"EKS marks no default version (offered: {listed}); the deploy-time lookup would fail",
            f"pin one in {key}",
        )
    chosen.append(_and_newer(name, default, offered))
    return Check("EKS add-on", target, True, f"AWS would pick {default} (its default for {kubernetes_version})")


def _and_newer(name: str, version: str, offered: list[str]) -> list[str]:
    """`version`, then the offered versions of add-on `name` newer than it and at or above its floor, newest first."""
    newer = [v for v in offered if versions.addon_release(v) > versions.addon_release(version)]
    return [
        version,
        *sorted((v for v in newer if not versions.below_floor(name, v)), key=versions.addon_release, reverse=True),
    ]


# How many newer versions' schemas a failed `add-on values` check reads to name one a pin could take.
NEWER_SCHEMAS_READ = 3


def _refusal(clients: Clients, name: str, version: str, values: Mapping[str, object]) -> str | None:
    """Why the configuration schema EKS validates `name`'s values with for `version` (DescribeAddonConfiguration's
    `configurationSchema`, a JSON schema) refuses `values`, else None."""
    answer = clients.eks.describe_addon_configuration(addonName=name, addonVersion=version)
    schema = json.loads(answer.get("configurationSchema") or "{}")
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(values), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    where = ".".join(map(str, errors[0].absolute_path)) or "(top)"
    return f"at {where}: {errors[0].message}"


def _addon_values(clients: Clients, name: str, choice: list[str], values: Mapping[str, object]) -> Check:
    """Whether the configuration values the program passes add-on `name` fit the schema EKS validates them against at
    create and update for the version the deploy installs (`choice[0]`): a key the version does not take fails the
    deploy there, after the cluster is made. A refusal names the newest of `choice`'s newer versions whose schema
    takes them (reading at most NEWER_SCHEMAS_READ)."""
    version, newer = choice[0], choice[1:]
    target = f"{name} {version}"
    refused = _refusal(clients, name, version, values)
    if refused is None:
        return Check("add-on values", target, True, f"its configuration schema takes the stack's {', '.join(values)}")
    fits = next((v for v in newer[:NEWER_SCHEMAS_READ] if _refusal(clients, name, v, values) is None), None)
    key = f"higgsfield:addonVersions.{name}"
    fix = (
        f"pin {fits} in {key}, whose schema takes them"
        if fits
        else f"pin a version of {name} whose schema takes them in {key} (aws eks describe-addon-configuration "
        f"--addon-name {name} --addon-version VERSION --query configurationSchema)"
    )
    return Check("add-on values", target, False, f"its configuration schema refuses the stack's values {refused}", fix)


def _addons(
    clients: Clients,
    kubernetes_version: str,
    pins: Mapping[str, str | None],
    configurations: Mapping[str, Mapping[str, object]],
) -> Iterable[Check]:
    for name, pin in pins.items():
        chosen: list[list[str]] = []
        yield _checked(
            "EKS add-on",
            f"{name} on Kubernetes {kubernetes_version}",
            lambda name=name, pin=pin, chosen=chosen: _addon(clients, kubernetes_version, name, pin, chosen),
        )
        if configurations.get(name) and chosen:
            yield _checked(
                "add-on values",
                f"{name} {chosen[0][0]}",
                lambda name=name, choice=chosen[0]: _addon_values(clients, name, choice, configurations[name]),
            )


def run(
    cfg: StackConfig,
    clients: Clients,
    addons: Mapping[str, str | None],
    configurations: Mapping[str, Mapping[str, object]] | None = None,
) -> list[Check]:
    """Every check of `cfg`; `addons` maps each managed add-on the stack installs to its pin
    (None: EKS's default for the cluster's Kubernetes version), `configurations` each to the configuration values
    the program passes it (addon_configurations)."""
    checks: list[Check] = []
    for pool in cfg.gpu_pools:
        checks += [*_offered(clients, pool), *_efa(clients, pool), *_reservations(clients, cfg, pool)]
    checks += [
        *_quotas(clients, cfg),
        *_ami(clients, cfg),
        *_fsx(clients, cfg),
        *_addons(clients, cfg.kubernetes_version, addons, configurations or {}),
    ]
    return checks


def render(stack: str, checks: list[Check], colour: bool = False) -> str:
    """One line per check (status, check, target), its detail and fix wrapped below within 120
    columns; a count last."""
    from infra.cli.output import paint
    from infra.cli.views.table import wrap

    tint = {"ok": "green", "FAIL": "red", "n/c": "yellow"}
    lines = [f"Preflight of {stack}"]
    for c in checks:
        lines.append(f"  {paint(f'{c.status:<4}', tint[c.status], colour)} {c.check:<16} {c.target}")
        lines.extend(wrap(c.detail + (f" -> {c.fix}" if c.fix else ""), indent=7, hanging=2))
    failed = sum(c.checked and not c.ok for c in checks)
    unchecked = sum(not c.checked for c in checks)
    lines.append(f"{len(checks) - failed - unchecked} passed, {failed} failed, {unchecked} not checked (n/c)")
    return "\n".join(lines)


def one_cause(checks: list[Check]) -> str | None:
    """When AWS could not be reached at all, that one cause in one line instead of a line per check."""
    if checks and all(c.unreachable for c in checks):
        return (
            f"cannot reach AWS: {len(checks)} checks not run ({checks[0].detail.removeprefix('not checked: ')}); "
            f"{checks[0].fix}"
        )
    return None


def as_json(stack: str, checks: list[Check]) -> dict:
    return {
        "stack": stack,
        "checks": [
            {
                "check": c.check,
                "target": c.target,
                "status": {"ok": "ok", "FAIL": "failed", "n/c": "not_checked"}[c.status],
                "detail": c.detail,
                "fix": c.fix,
            }
            for c in checks
        ],
        "passed": all(c.ok for c in checks),
    }


def addon_pins(plan: Any) -> dict[str, str | None]:
    """The managed add-ons the offline plan installs, each with the version the program asks EKS
    for, or None where the plan holds a placeholder (`<resolved at deploy ...>`, `<computed>`):
    EKS's default, picked at deploy."""
    pins: dict[str, str | None] = {}
    for addon in plan.of_type("aws:eks/addon:Addon"):
        version = addon.inputs.get("addonVersion")
        pins[addon.inputs["addonName"]] = version if isinstance(version, str) and not version.startswith("<") else None
    return pins


def addon_configurations(plan: Any) -> dict[str, dict[str, object]]:
    """The configuration values the offline plan passes each managed add-on that has some."""
    return {
        str(addon.inputs["addonName"]): json.loads(addon.inputs["configurationValues"])
        for addon in plan.of_type("aws:eks/addon:Addon")
        if isinstance(addon.inputs.get("configurationValues"), str)
    }
