"""Round 23's attack beside the teams' CPU nodes: the team policy's exemption of an UPDATE that keeps every pod spec
(components/tenancy.py cel_variables, `specs_kept`), on which the rule that keeps pods without GPUs off GPU nodes, the
deadline rule and the share caps rest for a Kubeflow job admitted before them.

A Kubeflow job's templates are the values of a map (`mpiReplicaSpecs`, `pytorchReplicaSpecs`, ...). The API server
hands a policy the object as a Go map (objectToResolveVal, kubernetes/kubernetes:staging/src/k8s.io/apiserver/pkg/
admission/plugin/cel/filter.go) and CEL lists a Go map's keys with `for k := range`, in an order Go picks at random on
every iteration (stringIfaceMapAccessor.Iterator, google/cel-go:common/types/map.go; both read through the code
search), so `map(r, ...)` over the new and the old object may list the same replica types in different orders.
cel-expr-python (tests/admission_cel.py) iterates in the order the keys were written, so each test writes them in the
order the API server may pick.

The jobs are a team's MPIJob as the platform rendered it before the teams' CPU nodes (its launcher without GPUs on
its gang's pool, tolerating the GPU taint: tests/security/test_team_cpu_nodes_policy.py), evaluated with the rules of
the stack the Training Operator tests use (tests/security/test_r20_operator_pods.py)."""

from __future__ import annotations

import copy

from components import gang_deadline, tenancy
from tests.security.test_r20_operator_pods import _rules
from tests.security.test_team_cpu_nodes_policy import _an_mpijob_from_before_the_rule
from tests.security.test_tenancy import denied_by

WITHOUT_GPUS = tenancy.WITHOUT_GPUS_OFF_GPU_NODES


def _in_order(job: dict, *replicas: str) -> dict:
    """`job` with its MPI replica types written in the order `replicas`: the order the API server's iteration may
    take."""
    specs = job["spec"]["mpiReplicaSpecs"]
    job["spec"]["mpiReplicaSpecs"] = {r: specs[r] for r in replicas}
    return job


def _suspended(job: dict) -> dict:
    suspended = copy.deepcopy(job)
    suspended["spec"]["runPolicy"]["suspend"] = True
    return suspended


def test_the_gang_deadline_may_suspend_a_job_from_before_the_rule_whatever_the_order_of_its_replica_types():
    """Its UPDATE keeps every template; refused, the job's gang would keep its nodes past its deadline. On the API
    server each of the two iterations takes an order of its own, at random."""
    old = _in_order(_an_mpijob_from_before_the_rule(), "Launcher", "Worker")
    suspended = _in_order(_suspended(old), "Worker", "Launcher")
    assert denied_by(suspended, _rules(old), operation="UPDATE", old=old, user=gang_deadline.USER) == []


def test_a_job_from_before_the_rule_may_not_swap_its_launchers_template_onto_its_workers():
    """Suspended, a job's templates may change, each judged again. Swapped between the replica types, its templates
    list the same specs in the other order, so an iteration order that reverses one list made the UPDATE look as if
    it kept every spec: the operator would then make every Worker of the launcher's template, pods without GPUs
    tolerating the GPU taint, on the GPU nodes, all admitted as the operator's."""
    old = _in_order(_suspended(_an_mpijob_from_before_the_rule()), "Launcher", "Worker")
    swapped = copy.deepcopy(old)
    specs = swapped["spec"]["mpiReplicaSpecs"]
    launcher, worker = specs["Launcher"]["template"], specs["Worker"]["template"]
    specs["Launcher"]["template"], specs["Worker"]["template"] = worker, launcher
    assert specs["Worker"].get("replicas", 1) > 1  # the launcher's template, made into several pods
    swapped = _in_order(swapped, "Worker", "Launcher")
    assert any(m.startswith(WITHOUT_GPUS) for m in denied_by(swapped, _rules(old), operation="UPDATE", old=old))
