"""The text of `higgsfield check`: the findings, mandatory first, and a count."""

from __future__ import annotations

from infra.cli.output import paint
from infra.cli.views.plan import note_lines
from infra.cli.views.table import wrap
from infra.offline.check import CheckResult, Finding


def render(result: CheckResult, verbose: bool = False, colour: bool = False) -> str:
    """The findings, mandatory first, each a line with its level, policy and resource and then its
    message wrapped within 120 columns; a count last. Policies that could not run offline (a value
    known only at deploy) are counted, and listed with `verbose`."""
    plan = result.plan
    names = {r.urn: f"{r.type.split(':')[-1]} {r.name}" for r in plan.resources}
    tint = {"mandatory": "red", "advisory": "yellow"}
    lines = [
        f"Policy check of {plan.project}/{plan.stack}: {len(plan.resources)} resources, policy config "
        f"{result.policy_config.name}"
    ]
    # the plan's notes, as `higgsfield plan` prints them, but for one a finding below says already (fsx-zone's)
    lines += note_lines(plan, said={f.message for f in result.violations})

    def finding(f: Finding, level: str) -> None:
        shown = paint(f"{level:<10}", tint[level], colour) if level in tint else f"{level:<10}"
        lines.append(f"  {shown} {f.policy}  ({names.get(f.urn or '', 'the stack')})")
        lines.extend(wrap(f.message, indent=4, hanging=2))

    for f in sorted(result.violations, key=lambda f: (f.level != "mandatory", f.policy)):
        finding(f, f.level)
    if verbose:
        for f in result.skipped:
            finding(f, "not run")
    mandatory = len(result.mandatory)
    summary = f"{mandatory} mandatory, {len(result.violations) - mandatory} advisory violations"
    if result.skipped:
        summary += (
            f"; {len(result.skipped)} not run offline (values known only at deploy; "
            f"{'listed above' if verbose else '--verbose lists them'})"
        )
    lines.append(summary)
    return "\n".join(lines)
