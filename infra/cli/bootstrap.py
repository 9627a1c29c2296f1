"""`higgsfield bootstrap STACK`: the first deploy of a stack, before CI can do it.

CI previews and deploys from CodeBuild runners inside the stack's VPC with roles the stack
creates, so the first `pulumi up` cannot run in CI: nothing exists yet. It runs once from an
operator's machine, as an administrator of the account who is neither the deploy role nor in
`higgsfield:admins` (EKS keeps the creator's admin access entry, and a second entry for the same
principal would collide), with the API endpoint opened to that machine's address only for the
duration. This prints the steps with the stack's own names; it runs nothing. Order matters: the
deploy role's trust (made by the first deploy) never exists before the GitHub environment that
guards it and its rules (made and checked first).
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

from infra.config.delivery import PLACEHOLDER_REPOSITORY
from infra.core.names import NAMESPACE as PROJECT
from infra.core.names import boundary_name, deploy_denials_name, pulumi_up
from infra.offline import stacks
from infra.offline.evaluate import project_root
from infra.offline.stacks import SUB_CLAIM_KEYS


def image_targets(stack: str) -> list[str]:
    """The URNs of the training image repository (components/registry.py TrainingImageRepository
    "training-image" and its two children), for `pulumi up --target`: the engine leaves the root
    stack's type out of a top-level component's URN."""
    component = "higgsfield:registry:TrainingImage"
    return [
        f"urn:pulumi:{stack}::{PROJECT}::{component}::training-image",
        f"urn:pulumi:{stack}::{PROJECT}::{component}$aws:ecr/repository:Repository::training-image",
        f"urn:pulumi:{stack}::{PROJECT}::{component}$aws:ecr/lifecyclePolicy:LifecyclePolicy::training-image-lifecycle",
    ]


def image_step(config: Any) -> str:
    """Before any GPU node can join: the image the health gate pulls exists (docs/training-image.md)."""
    if config.health_gate_image:
        return (
            f"Health gate image: the gate runs higgsfield:healthGateImage {config.health_gate_image}; make sure it "
            "exists before the first "
            f"GPU node joins: `docker manifest inspect {config.health_gate_image}`"
        )
    # The URNs share the component's; a shell variable keeps each --target within a line.
    component = image_targets(config.stack)[0].rsplit("::", 1)[0]
    targets = " ".join(
        f'--target "$urn{urn[len(component) :]}"'.replace("$aws", "\\$aws") for urn in image_targets(config.stack)
    )
    return (
        "Training image, before any GPU node can join (the health gate runs it; without it every GPU node keeps its "
        "startup taint): "
        f"`urn='{component}' && {pulumi_up(config.stack, targets)}` creates only the stack's ECR repository; "
        "then "
        f"`higgsfield image push {config.stack}` builds images/training with Docker and pushes it there under the "
        "tag the gate and the jobs name; "
        f"`higgsfield image push {config.stack} --print` only prints the commands."
    )


def state_bucket(config: Any) -> str:
    """The state bucket of a stack CI does not deploy: one per account and region (bucket names are
    global, so the account is in it; `${ACCOUNT}` where the stack names no account)."""
    from infra.offline.pods import stack_account

    return f"higgsfield-state-{stack_account(config) or '${ACCOUNT}'}-{config.region}"


def _backend_steps(config: Any, bucket: str, key: str | None) -> list[str]:
    """The state bucket and the secrets key, once: the same for a stack CI deploys and one it does not."""
    stack, region = config.stack, config.region
    create_key = f"`aws kms create-key --region {region} --description 'Pulumi secrets of {stack}'"
    return [
        f"Backend (once per bucket): `aws s3api create-bucket --bucket {bucket} --region {region}"
        + ("" if region == "us-east-1" else f" --create-bucket-configuration LocationConstraint={region}")
        + f" && aws s3api put-bucket-versioning --bucket {bucket} --versioning-configuration Status=Enabled"
        + f" && aws s3api put-public-access-block --bucket {bucket} --public-access-block-configuration "
        + "BlockPublicAcls=true,IgnorePublicAcls=true,BlockPublicPolicy=true,RestrictPublicBuckets=true`",
        (
            f"Secrets key (once): {create_key}` then put its key ARN in higgsfield:delivery.stateKeyArn (now {key})."
            if key
            else f"Secrets key (once): {create_key} --query KeyMetadata.Arn --output text` prints the key's ARN, "
            "KEY-ARN in the next step."
        ),
    ]


def _stack_step(config: Any, backend: str, key: str) -> str:
    stack, region = config.stack, config.region
    return (
        f"State backend and stack: `pulumi login '{backend}' && pulumi stack init {stack} --secrets-provider "
        f"'awskms://{key}?region={region}'` (commit the secretsprovider/encryptedkey lines it adds to "
        f"stacks/Pulumi.{stack}.yaml)."
    )


def steps(config: Any) -> list[str]:
    """The bootstrap steps for a validated StackConfig: prose, with each command to run in
    backquotes (`render` puts them on lines of their own). Every stack gets the whole first deploy
    in the order that works: credentials, state bucket, secrets key, `pulumi login` and `stack
    init`, the image's repository and the image, then the first full `pulumi up`; a stack CI
    deploys (higgsfield:delivery) also gets its GitHub and CI steps, before any deploy trust exists."""
    stack, region, delivery = config.stack, config.region, config.delivery
    if delivery is None:
        from infra.offline.pods import stack_account

        bucket = state_bucket(config)
        account = stack_account(config)
        return [
            f"Credentials: an administrator of account {account or 'the stack is for'} (region {region}) that is "
            "not in higgsfield:admins (EKS gives the cluster's creator its own admin access entry)."
            + (
                ""
                if account
                else ' Its account, for the names below: `ACCOUNT="$(aws sts get-caller-identity '
                '--query Account --output text)"`'
            ),
            *_backend_steps(config, bucket, None),
            _stack_step(config, f"s3://{bucket}?region={region}", "KEY-ARN"),
            image_step(config),
            f"First full deploy (cluster, pools, the gate): `{pulumi_up(stack)}`",
            f"{stack} has no higgsfield:delivery: CI neither previews nor deploys it; later changes are the "
            "same pulumi up as the first full deploy (docs/getting-started.md). Add higgsfield:delivery to let CI "
            f"deploy it, then run `higgsfield bootstrap {stack}` again for the CI steps.",
        ]
    bucket, key = delivery.state_bucket, delivery.state_key_arn
    entry = next(e for e in stacks.stack_matrix(project_root())["include"] if e["stack"] == stack)
    endpoint = config.endpoint.public_access_cidrs
    restore = f"publicAccessCidrs {list(endpoint)}" if endpoint else "a private endpoint (publicAccessCidrs [])"
    repo, environment = delivery.repository, entry["deployEnvironment"]
    reviewed = config.environment != "dev"
    # PUT /repos/{owner}/{repo}/environments/{name}: deployment branches by custom policy (main
    # only, added next), required reviewers (a team) who may not approve their own runs, and no
    # administrator bypassing them (can_admins_bypass, which GitHub defaults to true: REST API
    # "Create or update an environment").
    rules: dict = {
        "deployment_branch_policy": {"protected_branches": False, "custom_branch_policies": True},
        "can_admins_bypass": False,
    }
    if reviewed:
        rules.update(prevent_self_review=True, reviewers=[{"type": "Team", "id": "TEAM_ID"}])
    placeholder = (
        [
            f"Repository: higgsfield:delivery.repository is still the placeholder {PLACEHOLDER_REPOSITORY}; set it "
            "to your repository "
            "(owner/name) in the stack file first: the CI roles trust that repository's workflows, and the commands "
            "below name it."
        ]
        if repo == PLACEHOLDER_REPOSITORY
        else []
    )
    return placeholder + [
        f"Credentials: an administrator of account {delivery.account_id} (region {region}) that is not "
        f"{entry['deployRole']} "
        f"and not in higgsfield:admins (EKS gives the cluster's creator its own admin access entry).",
        *_backend_steps(config, bucket, key),
        f"GitHub connection (once per account and region): `aws codeconnections create-connection --region {region} "
        f"--provider-type GitHub --connection-name higgsfield-{stack}` then finish the handshake in the console "
        "(Developer Tools > Settings > Connections: status Available); put its ARN in "
        "higgsfield:delivery.runner.connectionArn.",
        # The deploy trust (created by the first deploy below) must never exist before the
        # environment that guards it: environment, its rules, their check, then the trust.
        f"GitHub environment {environment!r} BEFORE any deploy trust exists (a repository admin): "
        f"`gh api -X PUT repos/{repo}/environments/{environment} --input - <<< '{json.dumps(rules)}'"
        f" && gh api -X POST repos/{repo}/environments/{environment}/deployment-branch-policies -f name=main -f "
        "type=branch`",
        "Verify it, and stop here unless it holds: `gh api "
        f"repos/{repo}/environments/{environment}/deployment-branch-policies "
        f"--jq '[.branch_policies[].name]'` prints [\"main\"]"
        + (
            f", and `gh api repos/{repo}/environments/{environment} --jq '[.protection_rules[].type]'` lists "
            "required_reviewers"
            if reviewed
            else ""
        )
        + f" and `gh api repos/{repo}/environments/{environment} --jq .can_admins_bypass` prints false"
        + ".",
        f"OIDC subject template of the repository (once; the roles trust subjects that name the workflow file): "
        f"`gh api -X PUT repos/{repo}/actions/oidc/customization/sub -F use_default=false "
        + " ".join(f"-f 'include_claim_keys[]={k}'" for k in SUB_CLAIM_KEYS)
        + f"` then verify: `gh api repos/{repo}/actions/oidc/customization/sub` prints use_default false and the "
        f"keys {list(SUB_CLAIM_KEYS)}.",
        f"Fork pull requests wait for a maintainer (their workflow files could ask for a runner): `gh api -X PUT "
        f"repos/{repo}/actions/permissions/fork-pr-contributor-approval -f approval_policy=all_external_contributors` "
        f"then verify: `gh api repos/{repo}/actions/permissions/fork-pr-contributor-approval --jq .approval_policy` "
        "prints all_external_contributors.",
        _stack_step(config, entry["backend"], key),
        image_step(config),
        "First deploy, from this machine, with the endpoint opened to it only (only after the environment check "
        "above passed): "
        f"`cp stacks/Pulumi.{stack}.yaml /tmp/Pulumi.{stack}.bootstrap.yaml` "
        f'then set higgsfield:endpoint.publicAccessCidrs there to ["ADDRESS/32"], ADDRESS being what '
        f"`curl -s https://checkip.amazonaws.com` prints, and run "
        f"`{pulumi_up(stack, f'--config-file /tmp/Pulumi.{stack}.bootstrap.yaml')}` "
        f"It creates the VPC, the cluster, the permissions boundary {boundary_name(stack)}, the deploy role's "
        f"managed policy {deploy_denials_name(stack)}, the CI roles "
        f"({entry['previewRole']}, {entry['deployRole']}, {entry['imageRole']}), "
        f"their access entries"
        + (
            f" and the CodeBuild runner projects {entry['previewRunner']} and {entry['deployRunner']}"
            if entry["deployRunner"]
            else ""
        )
        + ". "
        "Later changes to the boundary, that managed policy or the CI roles are refused to the deploy role: an "
        'administrator deploys them (docs/upgrading.md, "A release the deploy role may not apply"), with this '
        "step again, or its command without --config-file from a machine the endpoint admits.",
        "Nothing else in GitHub: role ARNs, region and backend come from the stack file (higgsfield stacks), and no "
        "secret is needed.",
        "Close the endpoint: merge to main (or re-run deploy): the deploy job, on the deploy runner inside the VPC, "
        "applies the "
        f"committed stack file, which restores {restore}.",
    ]


def as_json(config: Any) -> dict:
    """The steps as data: each step's prose (commands as `...`) and its commands, in order."""
    return {
        "stack": config.stack,
        "steps": [
            {"number": n, "text": step, "commands": step.split("`")[1::2]} for n, step in enumerate(steps(config), 1)
        ],
    }


def render(config: Any) -> str:
    """The numbered steps within 120 columns: the prose wrapped, each command on lines of its own,
    as a shell takes them when pasted (long ones continued with a backslash)."""
    from infra.cli.views.table import WIDTH

    lines: list[str] = []
    for number, step in enumerate(steps(config), 1):
        lead = f"{number}. "
        pad = " " * len(lead)
        for k, part in enumerate(step.split("`")):
            if k % 2:  # a command
                lines += command_lines(part, pad + "  ", WIDTH)
            elif part.strip():
                text = part.strip()
                lines += textwrap.wrap(
                    text,
                    WIDTH,
                    initial_indent=lead if k == 0 else pad,
                    subsequent_indent=pad,
                    break_long_words=False,
                    break_on_hyphens=False,
                )
    return "\n".join(lines)


def _words(command: str) -> list[str]:
    """The shell words of `command`, split at spaces outside quotes, each as written."""
    words, current, quote = [], "", None
    for char in command:
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == " ":
            if current:
                words.append(current)
            current = ""
            continue
        current += char
    return words + ([current] if current else [])


def command_lines(command: str, indent: str, width: int) -> list[str]:
    """`command` as lines within `width`, continued with ` \\`; `&&` starts a line of its own; a
    single-quoted JSON document too long for a line is broken after its commas (a newline inside
    the quotes is JSON whitespace)."""
    lines, line = [], indent
    words, units = _words(command), []
    while words:  # an option stays on the line of its value, where the two fit on one line
        pair = len(words) > 1 and words[0].startswith("-") and not words[1].startswith("-") and words[1] != "&&"
        take = 2 if pair and len(indent) + 2 + len(words[0]) + 1 + len(words[1]) + 2 <= width else 1
        units.append(" ".join(words[:take]))
        words = words[take:]
    for word in units:
        if word == "&&":
            lines.append(line + " \\")
            line = indent + "&&"
            continue
        if line.strip() and len(line) + 1 + len(word) + 2 > width:
            lines.append(line + " \\")
            line = indent + "  "
        if len(line) + len(word) + 1 > width and word.startswith("'{"):
            pieces = word.split(", ")
            current = line + (" " if line.strip() else "") + pieces[0]
            for piece in pieces[1:]:
                if len(current) + 2 + len(piece) > width:
                    lines.append(current + ",")
                    current = indent + "    " + piece
                else:
                    current += ", " + piece
            line = current
            continue
        line += (" " if line.strip() else "") + word
    return lines + [line]
