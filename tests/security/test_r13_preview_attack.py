"""r13 attack on the CI preview identity's cluster reads (components/delivery.py PREVIEW_READS, preview_gets): what a
pull request's preview, its code running as the group `higgsfield:preview`, can still read of a team's."""

from __future__ import annotations

import pytest

from components.gang_deadline import NAMESPACE, TEAM_CLOCKS
from infra.offline.rendered import Call, allows
from tests.conftest import STACKS
from tests.delivery.test_preview_identity import preview_rules

# A team's claim of the platform's gp3 StorageClass (components/observability.py) is bound to a PersistentVolume the
# EBS CSI provisioner makes, named `pvc-<the claim's uid>` (--volume-name-prefix, default "pvc":
# kubernetes-csi/external-provisioner:cmd/csi-provisioner/csi-provisioner.go@0048873e), whose spec.claimRef names the
# team's namespace and claim and whose capacity is its size.
TEAM_CLAIMS_VOLUME = "pvc-5f0c1a8e-3b7d-4f2a-9c6e-1d2b3a4c5e6f"


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("verb", ["list", "watch"])
def test_the_preview_lists_no_persistent_volume_the_claims_of_every_team(stack, verb):
    """Attack: list the cluster's PersistentVolumes: each team claim's namespace, name and size (its claimRef and
    capacity), which the by-name reads of claims (NAMED_READS) keep from a preview."""
    assert not allows(preview_rules(stack), Call(verb, "", "persistentvolumes", ""))


@pytest.mark.parametrize("stack", STACKS)
def test_the_preview_gets_no_persistent_volume_of_a_teams_claim(stack):
    assert not allows(preview_rules(stack), Call("get", "", "persistentvolumes", "", TEAM_CLAIMS_VOLUME))


@pytest.mark.xfail(
    strict=True,
    reason="the preview lists ConfigMaps in higgsfield-capacity (gang_deadline.py preview_reads), where the CronJob "
    "keeps its team clocks; a get by name of the program's own deadline ConfigMaps there would do (a design choice "
    "for the lead: ConfigMaps by name, as NAMED_READS' kinds are)",
)
@pytest.mark.parametrize("stack", STACKS)
def test_the_preview_reads_no_teams_gang_clock(stack):
    """Attack: get the gang-deadline CronJob's team clocks (images/training/gang_deadline.py team_clocks_data: since
    when each team's gangs have waited in each pool), a record of the teams' activity the CronJob makes, not the
    program."""
    assert not allows(preview_rules(stack), Call("get", "", "configmaps", NAMESPACE, TEAM_CLOCKS))
