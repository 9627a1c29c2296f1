"""`higgsfield diff STACK --base REF`: what a change does to a stack, before any cloud sees it.

Both sides are offline plans (the base evaluated with the base's own code and stack files), so
the comparison is resource by resource: added, removed, changed inputs, and the changes that
**replace** a resource because they touch an input the provider cannot update in place.
Replacing or deleting data that lives (the cluster, an FSx file system, a KMS key) is refused
unless the change says so: `--allow NAME` or the stack's `higgsfield:allowReplace`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.cli.offline import COMPUTED, StackNotFound, record

# Inputs that force a new resource, per type (the Terraform AWS provider's ForceNew attributes,
# which pulumi-aws inherits; for the pulumi-eks component, the inputs of its aws.eks.Cluster that
# force one). Deliberately conservative: an input that may only sometimes update in place is here.
REPLACE_ON: dict[str, tuple[str, ...]] = {
    "eks:index:Cluster": ("name", "vpcId", "privateSubnetIds", "publicSubnetIds", "subnetIds", "encryptionConfigKeyArn", "serviceRole", "ipFamily", "kubernetesServiceIpAddressRange"),
    "aws:eks/cluster:Cluster": ("name", "roleArn", "vpcConfig.subnetIds", "encryptionConfig", "kubernetesNetworkConfig"),
    "aws:eks/nodeGroup:NodeGroup": ("clusterName", "nodeGroupName", "nodeGroupNamePrefix", "nodeRoleArn", "subnetIds", "instanceTypes", "amiType", "capacityType", "diskSize", "remoteAccess"),
    "aws:eks/addon:Addon": ("clusterName", "addonName"),
    "aws:eks/podIdentityAssociation:PodIdentityAssociation": ("clusterName", "namespace", "serviceAccount"),
    "aws:fsx/lustreFileSystem:LustreFileSystem": ("deploymentType", "storageType", "subnetIds", "securityGroupIds", "kmsKeyId", "importPath", "exportPath", "fileSystemTypeVersion", "driveCacheType"),
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": ("fileSystemId", "fileSystemPath", "dataRepositoryPath", "batchImportMetaDataOnCreate", "importedFileChunkSize"),
    "aws:kms/key:Key": ("customerMasterKeySpec", "keyUsage", "multiRegion", "customKeyStoreId", "xksKeyId"),
    "aws:ec2/vpc:Vpc": ("cidrBlock", "instanceTenancy"),
    "aws:ec2/subnet:Subnet": ("vpcId", "cidrBlock", "availabilityZone", "availabilityZoneId"),
    "aws:ec2/securityGroup:SecurityGroup": ("vpcId", "name", "namePrefix", "description"),
    "aws:ec2/placementGroup:PlacementGroup": ("name", "strategy", "partitionCount", "spreadLevel"),
    "aws:ec2/natGateway:NatGateway": ("subnetId", "allocationId", "connectivityType"),
    "aws:ec2/eip:Eip": ("domain",),
    "aws:iam/role:Role": ("name", "namePrefix", "path"),
}
KUBERNETES_REPLACE_ON = ("metadata.name", "metadata.namespace")
KEPT = {  # data that lives: replacing or deleting it loses data or cuts every workload off
    "eks:index:Cluster": "cluster",
    "aws:eks/cluster:Cluster": "cluster",
    "aws:fsx/lustreFileSystem:LustreFileSystem": "FSx file system",
    "aws:kms/key:Key": "KMS key",
}
CODE_PATHS = ("infra", "components", "examples", "policies", "Pulumi.yaml", "pyproject.toml")


@dataclass
class Change:
    urn: str
    type: str
    name: str
    paths: list[str]
    replace_paths: list[str] = field(default_factory=list)

    @property
    def replaces(self) -> bool:
        return bool(self.replace_paths)


@dataclass
class Diff:
    added: list[dict]
    removed: list[dict]
    changed: list[Change]
    refused: list[str]

    @property
    def replaced(self) -> list[Change]:
        return [c for c in self.changed if c.replaces]


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else k))
        return out or {prefix: {}}
    if isinstance(value, list):
        out = {}
        for i, v in enumerate(value):
            out.update(_flatten(v, f"{prefix}[{i}]"))
        return out or {prefix: []}
    return {prefix: value}


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(path == p or path.startswith(p + ".") or path.startswith(p + "[") for p in prefixes)


def _replace_inputs(type_: str) -> tuple[str, ...]:
    return KUBERNETES_REPLACE_ON if type_.startswith("kubernetes:") and not type_.startswith("kubernetes:helm") else REPLACE_ON.get(type_, ())


def _portable(value: Any, code_root: str | None) -> Any:
    """Paths into the checkout that built a plan (the operator's kustomization) as <code>/...,
    so that two checkouts of the same code compare equal."""
    if code_root and isinstance(value, str) and value.startswith(code_root + os.sep):
        return "<code>" + value[len(code_root):]
    if isinstance(value, dict):
        return {k: _portable(v, code_root) for k, v in value.items()}
    if isinstance(value, list):
        return [_portable(v, code_root) for v in value]
    return value


def deploy_order(resources: list[dict]) -> dict[str, int]:
    """Each resource's step in the order Pulumi creates and updates them: one after the last thing
    it depends on (a dependency on a component waits for all of the component's resources)."""
    by_urn = {r["urn"]: r for r in resources}
    children: dict[str, list[str]] = {}
    for r in resources:
        if r.get("parent") in by_urn:
            children.setdefault(r["parent"], []).append(r["urn"])
    steps: dict[str, int] = {}

    def step(urn: str) -> int:
        if urn not in steps:
            steps[urn] = 0  # a cycle (none in a valid plan) ends here
            steps[urn] = 1 + max((done(d) for d in by_urn[urn]["dependencies"] if d in by_urn), default=0)
        return steps[urn]

    def done(urn: str) -> int:
        return max([step(urn), *(done(c) for c in children.get(urn, ()))])

    return {urn: step(urn) for urn in by_urn}


def compare(base: dict, head: dict, allowed: set[str]) -> Diff:
    """Compare two recorded plans (the JSON of `higgsfield plan --json`)."""
    before = {r["urn"]: {**r, "inputs": _portable(r["inputs"], base.get("code_root"))} for r in base["resources"]}
    after = {r["urn"]: {**r, "inputs": _portable(r["inputs"], head.get("code_root"))} for r in head["resources"]}
    changed = []
    for urn in sorted(set(before) & set(after)):
        old, new = before[urn], after[urn]
        a, b = _flatten(old["inputs"]), _flatten(new["inputs"])
        paths = sorted(p for p in set(a) | set(b) if a.get(p) != b.get(p))
        replace_on = _replace_inputs(new["type"])
        replace_paths = [p for p in paths if _under(p, replace_on)]
        if set(old["dependencies"]) != set(new["dependencies"]):
            paths.append("(dependencies)")
            # an input known only after deploy that now comes from another resource (a new subnet, key, ...)
            replace_paths += [p for p, v in b.items() if v == COMPUTED and _under(p, replace_on) and p not in replace_paths]
        if paths:
            changed.append(Change(urn, new["type"], new["name"], paths, sorted(set(replace_paths))))
    order = deploy_order(head["resources"])
    changed.sort(key=lambda c: (order.get(c.urn, 0), c.urn))  # in the order the deploy updates them
    added = [after[u] for u in sorted(set(after) - set(before))]
    removed = [before[u] for u in sorted(set(before) - set(after))]
    refused = []
    for resource, verb in [(r, "delete") for r in removed] + [(before[c.urn], "replace") for c in changed if c.replaces]:
        kind = KEPT.get(resource["type"])
        if kind and resource["name"] not in allowed:
            refused.append(f"{verb} of {kind} {resource['name']} is refused: allow it with --allow {resource['name']} or higgsfield:allowReplace")
    return Diff(added, removed, changed, refused)


# --- the base side ------------------------------------------------------------------------------


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)


def plan_json_at(ref: str, stack: str, root: Path) -> dict:
    """The plan of `stack` at git `ref`, evaluated with that ref's code and stack files."""
    if _git(root, "rev-parse", "--verify", f"{ref}^{{commit}}").returncode:
        raise StackNotFound(f"--base {ref!r} is not a commit of this repository")
    stack_file = f"stacks/Pulumi.{stack}.yaml"
    if _git(root, "cat-file", "-e", f"{ref}:{stack_file}").returncode:
        return {"project": "higgsfield", "stack": stack, "resources": [], "outputs": {}}  # a new stack: all additions
    code_changed = _git(root, "diff", "--quiet", ref, "--", *CODE_PATHS).returncode != 0
    with tempfile.TemporaryDirectory() as tmp:
        if not code_changed:
            # Same code: evaluate the base's config files with the code already loaded here.
            (Path(tmp) / "stacks").mkdir()
            for path in ("Pulumi.yaml", stack_file):
                (Path(tmp) / path).write_text(_git(root, "show", f"{ref}:{path}").stdout)
            return record(stack, root=Path(tmp)).as_dict()
        worktree = Path(tmp) / "base"
        _git(root, "worktree", "add", "--detach", str(worktree), ref).check_returncode()
        try:
            out = Path(tmp) / "plan.json"
            env = {**os.environ, "PYTHONPATH": str(worktree)}
            done = subprocess.run([sys.executable, "-m", "infra.cli", "plan", stack, "--json", str(out)], cwd=worktree, env=env, capture_output=True, text=True)
            if done.returncode:
                raise StackNotFound(f"the plan of {stack} at {ref} failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
            return json.loads(out.read_text())
        finally:
            _git(root, "worktree", "remove", "--force", str(worktree))


def diff_stack(stack: str, base_ref: str, root: Path, allow: set[str]) -> Diff:
    head = record(stack, root=root)
    allowed = set(allow) | set(getattr(head.config, "allow_replace", ()))
    return compare(plan_json_at(base_ref, stack, root), head.as_dict(), allowed)


def render_diff(stack: str, base_ref: str, diff: Diff) -> str:
    lines = [f"Changes to {stack} since {base_ref}: {len(diff.added)} to add, {len(diff.changed)} to change ({len(diff.replaced)} replaced), {len(diff.removed)} to delete"]
    lines += [f"  + {r['type']} {r['name']}" for r in diff.added]
    lines += [f"  - {r['type']} {r['name']}" for r in diff.removed]
    for c in diff.changed:
        if c.replaces:
            lines.append(f"  +- {c.type} {c.name}  REPLACE because of {', '.join(c.replace_paths)}")
        else:
            lines.append(f"  ~ {c.type} {c.name}  ({', '.join(c.paths[:6])}{', ...' if len(c.paths) > 6 else ''})")
    lines += [f"REFUSED: {r}" for r in diff.refused]
    return "\n".join(lines)
