"""`higgsfield preflight STACK`: can the AWS account run the stack (needs credentials)."""

from __future__ import annotations

import argparse

from infra.cli.arguments import stack_argument
from infra.cli.output import add_report_options, emit, error


def register(sub: argparse._SubParsersAction) -> None:
    pre = sub.add_parser(
        "preflight",
        help="check the AWS account can run the stack (quotas, offerings, reservations, AMI, FSx, add-on versions "
        "and configuration values)",
        # infra/cli/preflight.py run: the checks; Check.status: the line's word; run below: the exit codes
        description="Read-only calls to the stack's AWS account, with your AWS credentials, in the stack's region: "
        "each GPU pool's instance types offered in its AZs, with EFA where the pool has it; the vCPU quotas; its "
        "reservations and Capacity Blocks; the EKS NVIDIA AMI; FSx for Lustre in its AZ; and each EKS add-on the "
        "deploy installs: the version EKS would pick (or the pin), at or above the platform's floor, and the "
        "configuration values the program passes it against that version's schema. One line per check: ok; FAIL, "
        "with what to do; n/c, not checked, with why (an IAM action the identity lacks, AWS unreachable). Exit 0: "
        "every check ok; 1: one FAIL or n/c; 2: no usable credentials or configuration, or AWS unreachable. The IAM "
        "actions it needs: docs/concepts/health-and-observability.md. CI's deploy does not run it: run it before "
        "merging a release or a kubernetesVersion change (docs/upgrading.md).",
    )
    stack_argument(pre)
    add_report_options(pre)
    pre.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, NoRegionError

    from infra.cli import preflight
    from infra.offline.evaluate import record

    plan = record(args.stack)  # the add-ons the program installs, and their pins
    cfg = plan.config
    try:
        clients = preflight.Clients.for_region(cfg.region)  # reads ~/.aws/config and the AWS_* variables
        checks = preflight.run(cfg, clients, preflight.addon_pins(plan), preflight.addon_configurations(plan))
    except (*preflight.NO_CREDENTIALS, NoRegionError) as exc:
        error(
            f"no AWS credentials ({type(exc).__name__}): set AWS_PROFILE (or run `aws configure` / `aws sso login`) "
            "for the stack's account, then rerun"
        )
        return 2
    except preflight.CredentialsRejected as exc:
        error(f"{exc}: refresh them (`aws sso login`, or new keys) and rerun")
        return 2
    except (BotoCoreError, ValueError) as exc:  # each check catches its own: these come from making the clients
        error(
            f"the AWS configuration cannot be used ({type(exc).__name__}: {exc}): fix ~/.aws/config (or the file "
            "AWS_CONFIG_FILE names) and the AWS_* variables, then rerun"
        )
        return 2
    unreachable = preflight.one_cause(checks)
    if unreachable:
        error(unreachable)
        return 2
    emit(
        args,
        lambda: preflight.as_json(args.stack, checks),
        lambda: preflight.render(args.stack, checks, colour=args.colour),
    )
    failed = [c for c in checks if not c.ok]
    if failed:
        error(
            f"preflight of {args.stack}: {sum(c.checked for c in failed)} failed, "
            f"{sum(not c.checked for c in failed)} not checked (listed above)"
        )
    return 0 if not failed else 1
