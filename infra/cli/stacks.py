"""`higgsfield stacks`: the stack matrix the workflows run over, read from stacks/Pulumi.<stack>.yaml.

No workflow names a stack or a region: each reads this JSON (`fromJSON`), so adding a stack file
(and its policy config) is all it takes for checks, preview and deploy to include it. Only PyYAML
is needed (`python3 -m infra.cli.stacks`), so a workflow can list the stacks before it installs
the program. The names here (roles, runner project, backend) are the ones components/delivery.py
creates; `higgsfield check` validates each stack file in full.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

ENVIRONMENT_ORDER = ("dev", "staging", "prod")  # deploy order: dev first, prod last


def cluster_name(stack: str) -> str:
    return f"higgsfield-{stack}"


def role_name(stack: str, purpose: str) -> str:
    """`higgsfield-prod-deploy`: preview, deploy, image, runner."""
    return f"{cluster_name(stack)}-{purpose}"


def runner_project(stack: str) -> str:
    """The CodeBuild project whose webhook runs jobs labelled `codebuild-<project>-<run id>-<attempt>`."""
    return f"{cluster_name(stack)}-runner"


def _entry(path: Path) -> dict[str, Any]:
    stack = path.name[len("Pulumi."):-len(".yaml")]
    config = (yaml.safe_load(path.read_text()) or {}).get("config") or {}
    delivery = config.get("higgsfield:delivery") or {}
    entry: dict[str, Any] = {"stack": stack, "region": config.get("aws:region"), "environment": config.get("higgsfield:environment")}
    if delivery:
        account = delivery.get("accountId")
        runner = delivery.get("runner") or {}
        entry.update({
            "deployEnvironment": delivery.get("deployEnvironment") or stack,
            "previewRole": f"arn:aws:iam::{account}:role/{role_name(stack, 'preview')}",
            "deployRole": f"arn:aws:iam::{account}:role/{role_name(stack, 'deploy')}",
            "imageRole": f"arn:aws:iam::{account}:role/{role_name(stack, 'image')}",
            "account": str(account),
            "backend": f"s3://{delivery.get('stateBucket')}?region={entry['region']}",
            "runner": runner_project(stack) if runner.get("enabled", True) else "",
        })
    return entry


def stack_matrix(root: Path, delivered_only: bool = False) -> dict[str, list[dict[str, Any]]]:
    """`{"include": [...]}`, one entry per stack file in deploy order (environment, then name);
    with `delivered_only`, only stacks that set higgsfield:delivery (CI previews and deploys those)."""
    entries = [_entry(p) for p in sorted((root / "stacks").glob("Pulumi.*.yaml"))]
    if delivered_only:
        entries = [e for e in entries if "deployRole" in e]
    rank = {env: i for i, env in enumerate(ENVIRONMENT_ORDER)}
    return {"include": sorted(entries, key=lambda e: (rank.get(e["environment"], len(rank)), e["stack"]))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="higgsfield stacks", description=__doc__.splitlines()[0])
    parser.add_argument("--delivered", action="store_true", help="only stacks with higgsfield:delivery (previewed and deployed by CI)")
    parser.add_argument("--root", type=Path, default=None, help="the project (default: the folder holding Pulumi.yaml, from here up)")
    args = parser.parse_args(argv)
    from infra.cli.offline import project_root

    print(json.dumps(stack_matrix(args.root or project_root(), args.delivered), separators=(",", ":")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
