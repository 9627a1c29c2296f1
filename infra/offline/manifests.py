"""The Kubernetes objects of the offline plan as files: what the program declares itself (not
Helm/kustomize contents) and the example jobs filled in for the stack (`plan --manifests`)."""

from __future__ import annotations

from pathlib import Path

import yaml

from infra.offline import jobs
from infra.offline.evaluate import Plan
from infra.offline.option_files import replace_file

_NOT_MANIFESTS = ("kubernetes:helm.sh/", "kubernetes:kustomize", "kubernetes:yaml", "pulumi:providers:")


def manifests(plan: Plan) -> list[dict]:
    """Every Kubernetes object the program declares directly (not Helm/kustomize contents)."""
    found = []
    for r in plan.resources:
        if r.type.startswith("kubernetes:") and not r.type.startswith(_NOT_MANIFESTS):
            found.append(dict(r.inputs))  # KubernetesObject's inputs are the manifest itself
    return found


def write_manifests(plan: Plan, folder: Path) -> list[Path]:
    """The program's own Kubernetes objects, one file each, and the example jobs filled in for
    the stack under examples/ (those are for `kubectl apply`, not deployed by `pulumi up`)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for example in jobs.examples_for(plan.config):
        (folder / "examples").mkdir(exist_ok=True)
        path = folder / "examples" / f"{example}.yaml"
        replace_file(path, jobs.to_yaml(jobs.render(example, plan.config)))
        written.append(path)
    for obj in manifests(plan):
        meta = obj.get("metadata") or {}
        name = "-".join(p for p in (obj.get("kind", "object").lower(), meta.get("namespace"), meta.get("name")) if p)
        path = folder / f"{name}.yaml"
        replace_file(path, yaml.safe_dump(obj, sort_keys=False))  # apiVersion and kind first, as kubectl users expect
        written.append(path)
    return written
