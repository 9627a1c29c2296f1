"""r13 attack on the CI preview identity's cluster reads (components/delivery.py PREVIEW_READS, preview_gets): what a
pull request's preview, its code running as the group `higgsfield:preview`, can still read of a team's."""

from __future__ import annotations

import pytest

from components.gang_deadline import NAMESPACE, TEAM_CLOCKS
from components.storage import DATASET_CLAIM, PVC_NAME
from infra.offline.rendered import Call, allows
from tests.conftest import STACKS, plan_of
from tests.delivery.test_preview_identity import preview_rules
from tests.security.test_tenancy import admitted
from tests.security.test_tenant_attacks import CLUSTER_ADMIN, MALLORY, TEAM

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


@pytest.mark.parametrize("stack", STACKS)
def test_the_preview_reads_no_teams_gang_clock(stack):
    """Attack: get the gang-deadline CronJob's team clocks (images/training/gang_deadline.py team_clocks_data: since
    when each team's gangs have waited in each pool), a record of the teams' activity the CronJob makes, not the
    program."""
    assert not allows(preview_rules(stack), Call("get", "", "configmaps", NAMESPACE, TEAM_CLOCKS))


def _refusing_admission(plan, obj: dict, authorizer=TEAM) -> list[str]:
    """The messages of the plan's admission policies that match `obj`'s CREATE and refuse it, as a team member asks
    (or as `authorizer`'s holder)."""
    refused = []
    for r in plan.resources:
        if r.type != "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy":
            continue
        rules = r.inputs["spec"]["matchConstraints"].get("resourceRules") or []
        if any(
            "persistentvolumeclaims" in rule.get("resources", []) and "CREATE" in rule["operations"] for rule in rules
        ):
            verdicts = admitted(r.inputs, obj, user=MALLORY, authorizer=authorizer)
            refused += [message for message, ok in verdicts.items() if not ok]
    return refused


def _claim(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": plan_of("prod").config.scheduler.teams[0].name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def test_a_team_cannot_take_the_name_of_a_dataset_claim_the_program_will_make():
    """Attack (on the deploy): before the platform adds dataset `eval` to a team, the team makes a claim
    `dataset-eval` in its namespace; the program's create of its claim is refused AlreadyExists (the provider creates,
    it no longer applies over an object it finds, and the program sets no upsertExistingObjects:
    pulumi/pulumi-kubernetes:CHANGELOG.md@v4.32.0, 4.29.0 #2926), and the deploy stops there."""
    assert _refusing_admission(plan_of("prod"), _claim(DATASET_CLAIM.format(name="eval")))


def test_a_team_cannot_take_the_name_of_its_shared_volumes_claim():
    """A new team's namespace and its `shared-data` claim come in one deploy, but a claim deleted by the team (edit
    lets it) and made again by the team first would stop the next deploy the same way."""
    assert _refusing_admission(plan_of("prod"), _claim(PVC_NAME))


def test_a_team_still_makes_claims_of_its_own_names():
    assert _refusing_admission(plan_of("prod"), _claim("checkpoints-run-7")) == []


def test_the_platform_makes_its_dataset_claims():
    assert _refusing_admission(plan_of("prod"), _claim(DATASET_CLAIM.format(name="eval")), CLUSTER_ADMIN) == []
