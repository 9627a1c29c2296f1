"""Claims of docs/day-one-journey.md held against what the platform renders (test_journey_doc.py
checks the page's form and refs; these evaluate the shipped prod stack)."""

from __future__ import annotations

import re

from infra.offline import healthcheck, jobs
from tests.conftest import ROOT, plan_of

DOC = ROOT / "docs" / "day-one-journey.md"
# What the operator copies from runPolicy.schedulingPolicy into the PodGroup it creates
# (kubeflow/trainer:pkg/controller.v1/common/job.go@v1.9.4 lines 250-300: MinMember, Queue,
# PriorityClassName, MinResources, and the timeout): no sub-group policy, no network topology.
COPIED_TO_THE_PODGROUP = {"minAvailable", "queue", "priorityClass", "minResources", "scheduleTimeoutSeconds"}


def _step(number: int) -> str:
    return re.split(r"^## ", DOC.read_text(encoding="utf-8"), flags=re.MULTILINE)[number]


def test_our_jobs_podgroups_take_the_allocate_branch_step_11_cites():
    cfg = plan_of("prod").config
    for example in jobs.examples_for(cfg):
        job = jobs.render(example, cfg)[-1]
        policy = (job.get("spec", {}).get("runPolicy") or {}).get("schedulingPolicy")
        if policy is None:
            continue  # not a Kubeflow job: no PodGroup from the operator
        assert set(policy) <= COPIED_TO_THE_PODGROUP, (example, policy)
        assert not any(
            "network-topology" in key
            for t in jobs.pod_templates(job)
            for key in (t.get("metadata", {}).get("annotations") or {})
        ), example
    step = _step(11)
    cited = re.search(r"allocate/allocate\.go@v1\.15\.1` lines (\d+)-(\d+)", step)
    # the default branch (no hard topology, no sub-job policy) is lines 324-357 at v1.15.1
    assert cited and (int(cited[1]), int(cited[2])) == (324, 357), cited and cited.group(0)


def test_step_12_names_the_command_the_health_check_runs():
    cfg = plan_of("prod").config
    objects = healthcheck.render(cfg, "h100", nodes=2)
    (allreduce,) = [o for o in objects if o.get("kind") == "PyTorchJob"]
    (worker,) = allreduce["spec"]["pytorchReplicaSpecs"].values()
    command = " ".join(worker["template"]["spec"]["containers"][0]["command"])
    step = " ".join(_step(12).split())
    assert f"`{command}`" in step
    assert "healthcheck render STACK POOL | kubectl apply -f -` runs nccl-tests" not in step
