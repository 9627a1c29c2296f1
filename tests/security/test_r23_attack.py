"""Round 23's attack beside the teams' CPU nodes: the team policy's exemption of an UPDATE that keeps every pod spec
(components/tenancy.py cel_variables, `specs_kept`), on which the rule that keeps pods without GPUs off GPU nodes, the
deadline rule and the share caps rest for a Kubeflow job admitted before them.

A Kubeflow job's templates are the values of a map (`mpiReplicaSpecs`, `pytorchReplicaSpecs`, ...). The API server
hands a policy the object as a Go map (objectToResolveVal, kubernetes/kubernetes:staging/src/k8s.io/apiserver/pkg/
admission/plugin/cel/filter.go) and CEL lists a Go map's keys with `for k := range`, in an order Go picks at random on
every iteration (stringIfaceMapAccessor.Iterator, google/cel-go:common/types/map.go; both read through the code
search), so `map(r, ...)` over the new and the old object may list the same replica types in different orders.
cel-expr-python (tests/admission_cel.py) picks an order of its own, not the one the keys were written in and not
under a test's control, so the policy as a whole shows the difference only by chance. The order-dependence is shown
on the `specs_kept` variable alone: evaluated with `variables.specs` (the new object's templates, listed by an
earlier evaluation) in the other order from the one this evaluation takes for the old object, as two iterations on
the API server may; the policy-level tests below hold whatever the order.

The jobs are a team's MPIJob as the platform rendered it before the teams' CPU nodes (its launcher without GPUs on
its gang's pool, tolerating the GPU taint: tests/security/test_team_cpu_nodes_policy.py), evaluated with the rules of
the stack the Training Operator tests use (tests/security/test_r20_operator_pods.py)."""

from __future__ import annotations

import copy

from components import gang_deadline, tenancy
from tests import admission_cel
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


def _specs_kept(job: dict, old: dict) -> bool:
    """The policy's `specs_kept` for an UPDATE of `old` to `job`, where the earlier evaluation that listed `job`'s
    templates' specs (`variables.specs`) iterated its replica types in the other order from this one's iteration of
    `old`'s: as two iterations on the API server may."""
    (expression,) = [v["expression"] for v in tenancy.cel_variables() if v["name"] == "specs_kept"]
    request = {"operation": "UPDATE", "userInfo": {"username": gang_deadline.USER}}
    activation = admission_cel.plain({"object": job, "oldObject": old, "request": request})
    this_order = admission_cel.evaluate("oldObject.spec.mpiReplicaSpecs.map(r, r)", activation)
    specs = [job["spec"]["mpiReplicaSpecs"][r]["template"]["spec"] for r in reversed(this_order)]
    return admission_cel.evaluate(expression, {**activation, "variables": admission_cel.plain({"specs": specs})})


def test_an_update_keeping_each_replica_types_spec_keeps_the_specs_whatever_order_each_iteration_takes():
    old = _an_mpijob_from_before_the_rule()
    assert _specs_kept(_suspended(old), old)


def test_an_update_swapping_two_replica_types_specs_keeps_no_spec_whatever_order_each_iteration_takes():
    old = _suspended(_an_mpijob_from_before_the_rule())
    swapped = copy.deepcopy(old)
    specs = swapped["spec"]["mpiReplicaSpecs"]
    specs["Launcher"]["template"], specs["Worker"]["template"] = (
        specs["Worker"]["template"],
        specs["Launcher"]["template"],
    )
    assert not _specs_kept(swapped, old)


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
