"""Every pod the Training Operator makes of a Kubeflow job the platform renders, run through the job's team policy as
the operator's account creates it (components/tenancy.py OPERATOR_USER). The job is admitted at submission; its pods
come later, from the operator, with what the operator adds to each replica's template. A pod refused there never
exists: the job waits for its gang forever, the pods already made holding their nodes. The same for what else the
operator makes in the team's namespace that the policy matches (each pod's headless Service, the job's PodGroup, an
elastic job's HorizontalPodAutoscaler), and for a serving Deployment's ReplicaSet and its pods.

`_as_the_operator_makes_it` adds what the v1 controllers at v1.9.4 add (kubeflow/trainer@v1.9.4, run with the flags
of components/kustomize/training-operator/kustomization.yaml, gang scheduling by Volcano):
- every framework but MPI (JobController.createNewPod, pkg/controller.v1/common/pod.go): the template's pod named
  `<job>-<replica>-<index>`, the labels of GenLabels (operator-name, job-name; common/job_controller.go) with the
  replica's type, index and, for the master role, job-role; the framework's SetClusterSpec; the replica spec's
  restartPolicy (core.SetRestartPolicy, pkg/core/pod.go; the framework's default where the job sets none,
  pkg/apis/kubeflow.org/v1/*_types.go); Volcano's schedulerName where the template names none and its group-name and
  task-spec annotations (VolcanoControl.DecoratePodTemplateSpec, control/podgroup_control.go); the job as the
  controlling owner, blocking its deletion (GenOwnerReference), created through RealPodControl
  (control/pod_control.go: the template's labels, annotations, finalizers and spec, nothing else);
- the defaulted job (Scheme.Default in each controller's onOwnerCreateFunc): the framework's port on its default
  container where it has none (setDefaultPort, pkg/apis/kubeflow.org/v1/defaulting_utils.go and *_defaults.go);
- PyTorchJob (pytorch/envvar.go, master.go, elastic.go): its env on every container; init-pytorch in each Worker
  beside a Master (pytorch/initcontainer.go: no securityContext, 50m/10Mi requested, 100m/20Mi limited);
- TFJob (tensorflow/tfjob_controller.go): TF_CONFIG on the tensorflow container of a distributed job;
- XGBoostJob (xgboost/xgboost.go), JAXJob (jax/envvar.go), PaddleJob (paddlepaddle/envvar.go): their env;
- MPIJob (mpi/mpijob_controller.go newLauncher, newWorker): the launcher with kubectl-delivery (no securityContext,
  100m, 512Mi, 5Gi ephemeral-storage requested and limited), its emptyDir and the job's config map, its own service
  account where the template names none, the MPI env and, without GPUs, NVIDIA_VISIBLE_DEVICES and
  NVIDIA_DRIVER_CAPABILITIES empty; a worker with the config map mounted and `sleep 365d` where it has no command."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from components import tenancy
from infra.config import FRAMEWORKS
from infra.config.job import load_job
from infra.core import versions
from infra.core.names import JOB_NAME_PREFIXES, REPLICA_INDEX_LABEL, REPLICA_TYPE_LABEL
from infra.offline import healthcheck, jobs, team_job
from tests.admission_cel import quantity_value
from tests.conftest import config_of, team_rules
from tests.offline.test_team_job import EXAMPLE
from tests.security.test_tenancy import denied_by

STACK = "prod"
SPECS = {kind: key for kind, key, _, _ in FRAMEWORKS.values()}
# framework kind: (controllerName, default container, default port name, default port, default restartPolicy)
OPERATOR = {
    "PyTorchJob": ("pytorchjob-controller", "pytorch", "pytorchjob-port", 23456, "OnFailure"),
    "TFJob": ("tfjob-controller", "tensorflow", "tfjob-port", 2222, "Never"),
    "XGBoostJob": ("xgboostjob-controller", "xgboost", "xgboostjob-port", 9999, "Never"),
    "JAXJob": ("jaxjob-controller", "jax", "jaxjob-port", 6666, "Never"),
    "PaddleJob": ("paddlejob-controller", "paddle", "master", 36543, "OnFailure"),
    "MPIJob": ("mpijob-controller", "mpi", "mpi-port", 9999, "Never"),
}


def _env(container: dict, *pairs: tuple[str, str]) -> None:
    container.setdefault("env", []).extend({"name": k, "value": v} for k, v in pairs)


def _replicas(job: dict) -> dict[str, dict]:
    return job["spec"][SPECS[job["kind"]]]


def _total(job: dict) -> int:
    return sum(int(r.get("replicas", 1)) for r in _replicas(job).values())


def _cluster_env(job: dict, replica: str, index: int, container: dict, default: str) -> None:
    """SetClusterSpec's env for the pod of `replica` `index` (the values are the operator's; the policy reads names)."""
    name, kind, specs = job["metadata"]["name"], job["kind"], _replicas(job)
    rt = replica.lower()
    if kind == "PyTorchJob":
        _env(container, ("PYTHONUNBUFFERED", "1"))
        nproc = job["spec"].get("nprocPerNode", "auto")
        if "Master" in specs:
            rank = index + (1 if replica == "Worker" else 0)
            world = _total(job) * (int(nproc) if nproc.isdigit() else 1)
            master = f"{name}-master-0"
            _env(
                container,
                ("MASTER_PORT", "23456"),
                ("PET_MASTER_PORT", "23456"),
                ("MASTER_ADDR", master),
                ("PET_MASTER_ADDR", master),
                ("WORLD_SIZE", str(world)),
                ("RANK", str(rank)),
                ("PET_NODE_RANK", str(rank)),
            )
        _env(container, ("PET_NPROC_PER_NODE", nproc))
        if "elasticPolicy" in job["spec"]:
            _env(
                container,
                ("PET_RDZV_BACKEND", "c10d"),
                ("PET_RDZV_ENDPOINT", f"{name}-worker-0:23456"),
                ("PET_RDZV_ID", name),
                ("PET_NNODES", "{minReplicas}:{maxReplicas}".format(**job["spec"]["elasticPolicy"])),
                ("PET_MAX_RESTARTS", "3"),
            )
        else:
            _env(container, ("PET_NNODES", str(_total(job))))
    elif kind == "TFJob" and container["name"] == default and _total(job) > 1:
        cluster = {
            r.lower(): [f"{name}-{r.lower()}-{i}:2222" for i in range(int(s.get("replicas", 1)))]
            for r, s in specs.items()
        }
        _env(container, ("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": rt, "index": index}})))
    elif kind == "XGBoostJob":
        _env(
            container,
            ("MASTER_PORT", "9999"),
            ("MASTER_ADDR", f"{name}-master-0"),
            ("WORLD_SIZE", str(_total(job))),
            ("RANK", str(index)),
            ("PYTHONUNBUFFERED", "1"),
        )
    elif kind == "JAXJob":
        _env(
            container,
            ("PYTHONUNBUFFERED", "1"),
            ("COORDINATOR_PORT", "6666"),
            ("COORDINATOR_ADDRESS", f"{name}-worker-0"),
            ("NUM_PROCESSES", str(_total(job))),
            ("PROCESS_ID", str(index)),
        )
    elif kind == "PaddleJob":
        _env(
            container,
            ("PYTHONUNBUFFERED", "1"),
            ("PADDLE_JOB_ID", name),
            ("PADDLE_NNODES", str(_total(job))),
            ("PADDLE_MASTER", f"{name}-master-0:36543"),
        )
        container["env"].append({"name": "POD_IP_DUMMY", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})


def _mpi(job: dict, replica: str, spec: dict, meta: dict) -> None:
    """newLauncher / newWorker's additions."""
    name, main = job["metadata"]["name"], spec["containers"][0]
    mounts = [{"name": "mpi-job-config", "mountPath": "/etc/mpi"}]
    config = {"name": "mpi-job-config", "configMap": {"name": f"{name}-config"}}
    if replica == "Worker":
        if not main.get("command"):
            main["command"], main["args"] = ["sleep"], ["365d"]
        main.setdefault("volumeMounts", []).extend(mounts)
        spec.setdefault("volumes", []).append(config)
        return
    if not job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"].get("serviceAccountName"):
        spec["serviceAccountName"] = f"{name}-launcher"
    delivery = {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "5Gi"}
    spec.setdefault("initContainers", []).append(
        {
            "name": tenancy.KUBECTL_DELIVERY,
            "image": versions.MPI_KUBECTL_DELIVERY_IMAGE,
            "imagePullPolicy": "IfNotPresent",
            "env": [{"name": "TARGET_DIR", "value": "/opt/kube"}, {"name": "NAMESPACE", "value": meta["namespace"]}],
            "volumeMounts": [{"name": "mpi-job-kubectl", "mountPath": "/opt/kube"}, *copy.deepcopy(mounts)],
            "resources": {"limits": dict(delivery), "requests": dict(delivery)},
        }
    )
    _env(
        main, ("OMPI_MCA_plm_rsh_agent", "/etc/mpi/kubexec.sh"), ("OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile")
    )
    limits = [k for c in spec["containers"] for k in (c.get("resources") or {}).get("limits", {})]
    if not any(k.endswith(".com/gpu") or "gpu" in k for k in limits):  # isGPULauncher, mpi/mpijob.go
        _env(main, *((k, "") for k in tenancy.LAUNCHER_HIDDEN_GPU_ENV))
    names = {e["name"] for e in main["env"]}
    if "I_MPI_HYDRA_BOOTSTRAP" not in names:
        _env(main, ("I_MPI_HYDRA_BOOTSTRAP", "rsh"))
    if "I_MPI_HYDRA_BOOTSTRAP_EXEC" not in names:
        _env(main, ("I_MPI_HYDRA_BOOTSTRAP_EXEC", "/etc/mpi/kubexec.sh"))
    main.setdefault("volumeMounts", []).extend([{"name": "mpi-job-kubectl", "mountPath": "/opt/kube"}, *mounts])
    spec.setdefault("volumes", []).extend([{"name": "mpi-job-kubectl", "emptyDir": {}}, config])


def _owned_by(api_version: str, kind: str, name: str) -> list[dict]:
    """The ownerReferences a controller gives what it makes of `kind` `name`: its controlling owner, whose deletion
    waits for it (blockOwnerDeletion)."""
    return [
        {
            "apiVersion": api_version,
            "kind": kind,
            "name": name,
            "uid": "u-job",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def _as_the_operator_makes_it(job: dict, replica: str, index: int = 0) -> dict:
    """The Pod the operator creates for replica `replica` `index` of `job` (module docstring)."""
    kind, name, namespace = job["kind"], job["metadata"]["name"], job["metadata"]["namespace"]
    controller, default, port_name, port, restart = OPERATOR[kind]
    specs, rt = _replicas(job), replica.lower()
    replica_spec = specs[replica]
    template = copy.deepcopy(replica_spec["template"])
    meta: dict[str, Any] = template.get("metadata") or {}
    spec = template["spec"]
    meta["namespace"] = namespace
    # the defaulted job: the framework's port on its default container
    for container in spec["containers"]:
        if container["name"] == default and not any(p.get("name") == port_name for p in container.get("ports", [])):
            container.setdefault("ports", []).append({"name": port_name, "containerPort": port})
    labels = meta.setdefault("labels", {})
    labels.update(
        {
            "training.kubeflow.org/operator-name": controller,
            "training.kubeflow.org/job-name": name,
            REPLICA_TYPE_LABEL: rt,
        }
    )
    policy = replica_spec.get("restartPolicy", restart)
    spec["restartPolicy"] = "Never" if policy == "ExitCode" else policy
    spec.setdefault("schedulerName", tenancy.SCHEDULER)
    meta.setdefault("annotations", {}).update({"scheduling.k8s.io/group-name": name, "volcano.sh/task-spec": rt})
    if kind == "MPIJob":
        meta["name"] = f"{name}-launcher" if replica == "Launcher" else f"{name}-worker-{index}"
        if replica == "Launcher":
            labels["training.kubeflow.org/job-role"] = "master"
        _mpi(job, replica, spec, meta)
    else:
        meta["name"] = f"{name}-{rt}-{index}"
        labels[REPLICA_INDEX_LABEL] = str(index)
        leader = {"PyTorchJob": "Master", "XGBoostJob": "Master", "PaddleJob": "Master", "TFJob": "Chief"}.get(kind)
        if replica == leader or (leader not in specs and index == 0 and kind in ("PyTorchJob", "JAXJob", "TFJob")):
            labels["training.kubeflow.org/job-role"] = "master"
        for container in spec["containers"]:
            _cluster_env(job, replica, index, container, default)
        if kind == "PyTorchJob" and replica == "Worker" and "Master" in specs:
            limits, requests = {"cpu": "100m", "memory": "20Mi"}, {"cpu": "50m", "memory": "10Mi"}
            spec.setdefault("initContainers", []).append(
                {
                    "name": "init-pytorch",
                    "image": versions.PYTORCH_INIT_CONTAINER_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "resources": {"limits": limits, "requests": requests},
                    "command": ["sh", "-c", f"until nslookup {name}-master-0; do sleep 2; done"],
                }
            )
    meta["ownerReferences"] = _owned_by("kubeflow.org/v1", kind, name)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _the_service_the_operator_makes(job: dict, replica: str, index: int = 0) -> dict:
    """The headless Service the operator makes for replica `replica` `index` of `job`, beside its pod: every
    framework but MPI (JobController.CreateNewService, kubeflow/trainer:pkg/controller.v1/common/service.go@v1.9.4;
    the MPI controller's ReconcileServices makes none, mpi/mpijob_controller.go). Named as the pod, the labels of
    GenLabels with the replica's type and index as its labels and selector, a port per port of the defaulted job's
    default container (core.GetPortsFromJob, pkg/core/service.go), the job its controlling owner."""
    kind, name = job["kind"], job["metadata"]["name"]
    controller, default, port_name, port, _ = OPERATOR[kind]
    rt = replica.lower()
    labels = {
        "training.kubeflow.org/operator-name": controller,
        "training.kubeflow.org/job-name": name,
        REPLICA_TYPE_LABEL: rt,
        REPLICA_INDEX_LABEL: str(index),
    }
    main = next(c for c in _replicas(job)[replica]["template"]["spec"]["containers"] if c["name"] == default)
    ports = {p["name"]: p["containerPort"] for p in main.get("ports", []) if p.get("name")}
    ports.setdefault(port_name, port)  # the defaulted job's
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": f"{name}-{rt}-{index}",
            "namespace": job["metadata"]["namespace"],
            "labels": dict(labels),
            "ownerReferences": _owned_by("kubeflow.org/v1", kind, name),
        },
        "spec": {
            "clusterIP": "None",
            "selector": labels,
            "ports": [{"name": n, "port": p} for n, p in ports.items()],
        },
    }


def _rules(job: dict) -> tenancy.TeamRules:
    return team_rules(STACK, job["metadata"]["namespace"])


def _job_file(framework: str, elastic: bool = False) -> dict:
    data = copy.deepcopy(EXAMPLE)
    data["framework"] = framework
    data["name"] = JOB_NAME_PREFIXES.get(FRAMEWORKS[framework][0], "") + data["name"]
    if elastic:
        data["elastic"] = {"minGpus": 8}
        data["resources"] = {**data["resources"], "gpus": 32}
    return team_job.render(load_job(data), config_of(STACK))[0][-1]


def _example(example: str) -> dict:
    return jobs.workload_of(jobs.render(example, config_of(STACK)))


def _health_check() -> dict:
    cfg = config_of(STACK)
    return healthcheck.render(cfg, cfg.gpu_pools[0].name, nodes=2)[-1]


SOURCES = {
    **{f"job-file-{f}": (lambda f=f: _job_file(f)) for f in FRAMEWORKS},
    "job-file-pytorch-elastic": lambda: _job_file("pytorch", elastic=True),
    **{
        f"example-{e}": (lambda e=e: _example(e))
        for e in jobs.examples_for(config_of(STACK))
        if _example(e)["kind"] in SPECS
    },
    "health-check": _health_check,
}
CASES = [(source, replica) for source, render in SOURCES.items() for replica in _replicas(render())]


@pytest.mark.parametrize(("source", "replica"), CASES)
def test_the_pod_the_operator_makes_of_each_rendered_replica_is_admitted(source, replica):
    job = SOURCES[source]()
    rules = _rules(job)
    assert denied_by(job, rules) == []
    pod = _as_the_operator_makes_it(job, replica)
    assert denied_by(pod, rules, user=tenancy.OPERATOR_USER) == []


@pytest.mark.parametrize(("source", "replica"), [(s, r) for s, r in CASES if SOURCES[s]()["kind"] != "MPIJob"])
def test_the_service_the_operator_makes_of_each_rendered_replica_is_admitted(source, replica):
    """Each pod's headless Service: the policy matches Services (components/tenancy.py service_validations)."""
    job = SOURCES[source]()
    service = _the_service_the_operator_makes(job, replica)
    assert denied_by(service, _rules(job), user=tenancy.OPERATOR_USER) == []


# The batch Job controller's pod of completion index `index`: for an Indexed Job the index as a label, an annotation
# and JOB_COMPLETION_INDEX on every container (addCompletionIndexLabel, addCompletionIndexAnnotation,
# addCompletionIndexEnvVariables, kubernetes/kubernetes:pkg/controller/job/indexed_job_utils.go@037091284e21),
# the tracking finalizer (components/tenancy.py JOB_TRACKING_FINALIZER) and the Job as controlling owner, created as
# the job-controller account.
def _as_the_job_controller_makes_it(job: dict, index: int = 0) -> dict:
    template = copy.deepcopy(job["spec"]["template"])
    meta: dict[str, Any] = template.get("metadata") or {}
    spec = template["spec"]
    key = "batch.kubernetes.io/job-completion-index"
    if job["spec"].get("completionMode") == "Indexed":
        meta.setdefault("labels", {})[key] = str(index)
        meta.setdefault("annotations", {})[key] = str(index)
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            if not any(e["name"] == "JOB_COMPLETION_INDEX" for e in container.get("env", [])):
                field = {"fieldRef": {"fieldPath": f"metadata.labels['{key}']"}}
                container.setdefault("env", []).append({"name": "JOB_COMPLETION_INDEX", "valueFrom": field})
    meta.update(
        {
            "generateName": f"{job['metadata']['name']}-{index}-",
            "namespace": job["metadata"]["namespace"],
            "finalizers": [tenancy.JOB_TRACKING_FINALIZER],
            "ownerReferences": _owned_by("batch/v1", "Job", job["metadata"]["name"]),
        }
    )
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _batch_jobs() -> dict[str, dict]:
    cfg = config_of(STACK)
    rendered = {"example-eval-sweep": _example("eval-sweep")} if "eval-sweep" in jobs.examples_for(cfg) else {}
    check = next(o for o in healthcheck.render(cfg, cfg.gpu_pools[0].name, nodes=2) if o["kind"] == "Job")
    return {**rendered, "health-check": check}


@pytest.mark.parametrize("source", list(_batch_jobs()))
def test_the_pod_the_job_controller_makes_of_each_rendered_batch_job_is_admitted(source):
    """The eval sweep is an Indexed Job: its pods carry the index as a label, an annotation and the
    JOB_COMPLETION_INDEX variable, and the controller's tracking finalizer."""
    job = _batch_jobs()[source]
    rules = _rules(job)
    assert denied_by(job, rules) == []
    pod = _as_the_job_controller_makes_it(job)
    assert denied_by(pod, rules, user=tenancy.JOB_CONTROLLER_USERS[0]) == []


POD_TEMPLATE_HASH = "5d8f7c9b6"
DEPLOYMENT_CONTROLLER = f"{tenancy.CONTROLLER_USERS}deployment-controller"


def _as_the_deployment_controller_makes_it(deployment: dict) -> dict:
    """The ReplicaSet the Deployment controller makes of `deployment` (getNewReplicaSet, kubernetes/kubernetes:
    pkg/controller/deployment/sync.go, read through the code search): named `<deployment>-<hash>`, its template's
    labels and its selector with pod-template-hash, the Deployment's annotations and replicas, the Deployment its
    controlling owner."""
    name, labels = deployment["metadata"]["name"], {"pod-template-hash": POD_TEMPLATE_HASH}
    template = copy.deepcopy(deployment["spec"]["template"])
    template.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    selector = copy.deepcopy(deployment["spec"]["selector"])
    selector.setdefault("matchLabels", {}).update(labels)
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{name}-{POD_TEMPLATE_HASH}",
            "namespace": deployment["metadata"]["namespace"],
            "labels": dict(template["metadata"]["labels"]),
            "annotations": copy.deepcopy(deployment["metadata"].get("annotations", {})),
            "ownerReferences": _owned_by("apps/v1", "Deployment", name),
        },
        "spec": {"replicas": deployment["spec"]["replicas"], "selector": selector, "template": template},
    }


def _as_the_replicaset_controller_makes_it(deployment: dict) -> dict:
    """The pod the ReplicaSet controller makes of `deployment`'s ReplicaSet: the Deployment controller labels the
    ReplicaSet's template with pod-template-hash (getNewReplicaSet, kubernetes/kubernetes:pkg/controller/deployment/
    sync.go, read through the code search); the ReplicaSet is the pod's controlling owner."""
    template = copy.deepcopy(deployment["spec"]["template"])
    meta: dict[str, Any] = template.get("metadata") or {}
    meta.setdefault("labels", {})["pod-template-hash"] = POD_TEMPLATE_HASH
    meta.update(
        {
            "generateName": f"{deployment['metadata']['name']}-{POD_TEMPLATE_HASH}-",
            "namespace": deployment["metadata"]["namespace"],
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "rs",
                    "uid": "u-rs",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        }
    )
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}


REPLICASET_CONTROLLER = f"{tenancy.CONTROLLER_USERS}replicaset-controller"


def test_the_replicaset_the_deployment_controller_makes_of_the_serving_example_is_admitted():
    """The policy matches ReplicaSets (components/tenancy.py WORKLOADS): the gang annotation and template it copies."""
    deployment = _example("serving-classifier")
    replicaset = _as_the_deployment_controller_makes_it(deployment)
    assert denied_by(replicaset, _rules(deployment), user=DEPLOYMENT_CONTROLLER) == []


def test_the_pod_the_replicaset_controller_makes_of_the_serving_example_is_admitted():
    deployment = _example("serving-classifier")
    pod = _as_the_replicaset_controller_makes_it(deployment)
    assert denied_by(pod, _rules(deployment), user=REPLICASET_CONTROLLER) == []


def _as_the_operator_groups_it(job: dict, stack: str = STACK) -> dict:
    """The Volcano PodGroup the operator creates for `job` (SyncPodGroup, kubeflow/trainer:pkg/controller.v1/common/
    scheduling.go@v1.9.4, filled by ReconcileJobs, common/job.go): the job's name, annotations and controlling owner;
    minMember, queue and priorityClassName from its schedulingPolicy; minResources the requests (a limit where no
    request) of the first minMember pods, the replica types in order of their class's value (CalcPGMinResources,
    common/util.go@v1.9.4), on shipped `stack`."""
    cfg = config_of(stack)
    values = {c.name: c.value for c in cfg.scheduler.priority_classes}
    policy = job["spec"]["runPolicy"].get("schedulingPolicy", {})
    specs = sorted(
        _replicas(job).values(), key=lambda r: -values.get(r["template"]["spec"].get("priorityClassName", ""), 0)
    )
    members = int(policy.get("minAvailable", _total(job)))
    least: dict[str, float] = {}
    counted = 0
    for replica in specs:
        for _ in range(int(replica.get("replicas", 1))):
            if counted >= members:
                break
            counted += 1
            for container in replica["template"]["spec"]["containers"]:
                asked = container.get("resources") or {}
                for key, value in {**asked.get("limits", {}), **asked.get("requests", {})}.items():
                    least[key] = least.get(key, 0.0) + quantity_value(str(value))
    name, kind = job["metadata"]["name"], job["kind"]
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": job["metadata"]["namespace"],
            "annotations": copy.deepcopy(job["metadata"].get("annotations", {})),
            "ownerReferences": _owned_by("kubeflow.org/v1", kind, name),
        },
        "spec": {
            "minMember": members,
            "queue": policy.get("queue", "default"),
            **({"priorityClassName": policy["priorityClass"]} if policy.get("priorityClass") else {}),
            "minResources": {k: str(v) for k, v in least.items()},
        },
    }


@pytest.mark.parametrize("source", list(SOURCES))
def test_the_podgroup_the_operator_makes_of_each_rendered_job_is_admitted(source):
    job = SOURCES[source]()
    assert denied_by(_as_the_operator_groups_it(job), _rules(job), user=tenancy.OPERATOR_USER) == []


ELASTIC = [s for s, render in SOURCES.items() if "elasticPolicy" in render()["spec"]]


def _as_the_operator_scales_it(job: dict) -> dict:
    """The HorizontalPodAutoscaler the operator makes of an elastic PyTorchJob with metrics: the job scaled between its
    elasticPolicy's bounds on those metrics, the job its controlling owner (desiredHPA, kubeflow/trainer:pkg/
    controller.v1/pytorch/hpa.go@v1.9.4)."""
    elastic, name = job["spec"]["elasticPolicy"], job["metadata"]["name"]
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {
            "name": name,
            "namespace": job["metadata"]["namespace"],
            "ownerReferences": _owned_by(job["apiVersion"], job["kind"], name),
        },
        "spec": {
            "scaleTargetRef": {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": name},
            "minReplicas": elastic["minReplicas"],
            "maxReplicas": elastic["maxReplicas"],
            "metrics": copy.deepcopy(elastic["metrics"]),
        },
    }


@pytest.mark.parametrize("source", ELASTIC)
def test_the_autoscaler_the_operator_makes_of_each_rendered_elastic_job_is_admitted(source):
    job = SOURCES[source]()
    assert denied_by(_as_the_operator_scales_it(job), _rules(job), user=tenancy.OPERATOR_USER) == []
