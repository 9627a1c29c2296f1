"""docs/autoscaling.md and docs/training-image.md say what the code computes and prints."""

from __future__ import annotations

import re

import pytest

from components.autoscaler import unready_limits
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
