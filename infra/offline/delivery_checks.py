"""The stack's delivery settings against the repository's GitHub workflows and the other stacks
(`higgsfield check`, policy ci-delivery): what would hand a pull request a deploy identity or a
deploy runner, and stacks that share an AWS account or a GitHub environment. These read files and
settings outside the Pulumi program, so they are not policies of the pack."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from policies.rules import get


def workflow_triggers(workflow: Mapping[str, Any]) -> set[str]:
    """The events a parsed workflow runs on (PyYAML reads the key `on` as True)."""
    on = workflow.get("on", workflow.get(True))
    return {on} if isinstance(on, str) else set(on or ())


PULL_REQUEST_EVENTS = {"pull_request", "pull_request_target"}


def assumed_roles(job: Mapping[str, Any]) -> list[str]:
    """`role-to-assume` of every configure-aws-credentials step of a job."""
    return [
        str(get(step, "with", "role-to-assume", default=""))
        for step in job.get("steps") or []
        if str(step.get("uses", "")).startswith("aws-actions/configure-aws-credentials")
    ]


def runs_pulumi(job: Mapping[str, Any]) -> bool:
    return any(str(step.get("uses", "")).startswith("pulumi/actions") for step in job.get("steps") or [])


def _runs_on(job: Mapping[str, Any]) -> str:
    return str(job.get("runs-on", "")).replace(" ", "")


def foreign_admins(config: Any) -> list[tuple[str, str]]:
    """Cluster admins in another account than a CI-deployed stack's: the deploy role's policy refuses
    their access entries (ClusterAccessStaysInTheAccount, components/delivery.py)."""
    delivery = config.delivery
    if delivery is None:
        return []
    return [
        (
            f"higgsfield:admins[{i}]",
            f"{admin} is in another account than the stack's ({delivery.account_id}): the deploy role's policy "
            "refuses access entries for other accounts' principals (ClusterAccessStaysInTheAccount, "
            "components/delivery.py); use a role of this account, or grant it from an administrator's session",
        )
        for i, admin in enumerate(config.admins)
        if admin.split(":")[4] != delivery.account_id
    ]


def delivery_findings(config: Any, workflows: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str]]:
    """What would hand a pull request a deploy identity or a deploy runner, or run a
    private-endpoint stack's preview/deploy outside its VPC: (setting or workflow job, message).
    `config` is the typed StackConfig; `workflows` the parsed .github/workflows files by file name."""
    found: list[tuple[str, str]] = []
    delivery = config.delivery
    world_open = any(c.endswith("/0") for c in config.endpoint.public_access_cidrs)
    if delivery is not None and not delivery.runner.enabled and not world_open:
        where = (
            "publicAccessCidrs " + ", ".join(config.endpoint.public_access_cidrs)
            if config.endpoint.public
            else "a private endpoint"
        )
        found.append(
            (
                "higgsfield:delivery.runner.enabled",
                f"false, but the API server has {where}: GitHub-hosted runners come from anywhere in GitHub's "
                "ranges, so preview and deploy could not reach it. Enable the runner (CodeBuild in the private "
                "subnets).",
            )
        )
    runner = delivery is not None and delivery.runner.enabled
    if runner and not delivery.runner.deploy_actors:
        found.append(
            (
                "higgsfield:delivery.runner.deployActors",
                "is empty: the deploy runner's webhook would start a build for any job of a workflow named deploy, a "
                "pull request's included.",
            )
        )
    found += foreign_admins(config)
    for file, workflow in sorted(workflows.items()):
        pull_request = bool(workflow_triggers(workflow) & PULL_REQUEST_EVENTS)
        for job_name, job in (workflow.get("jobs") or {}).items():
            where = f".github/workflows/{file} jobs.{job_name}"
            if pull_request:
                for role in assumed_roles(job):
                    if role.replace(" ", "") != "${{matrix.previewRole}}":
                        found.append(
                            (
                                where,
                                f"runs for pull requests and assumes {role!r}: a pull request may assume only the "
                                f"preview role (${{{{ matrix.previewRole }}}}).",
                            )
                        )
                environment = job.get("environment")
                environment = environment.get("name") if isinstance(environment, Mapping) else environment
                if (
                    environment
                    and delivery is not None
                    and str(environment).replace(" ", "")
                    in ("${{matrix.deployEnvironment}}", delivery.deploy_environment)
                ):
                    found.append(
                        (
                            "higgsfield:delivery.deployEnvironment",
                            f"{delivery.deploy_environment!r} is the environment of {where}, which runs for pull "
                            "requests: the deploy role would be a pull request's.",
                        )
                    )
                if runner and ("deployRunner" in _runs_on(job) or "-deploy-runner-" in _runs_on(job)):
                    found.append(
                        (
                            where,
                            f"runs for pull requests on the deploy runner ({job.get('runs-on')!r}): a pull request "
                            "runs on the preview runner only (matrix.previewRunner).",
                        )
                    )
                if runner and str(workflow.get("name", "")) == "deploy":
                    found.append(
                        (
                            f".github/workflows/{file}",
                            "is named deploy and runs for pull requests: the deploy runner's webhook (WORKFLOW_NAME "
                            "^deploy$) would take its jobs for any deploy actor. Name it otherwise.",
                        )
                    )
            if runner and runs_pulumi(job):
                label = "deployRunner" if any("deployRole" in r for r in assumed_roles(job)) else "previewRunner"
                if f"matrix.{label}" not in _runs_on(job):
                    found.append(
                        (
                            where,
                            f"runs pulumi on {job.get('runs-on')!r}, not on the stack's "
                            f"{label.removesuffix('Runner')} runner inside the VPC (higgsfield:delivery.runner): use "
                            f"the codebuild-${{{{ matrix.{label} }}}}-... label.",
                        )
                    )
    return found


def _extends(one: str, other: str) -> bool:
    """Whether one stack's names match the other's pattern: components/delivery.py confines a deploy role to
    `higgsfield-STACK-*` (roles, CodeBuild projects), which `higgsfield-prod-eu-...` matches for stack prod."""
    return other.startswith(f"{one}-") or one.startswith(f"{other}-")


def account_findings(config: Any, stacks: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """(level, setting, message) for a stack that shares its AWS account or its GitHub
    environment with another (`stacks`: the matrix entries of infra/offline/stacks.py). One account
    per environment: a deploy role can change any EC2/EKS/FSx resource of its account, so a prod
    that shares one with dev or staging is as safe as their weakest deploy (refused); two
    non-prod stacks sharing one is advised against; two stacks of one account whose names extend
    one another (prod, prod-eu) are refused, for their deploy roles' name patterns overlap."""
    delivery = config.delivery
    if delivery is None:
        return []
    found = []
    for other in stacks:
        if other.get("stack") == config.stack or "account" not in other:
            continue
        if str(other["account"]) == delivery.account_id and other.get("environment") != config.environment:
            prod = "prod" in (config.environment, other.get("environment"))
            found.append(
                (
                    "mandatory" if prod else "advisory",
                    "higgsfield:delivery.accountId",
                    f"{delivery.account_id} is also the account of {other['stack']} ({other.get('environment')}): "
                    "its deploy role could change this stack's "
                    f"resources. Use one AWS account per environment{' (required for prod)' if prod else ''}.",
                )
            )
        if str(other["account"]) == delivery.account_id and _extends(config.stack, str(other["stack"])):
            found.append(
                (
                    "mandatory",
                    "higgsfield:delivery.accountId",
                    f"{delivery.account_id} is also the account of {other['stack']}, whose name extends this "
                    f"stack's (or this one's extends its): each deploy role may change the roles and CodeBuild "
                    f"projects named higgsfield-STACK-*, and so the other stack's. Rename one, or give it its own "
                    "account.",
                )
            )
        if other.get("deployEnvironment") == delivery.deploy_environment:
            found.append(
                (
                    "mandatory",
                    "higgsfield:delivery.deployEnvironment",
                    f"{delivery.deploy_environment!r} is also {other['stack']}'s GitHub environment: one "
                    "environment's protection rules would guard both deploys. Give each stack its own.",
                )
            )
    return found
