"""Round 12 attacker, on the job watchdog's gate for a team's own signal (images/training/job_watchdog.py
_shared_with): a re-check a team's straggler or pre-flight suspect asks for is not asked of a node where another
team's pod holds a GPU. So a team that can put one of its GPU pods beside another team's gang takes the watchdog's
remedies away from that gang on that node. The team policy keeps a team's pods off a node it names (NODE_SELECTOR_KEYS:
no hostname, no node field), but inter-pod affinity to another namespace's pods pins a pod to their node just as well:
the scheduler (Volcano's predicates plugin runs the kube-scheduler's InterPodAffinity filter, volcano-sh/volcano:
pkg/scheduler/plugins/predicates/predicates.go@v1.15.1) places a pod whose required podAffinity term selects pods in
the namespaces its namespaceSelector matches or its namespaces names (an empty selector: every namespace; neither: the
pod's own: PodAffinityTerm, kubernetes/kubernetes:staging/src/k8s.io/api/core/v1/types.go as kubernetes-validate's
kubernetes-json-schema/v1.37.0-local/podaffinityterm-v1.json has it) only on a node of the topologyKey's value those
pods have: with kubernetes.io/hostname, their node."""

from __future__ import annotations

import pytest

from tests.security.test_node_share import ONE_GPU, PACKED
from tests.security.test_tenancy import _job, _pod, denied_by

HOST = "kubernetes.io/hostname"
THEIR_GANG = {"matchLabels": {"training.kubeflow.org/job-name": "their-gang"}}


def _term(**reach) -> dict:
    return {"labelSelector": THEIR_GANG, "topologyKey": HOST, **reach}


# Terms that put a pod on the node of another team's pods: every namespace (an empty selector), one by its name
# label, or named in `namespaces`.
REACHES = {
    "every_namespace": {"namespaceSelector": {}},
    "their_namespace_by_label": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "nlp"}}},
    "their_namespace_by_name": {"namespaces": ["nlp"]},
}


def _required(**reach) -> dict:
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term(**reach)]}}


def _preferred(**reach) -> dict:
    return {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": _term(**reach)}]
        }
    }


@pytest.mark.parametrize("reach", sorted(REACHES))
def test_a_gpu_pod_pinned_to_another_teams_node_by_pod_affinity_is_denied(reach):
    assert any(m.startswith(PACKED) for m in denied_by(_pod(containers=ONE_GPU, affinity=_required(**REACHES[reach]))))


@pytest.mark.parametrize("reach", sorted(REACHES))
def test_a_job_whose_pods_prefer_another_teams_node_is_denied(reach):
    assert any(m.startswith(PACKED) for m in denied_by(_job(containers=ONE_GPU, affinity=_preferred(**REACHES[reach]))))
