"""`higgsfield check`: the policy pack and the Kubernetes schema over the offline plan.

Policies run exactly as CrossGuard runs them during `pulumi preview`: same validate functions,
same argument types, unknown values raising `UnknownValueError` (reported as "not run").
One check CrossGuard cannot make, because it does not see `retainOnDelete`, runs here only:
prod retains its FSx file systems and KMS keys on delete. Policies whose rules depend on the
environment get it from the typed stack config (`higgsfield:environment`), never from a tag.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.core.names import KUBEFLOW_JOB_KINDS
from infra.offline.evaluate import _UNKNOWN, COMPUTED, Plan, StackNotFound, project_root, record


@dataclass(frozen=True)
class Finding:
    policy: str
    level: str  # mandatory | advisory | disabled
    urn: str | None
    message: str


def _unknowns(value: Any) -> Any:
    """The recording's <computed> back into the engine's unknown sentinel."""
    if value == COMPUTED:
        return _UNKNOWN
    if isinstance(value, dict):
        return {k: _unknowns(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unknowns(v) for v in value]
    return value


def _level_and_config(policy: Any, pack_config: Mapping[str, Any]) -> tuple[str, dict]:
    raw = pack_config.get(policy.name)
    level = policy.enforcement_level.value if policy.enforcement_level else "mandatory"
    if isinstance(raw, str):
        return raw, {}
    if isinstance(raw, Mapping):
        config = dict(raw)
        return config.pop("enforcementLevel", level), config
    return level, {}


def run_policies(plan: Plan, pack_config: Mapping[str, Any] | None = None) -> tuple[list[Finding], list[Finding]]:
    """(violations, not run) of every policy over the plan."""
    from pulumi_policy import (
        PolicyCustomTimeouts,
        PolicyResource,
        PolicyResourceOptions,
        ResourceValidationArgs,
        ResourceValidationPolicy,
        StackValidationArgs,
    )
    from pulumi_policy.proxy import UnknownValueError, unknown_checking_proxy

    from policies.rules import POLICIES

    pack_config = pack_config or {}
    options = {
        r.urn: PolicyResourceOptions(
            r.protect, list(r.ignore_changes), r.delete_before_replace, [], PolicyCustomTimeouts(0, 0, 0), [], r.parent
        )
        for r in plan.resources
    }
    resources: dict[str, Any] = {}
    for r in plan.resources:
        resources[r.urn] = PolicyResource(
            r.type, unknown_checking_proxy(_unknowns(r.inputs)), r.urn, r.name, options[r.urn], None, None, [], {}
        )
    for r in plan.resources:
        resources[r.urn].dependencies = [resources[d] for d in r.dependencies if d in resources]
        resources[r.urn].parent = resources.get(r.parent or "")

    violations: list[Finding] = []
    skipped: list[Finding] = []
    for policy in POLICIES:
        level, config = _level_and_config(policy, pack_config)
        if level == "disabled":
            continue
        if plan.config is not None and "environment" in (
            policy.config_schema.properties if policy.config_schema else {}
        ):
            config["environment"] = plan.config.environment  # the typed stack config, not the file or a tag

        def reporter(default_urn: str | None, name: str = policy.name, at: str = level):
            return lambda message, urn=None: violations.append(Finding(name, at, urn or default_urn, message))

        if isinstance(policy, ResourceValidationPolicy):
            for r in plan.resources:
                args = ResourceValidationArgs(
                    r.type, resources[r.urn].props, r.urn, r.name, options[r.urn], None, config
                )
                try:
                    policy.validate(args, reporter(r.urn))
                except UnknownValueError as exc:
                    skipped.append(Finding(policy.name, level, r.urn, f"not run during preview: {exc.message}"))
        else:
            try:
                policy.validate(StackValidationArgs(list(resources.values()), config), reporter(None))
            except UnknownValueError as exc:
                skipped.append(Finding(policy.name, level, None, f"not run during preview: {exc.message}"))
    violations.extend(_retained_in_prod(plan))
    return violations, skipped


def _retained_in_prod(plan: Plan) -> list[Finding]:
    if plan.config is None or not plan.config.production:
        return []
    kept = ("aws:fsx/lustreFileSystem:LustreFileSystem", "aws:kms/key:Key")
    return [
        Finding(
            "prod-data-retained",
            "mandatory",
            r.urn,
            f"{r.type} {r.name} is not retained on delete in prod: set retain_on_delete=True.",
        )
        for r in plan.resources
        if r.type in kept and not r.retain_on_delete
    ]


def _pod(obj: dict, i: int, template: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{obj['metadata']['name']}-{i}"},
        "spec": template["spec"],
    }


def schema_objects(plan: Plan, examples: dict | None = None) -> tuple[list[dict], dict[str, list[str]]]:
    """What `validate_manifests` validates: every Kubernetes object the program builds and the example jobs' objects,
    built-in kinds against the Kubernetes version's schema and custom resources against their CRD's kept schema
    (infra/offline/crd_schemas.py); a Kubeflow job's pod templates again as Pods, for
    the stack's Kubernetes version (the CRD's template is of its own k8s.io/api); and each example the stack refuses,
    by the refusal's text. `examples`: jobs.render_examples(plan.config), when the caller has it already."""
    from infra.offline import jobs
    from infra.offline.manifests import manifests

    objects = manifests(plan)
    refused: dict[str, list[str]] = {}  # one finding per refusal, naming every example it stops
    for example, rendered in (jobs.render_examples(plan.config) if examples is None else examples).items():
        if isinstance(rendered, Exception):  # the shipped example cannot run on this stack as configured
            refused.setdefault(str(rendered), []).append(f"examples/{example}.yaml")
            continue
        for obj in rendered:
            objects.append(obj)
            if obj["kind"] in KUBEFLOW_JOB_KINDS:
                objects += [_pod(obj, i, template) for i, template in enumerate(jobs.pod_templates(obj))]
    return objects, refused


def validate_manifests(plan: Plan, examples: dict | None = None) -> list[Finding]:
    """Every Kubernetes object the program builds, and the example jobs' objects and pod templates
    (`schema_objects`), against the schema of the stack's Kubernetes version or their CRD's; an example job that does
    not fit the stack (pool, team quota, queue capability) at its default size is a finding too.
    `examples`: jobs.render_examples(plan.config), when the caller has it already."""
    from infra.offline import kubernetes_schema

    version = plan.config.kubernetes_version
    objects, refused = schema_objects(plan, examples)
    findings = [
        Finding("example-jobs-fit", "mandatory", None, f"{', '.join(where)}: {message}")
        for message, where in refused.items()
    ]
    for obj in objects:
        problem = kubernetes_schema.problem(obj, version)
        if problem:
            name = obj.get("metadata", {}).get("name")
            findings.append(Finding("kubernetes-schema", "mandatory", None, f"{obj['kind']} {name}: {problem}"))
    return findings


def examples_teams_cannot_run(plan: Plan) -> list[Finding]:
    """Advisory: an example a team is given the class of work for, that no size fits in the team's
    quota or queue (the default team's misfit is mandatory, in validate_manifests)."""
    from infra.offline import jobs

    return [
        Finding(
            "example-jobs-fit",
            "advisory",
            None,
            f"example {example} (jobs render STACK {example}) for team {team.name}: {exc.problems[0].message}",
        )
        for example in jobs.examples_for(plan.config)
        for team, exc in jobs.teams_it_does_not_fit(example, plan.config)
    ]


def load_pack_config(path: Path | None, option: str = "--policy-config") -> dict:
    """The policy pack config at `path` (a JSON object of policy name -> level or settings); its
    problems name the option and the file, in one line."""
    if not path or not path.is_file():
        return {}
    from pulumi_policy import EnforcementLevel

    from infra.offline.option_files import OptionFileError, read_json_object

    levels = [level.value for level in EnforcementLevel]  # CrossGuard's: advisory, mandatory, remediate, disabled
    config = read_json_object(path, option, "a policy pack config (policy name -> level or settings)")
    for name, entry in config.items():
        level = entry.get("enforcementLevel", "advisory") if isinstance(entry, dict) else entry
        if not isinstance(level, str) or level not in levels:  # a typo would leave a mandatory policy unenforced
            raise OptionFileError(
                f"{option} {path}: {name}: {json.dumps(level)[:40]} is not an enforcement level ({', '.join(levels)})"
            )
    return config


def ci_delivery(plan: Plan, root: Path) -> list[Finding]:
    """The stack's CI settings against the workflows (infra/offline/delivery_checks.py): no
    pull-request job with a deploy identity or on a deploy runner, no preview/deploy of a private
    endpoint outside the VPC; and against the other stacks: no prod sharing an AWS account or a
    GitHub environment with another environment (account_findings)."""
    import yaml

    from infra.config.delivery import PLACEHOLDER_REPOSITORY
    from infra.offline.delivery_checks import account_findings, delivery_findings
    from infra.offline.stacks import stack_matrix

    workflows = {
        p.name: yaml.safe_load(p.read_text()) or {} for p in sorted((root / ".github" / "workflows").glob("*.yml"))
    }
    found = [
        Finding("ci-delivery", "mandatory", None, f"{where}: {message}")
        for where, message in delivery_findings(plan.config, workflows)
    ]
    if plan.config.delivery is not None and plan.config.delivery.repository == PLACEHOLDER_REPOSITORY:
        found.append(
            Finding(
                "ci-delivery",
                "advisory",
                None,
                f"higgsfield:delivery.repository: {PLACEHOLDER_REPOSITORY} is the shipped stacks' placeholder: "
                "set your repository (owner/name) before the first deploy, since the CI roles trust the workflows of "
                "the repository named here",
            )
        )
    # One account (and one GitHub environment) per stack's environment: against the other stack
    # files that can be read (a broken one fails its own check, not this one's).
    others = [e for e in stack_matrix(root, skip_bad_names=True)["include"] if "broken" not in e]
    return found + [
        Finding("ci-delivery", level, None, f"{where}: {message}")
        for level, where, message in account_findings(plan.config, others)
    ]


def fsx_beside_efa_pools(plan: Plan) -> list[Finding]:
    """FSx in one AZ and EFA pools in another: their reads and checkpoints cross AZs (the settings'
    rule: fsx.availabilityZone is the EFA pools' zone, docs/reference/settings.md)."""
    apart = plan.config.fsx_away_from_efa_pools
    return [Finding("fsx-zone", "advisory", None, apart)] if apart else []


def endpoint_placeholder(plan: Plan) -> list[Finding]:
    """The shipped stacks' example allow-list, still in place: a documentation range (RFC 5737)
    sends no request, so the public endpoint would admit no one and kubectl times out."""
    from infra.config.limits import documentation_range

    return [
        Finding(
            "endpoint-allow-list",
            "advisory",
            None,
            f"higgsfield:endpoint.publicAccessCidrs[{i}]: {cidr} is a documentation range (RFC 5737) no request "
            "comes from, "
            "so kubectl outside the VPC reaches nothing; list your office or VPN egress ranges, or [] for a private "
            "endpoint",
        )
        for i, cidr in enumerate(plan.config.endpoint.public_access_cidrs)
        if documentation_range(cidr)
    ]


@dataclass(frozen=True)
class CheckResult:
    plan: Plan
    policy_config: Path
    violations: list[Finding]
    skipped: list[Finding]

    @property
    def mandatory(self) -> list[Finding]:
        return [f for f in self.violations if f.level == "mandatory"]


def _policy_config_hint(stack: str, path: Path, root: Path) -> str:
    """How to make the missing policy config of a stack whose file exists: a copy of the config of
    the stack's environment, the project's own else the shipped one (init writes one only with a
    new stack), or --policy-config."""
    from infra.core.assets import shipped
    from infra.offline.evaluate import load_stack

    try:
        environment = load_stack(stack, root).environment
    except Exception:  # a stack that does not load says so itself once the config is there
        environment = "dev"
    own = root / "policies" / "config" / f"{environment}.json"  # a checkout's (or the project's own) levels
    source = own if own.is_file() else shipped(f"policies/config/{environment}.json")
    shown = [os.path.relpath(p) if p.is_relative_to(Path.cwd()) else str(p) for p in (source, path)]
    folder = "" if path.parent.is_dir() else f"mkdir -p {os.path.dirname(shown[1])} && "
    return (
        f"`{folder}cp {shown[0]} {shown[1]}` starts from the {environment} levels (the stack's environment), or pass "
        "--policy-config FILE"
    )


def check_stack(stack: str, policy_config: Path | None = None, root: Path | None = None) -> CheckResult:
    """Policies, schemas and example fits over the offline plan of `stack`, with the stack's
    policy pack config (policies/config/STACK.json unless given). A stack without one is refused:
    its policies would run at their defaults, not at the levels the stack is meant to meet."""
    from infra.offline.evaluate import stack_file
    from infra.offline.option_files import OptionFileError

    root = root or project_root()
    stack_file(root, stack)  # a missing stack is reported as a missing stack, before its policy config
    path = policy_config or root / "policies" / "config" / f"{stack}.json"
    option = "--policy-config" if policy_config is not None else f"the policy config of {stack}"
    if os.path.lexists(path) and not path.is_file():  # there, but no file to read: not "not found"
        raise OptionFileError(f"{option} {path}: is not a regular file (a FIFO, a device, a folder or a broken link)")
    if not path.is_file():
        if policy_config is not None:
            raise StackNotFound(f"--policy-config {path}: no such file")
        raise StackNotFound(f"policy config {path} not found: {_policy_config_hint(stack, path, root)}")
    pack_config = load_pack_config(path, option)
    plan = record(stack, root)
    violations, skipped = run_policies(plan, pack_config)
    from infra.offline import (  # day_one: the first real day (gate image, autoscaler limits, resume promises)
        day_one,
        jobs,
    )

    examples = jobs.render_examples(plan.config)  # once, for the schemas and the resume promises
    violations += (
        validate_manifests(plan, examples)
        + examples_teams_cannot_run(plan)
        + ci_delivery(plan, root)
        + endpoint_placeholder(plan)
        + fsx_beside_efa_pools(plan)
        + training_minimum_preemptable(plan)
    )
    violations += [
        Finding(policy, "mandatory", None, message) for policy, message in day_one.findings(plan.config, examples)
    ]
    return CheckResult(plan, path, violations, skipped)


def training_minimum_preemptable(plan: Plan) -> list[Finding]:
    """The proof of infra/offline/preemption.py: one finding per setting through which something could
    preempt a training gang's minimum (none: nothing can)."""
    from infra.offline.preemption import holes_in_plan

    return [
        Finding("training-minimum-never-preempted", "mandatory", None, f"{h.setting}: {h.message}")
        for h in holes_in_plan(plan)
    ]


def as_json(result: CheckResult) -> dict:
    def finding(f: Finding) -> dict:
        return {"policy": f.policy, "level": f.level, "urn": f.urn, "message": f.message}

    return {
        "stack": result.plan.stack,
        "policy_config": result.policy_config.name,
        "resources": len(result.plan.resources),
        "violations": [finding(f) for f in result.violations],
        "not_run": [finding(f) for f in result.skipped],
        "mandatory": len(result.mandatory),
        "passed": not result.mandatory,
    }
