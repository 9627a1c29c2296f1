"""Entry point Pulumi runs for `pulumi preview --policy-pack policies`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the project root: policies, infra

from pulumi_policy import EnforcementLevel, PolicyPack  # noqa: E402

from policies.rules import POLICIES  # noqa: E402

PolicyPack(name="higgsfield", enforcement_level=EnforcementLevel.MANDATORY, policies=POLICIES)
