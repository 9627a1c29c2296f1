"""docs/autoscaling.md and docs/training-image.md say what the code computes and prints."""

from __future__ import annotations

import re

import pytest

from components.autoscaler import DEPLOYMENT, unready_limits
from components.registry import image_tag
from infra.offline import image
from tests.conftest import ROOT, STACKS, plan_of


@pytest.mark.parametrize("stack", STACKS)
def test_the_autoscaling_table_is_what_each_stack_gets(stack):
    cfg = plan_of(stack).config
    limits = unready_limits(cfg.autoscaler, cfg.gpu_pools, cfg.scheduler.queues)
    flags = limits.flags()
    row = next(
        line for line in (ROOT / "docs" / "autoscaling.md").read_text().splitlines() if line.startswith(f"| {stack} |")
    )
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1].startswith(f"{limits.gang.nodes} nodes ({limits.gang.pool}")
    assert cells[2:] == [
        flags["max-node-startup-time"],
        str(flags["ok-total-unready-count"]),
        f"{flags['max-total-unready-percentage']:g}",
    ]


def test_the_documented_push_commands_are_the_ones_printed():
    text = (ROOT / "docs" / "training-image.md").read_text()
    printed = image.script(plan_of("dev").config, "push").replace(image_tag(), "src-<tree>")
    printed = re.sub(r"(?m)^#   [0-9a-f]{64}", "#   <sha256>", printed)
    block = re.search(r"`push --print` for dev prints exactly:\n\n```\n(.*?)```", text, re.S).group(1)
    assert block.strip() == printed


def test_the_autoscalers_deployment_is_the_charts_name_for_the_release_the_program_makes():
    """The chart names its Deployment `<release>-<cloudProvider>-cluster-autoscaler` unless a fullnameOverride or
    nameOverride is set (components/autoscaler.py DEPLOYMENT cites its template)."""
    (release,) = [r for r in plan_of("prod").of_type("kubernetes:helm.sh/v3:Release") if r.name == "cluster-autoscaler"]
    values = release.inputs["values"]
    assert "fullnameOverride" not in values and "nameOverride" not in values
    assert f"{release.inputs['name']}-{values['cloudProvider']}-cluster-autoscaler" == DEPLOYMENT


def test_every_command_of_the_manual_reading_the_autoscalers_log_names_its_deployment():
    named = {
        m.group(1)
        for page in (ROOT / "docs").rglob("*.md")
        for m in re.finditer(r"deploy/(\S*autoscaler\S*)", page.read_text())
    }
    assert named == {DEPLOYMENT}
