"""A team's job file (`higgsfield jobs render STACK -f JOB.yaml`): what the job needs, not where it runs.

    name: llama-ft
    team: llm
    command: [python, train.py, --epochs, "3"]
    resources:
      gpus: 16                 # total; the platform picks nodes x GPUs per node
      gpuType: [H100, H200]    # any of
      gpuMemoryGiB: 80         # at least
      interconnect: efa        # efa | any
      cudaDriver: ">=570"
    checkpoints: shared        # shared | off

The file is typed like a stack file: every key bounded, unknown keys refused, and a key written twice
(infra/offline/team_job.py read_job_file), one line per problem naming the key (`load_job`). What the
job needs is matched against a stack's pools by infra/offline/team_job.py, which also applies every
platform rule the examples follow. The JSON
Schema editors check job files with (`schemas/job.schema.json`) and the reference page
(docs/reference/job-file.md) are generated from these models (`higgsfield schema --write`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, model_validator

from infra.config.base import DnsLabel, Setting, Str, items, matching, number
from infra.config.errors import ConfigError, Problem, Problems
from infra.config.stack import IMAGE_REFERENCE, NOT_AN_IMAGE
from infra.core.names import GPU_DEVICE_ENV, PREFLIGHT_SWITCH, PREFLIGHT_SWITCH_VALUES, job_name_problem

# The job kinds the pinned Kubeflow Training Operator (versions.TRAINING_OPERATOR_REF, v1.9.4)
# reconciles, each with its replica types (the leader first, if any) and the container name the
# operator looks for in the pod template (<Kind>DefaultContainerName and <Kind>ReplicaType* in
# kubeflow/trainer:pkg/apis/kubeflow.org/v1/{pytorch,mpi,tensorflow,xgboost,jax,paddlepaddle}_types.go@v1.9.4).
FRAMEWORKS: dict[str, tuple[str, str, tuple[str, ...], str]] = {
    # framework: (kind, replica specs key, (leader, worker) replica types, container)
    "pytorch": ("PyTorchJob", "pytorchReplicaSpecs", ("Master", "Worker"), "pytorch"),
    "mpi": ("MPIJob", "mpiReplicaSpecs", ("Launcher", "Worker"), "mpi"),
    "tensorflow": ("TFJob", "tfReplicaSpecs", ("Chief", "Worker"), "tensorflow"),
    "xgboost": ("XGBoostJob", "xgbReplicaSpecs", ("Master", "Worker"), "xgboost"),
    "jax": ("JAXJob", "jaxReplicaSpecs", ("Worker",), "jax"),
    "paddle": ("PaddleJob", "paddleReplicaSpecs", ("Master", "Worker"), "paddle"),
}
# The operator names pods `<job>-<replica type>-<index>` and a headless Service per pod, which must be a
# DNS label (63): a job name of 40 leaves room for `-launcher-0` and indexes to 9999.
JOB_NAME_LENGTH = 40
SERVING_KIND = "Deployment"  # what a job of class serving runs as (examples/serving-classifier.yaml)
MAX_GPUS = 10_000  # ours: far above any pool (450 nodes x 8 GPUs is 3,600)
# An environment variable name as Kubernetes accepts it (kubernetes/apimachinery:pkg/util/validation/
# validation.go@v0.35.7 IsEnvVarName: envVarNameFmt), kept to the C identifiers a shell can read.
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
# A CUDA driver requirement: at least a major branch (">=570") or exactly one ("580").
CUDA_DRIVER = r"^(>=)?[1-9][0-9]{2,3}$"
# GPU model names as AWS's instance-type catalog gives them (`aws ec2 describe-instance-types
# --query InstanceTypes[].GpuInfo.Gpus[].Name`: H100, H200, B200, A100, A10G, L4, L40S, ...).
GPU_MODEL = r"^[A-Za-z0-9][A-Za-z0-9 -]{0,31}$"
GpuModel = matching(GPU_MODEL, "is not a GPU model name as AWS's catalog writes it (H100, H200, A100, L40S, ...)", 32)
EnvName = matching(ENV_NAME, "is not an environment variable name (letters, digits, '_'; not starting with a digit)")
REFERENCE = "docs/reference/job-file.md"


# What the pinned Training Operator appends to a container's env after the template's own, per kind: Kubernetes
# keeps the last of two same-named variables, so a team's value of one of these is lost. Names the operator sets
# only when the template has not (MPIJob's I_MPI_HYDRA_BOOTSTRAP and I_MPI_HYDRA_BOOTSTRAP_EXEC) stay the team's.
@dataclass(frozen=True)
class OperatorEnv:
    names: tuple[str, ...]
    prefixes: tuple[str, ...]
    on: str  # the pods the operator sets them on, with the kind
    what: str  # what they are for

    def overrides(self, name: str) -> bool:
        return name in self.names or name.startswith(self.prefixes)


OPERATOR_ENV: dict[str, OperatorEnv] = {
    # setPodEnv in kubeflow/trainer:pkg/controller.v1/pytorch/envvar.go@v1.9.4 (the names in its master.go
    # and elastic.go), on every container: every PET_ variable is one of torchrun's options.
    "PyTorchJob": OperatorEnv(
        ("PYTHONUNBUFFERED", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"),
        ("PET_",),
        "every pod of a PyTorchJob",
        "torchrun's rendezvous and ranks",
    ),
    # newLauncher in kubeflow/trainer:pkg/controller.v1/mpi/mpijob_controller.go@v1.9.4, on the launcher's first
    # container; workers get none. On a launcher without GPUs (ours) it also blanks NVIDIA_VISIBLE_DEVICES and
    # NVIDIA_DRIVER_CAPABILITIES, which no team pod may set anyway (GPU_DEVICE_ENV).
    "MPIJob": OperatorEnv(
        ("OMPI_MCA_plm_rsh_agent", "OMPI_MCA_orte_default_hostfile"),
        (),
        "an MPIJob's launcher",
        "Open MPI's remote shell agent and hostfile",
    ),
    # SetClusterSpec in kubeflow/trainer:pkg/controller.v1/tensorflow/tfjob_controller.go@v1.9.4, on the
    # tensorflow container of a job of more than one pod (isDistributed); the pod count is the platform's
    # choice (resources.gpus over the pool's nodes), so a team's TF_CONFIG would hold only sometimes.
    "TFJob": OperatorEnv(("TF_CONFIG",), (), "every pod of a TFJob", "TensorFlow's cluster spec"),
    # SetPodEnv in kubeflow/trainer:pkg/controller.v1/xgboost/xgboost.go@v1.9.4, on every container
    # (WORKER_PORT and WORKER_ADDRS, for LightGBM, on a job of more than one pod).
    "XGBoostJob": OperatorEnv(
        ("PYTHONUNBUFFERED", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "WORKER_PORT", "WORKER_ADDRS"),
        (),
        "every pod of an XGBoostJob",
        "the tracker's address, ranks and LightGBM's workers",
    ),
    # setPodEnv in kubeflow/trainer:pkg/controller.v1/jax/envvar.go@v1.9.4, on every container.
    "JAXJob": OperatorEnv(
        ("PYTHONUNBUFFERED", "COORDINATOR_PORT", "COORDINATOR_ADDRESS", "NUM_PROCESSES", "PROCESS_ID"),
        (),
        "every pod of a JAXJob",
        "jax.distributed's coordinator and process ids",
    ),
    # setPodEnv in kubeflow/trainer:pkg/controller.v1/paddlepaddle/envvar.go@v1.9.4, on every container
    # (POD_IP_DUMMY on the rendezvous pod; PADDLE_SERVER_NUM and PADDLE_TRAINER_NUM with a Master replica).
    "PaddleJob": OperatorEnv(
        (
            "PYTHONUNBUFFERED",
            "PADDLE_JOB_ID",
            "PADDLE_NNODES",
            "PADDLE_MASTER",
            "POD_IP_DUMMY",
            "PADDLE_SERVER_NUM",
            "PADDLE_TRAINER_NUM",
        ),
        (),
        "every pod of a PaddleJob",
        "Paddle's rendezvous endpoint and node counts",
    ),
}
ENV_DESCRIPTION = (
    "Environment of every rank (not what the platform sets: the checkpoint settings, EFA's libfabric and NCCL "
    "settings, the pre-flight's settings, PYTHONPATH; nor what the Training Operator sets over it, "
    + "; ".join(f"on {o.on}: {', '.join((*o.names, *(p + '*' for p in o.prefixes)))}" for o in OPERATOR_ENV.values())
    + "). HIGGSFIELD_PREFLIGHT: skip starts the job without its pre-flight check (docs/concepts/training-jobs.md)."
)
# Keys a newcomer writes to say where a job runs, and what a job file says instead (the platform picks the
# pool and the nodes: infra/offline/team_job.py place).
_PLACES = "resources.gpuType (the GPU model: H100, ...), gpuMemoryGiB and interconnect choose the pool"
_NODES = "resources.gpus is the total; the platform picks nodes x GPUs per node"
INSTEAD = {
    "instanceType": _PLACES,
    "instanceTypes": _PLACES,
    "pool": _PLACES,
    "nodeSelector": _PLACES,
    "nodes": _NODES,
    "replicas": _NODES,
    "workers": _NODES,
    "memory": "resources.gpuMemoryGiB is per GPU; a pod's memory is its share of its node, set by the platform",
}
Text = Annotated[str, Field(max_length=32_768)]
Gpus = number(1, MAX_GPUS, "ours")
# An absolute URL path of RFC 3986's path characters (no query, no fragment): what a readiness probe GETs.
READY_PATH = r"^/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*$"


class JobResources(Setting):
    """What the job's pods need from their nodes; the platform picks the pool and the nodes x GPUs."""

    gpus: Gpus
    """GPUs in total (for an elastic job: the most it grows to). More than a node has: whole nodes, a multiple of the
    chosen pool's GPUs per node."""
    gpu_type: tuple[GpuModel, ...] = items(maximum=20)
    """Any of these GPU models (a list, or one name); empty: any."""
    gpu_memory_gib: number(1, 4096, "ours") | None = Field(None, alias="gpuMemoryGiB")
    """At least this much memory per GPU, GiB."""
    interconnect: Literal["efa", "any"] = "any"
    """efa: only pools with EFA (a job on whole nodes gets every EFA interface of its nodes; one on a share of a node
    runs within it and takes none); any: any pool."""
    cuda_driver: matching(CUDA_DRIVER, 'is not a driver requirement (">=570", or a branch: "580")', 8) | None = None
    """The NVIDIA driver branch the job needs: ">=570" (at least) or "580" (exactly). Checked against the EKS AMI's
    driver branch, and required of the nodes through the driver labels GPU feature discovery publishes."""

    @model_validator(mode="before")
    @classmethod
    def _one_type(cls, data: Any) -> Any:
        """`gpuType: H100` is `gpuType: [H100]` (and the Python API's `gpu_type="H100"` alike)."""
        if isinstance(data, dict):
            return {k: [v] if k in ("gpuType", "gpu_type") and isinstance(v, str) else v for k, v in data.items()}
        return data

    def driver_wanted(self) -> tuple[str, int] | None:
        """(">=" or "==", the branch) of cudaDriver, if set."""
        if self.cuda_driver is None:
            return None
        return (">=" if self.cuda_driver.startswith(">=") else "==", int(self.cuda_driver.removeprefix(">=")))


class Elastic(Setting):
    """An elastic PyTorch job: it starts once minGpus fit and grows to resources.gpus (docs/workload-classes.md)."""

    min_gpus: Gpus
    """The fewest GPUs it runs on (its gang: never preempted); a multiple of the pool's GPUs per node."""


class DataMount(Setting):
    """A shared dataset of the stack (higgsfield:fsx.datasets) mounted at /datasets/NAME."""

    dataset: DnsLabel
    """The dataset's name; read-only unless the job's team owns it."""


class JobFile(Setting):
    """A team's job: what it runs and what it needs; the stack decides where and how."""

    # a DNS-1035 label: what the Training Operator's validating webhook asks of a Kubeflow job's name
    # (NameIsDNS1035Label in validatePyTorchJob and its kin, kubeflow/trainer:pkg/webhooks/*/*_webhook.go@v1.9.4),
    # and the API server of a Service's (ValidateServiceName, kubernetes/kubernetes:pkg/apis/core/validation)
    name: matching(
        r"^[a-z]([-a-z0-9]*[a-z0-9])?$",
        f"must be a lowercase DNS label of at most {JOB_NAME_LENGTH} characters starting with a letter (a-z, 0-9, '-')",
        JOB_NAME_LENGTH,
    )
    """The job's name in its team's namespace (pods are NAME-worker-0, ...), starting with a letter. It says the job's
    kind: an mpi job's starts with `mpi-`, tensorflow's `tf-`, xgboost's `xgboost-`, jax's `jax-`, paddle's `paddle-`,
    a pytorch job's with none of these, and none with `podgroup-` (docs/design/tenancy.md)."""
    team: DnsLabel
    """The team (higgsfield:scheduler.teams) whose namespace, queue, quota and UID the job runs with."""
    command: tuple[Annotated[Str, Field(max_length=4096)], ...] = items(1, 1000)
    """What each rank runs. PyTorch: `python SCRIPT ARGS` runs under torchrun, one process per GPU. SCRIPT is read in
    the container: the stack's training image holds only the platform's programs, so your code comes in an image of
    your own (`image`) or from shared storage (/fsx, /datasets/NAME)."""
    image: matching(IMAGE_REFERENCE, NOT_AN_IMAGE, 512) | None = None
    """The container image (registry/repository:tag or @sha256:...); default: the stack's training image. On EFA pools
    only an EFA-ready image (the stack's repository or higgsfield:trainingImage)."""
    framework: Literal["pytorch", "mpi", "tensorflow", "xgboost", "jax", "paddle"] = "pytorch"
    """The Kubeflow Training Operator job kind: PyTorchJob, MPIJob, TFJob, XGBoostJob, JAXJob or PaddleJob."""
    class_: Literal["training", "evaluation", "serving"] = Field("training", alias="class")
    """training, evaluation or serving: the team's priority classes of that kind (docs/workload-classes.md). Serving
    runs as a Deployment (as the serving-classifier example does): resources.gpus in replicas of one node's share or of
    whole nodes; no framework, elastic, shared checkpoints nor EFA."""
    resources: JobResources
    elastic: Elastic | None = None
    checkpoints: Literal["shared", "off"] = "shared"
    """shared: save and resume through examples/checkpointing.py on the team's FSx (refused without shared storage on
    more than one node); off: a restart starts at step 0."""
    data: tuple[DataMount, ...] = items(maximum=100)
    """Shared datasets to mount (higgsfield:fsx.datasets; refused on a stack without FSx); empty: every dataset the
    team may read."""
    env: dict[EnvName, Text] = items(maximum=200, default={}, description=ENV_DESCRIPTION)
    priority: DnsLabel | None = None
    """One of the team's priority classes of the job's class; default: the first."""
    port: number(1, 65535, "a TCP port") | None = None
    """Serving only: the port the server listens on. Its replicas name it `http` (the serving scrape job scrapes it)
    and a Service NAME on port 80 reaches them."""
    ready_path: matching(READY_PATH, "is not an absolute URL path (/healthz, /v1/models/ready)", 1024) | None = None
    """Serving only, with `port`: the path that answers with a 2xx or 3xx status once a replica can take requests (a
    GET on its `http` port every 10 s). Until then its Service sends it nothing and a rolling update waits for it; a
    replica that stops answering for 30 s leaves the Service until it answers again (it is not restarted). Without
    it, a replica takes requests as soon as its container starts, before its model is loaded."""

    @model_validator(mode="before")
    @classmethod
    def _yaml_11_words(cls, data: Any) -> Any:
        """`checkpoints: off` unquoted is the boolean false to a YAML 1.1 reader (PyYAML, kubectl's):
        read as the word it was written as."""
        if isinstance(data, dict) and isinstance(data.get("checkpoints"), bool):
            return {**data, "checkpoints": "shared" if data["checkpoints"] else "off"}
        return data

    @model_validator(mode="after")
    def _no_device_env(self) -> JobFile:
        """The variables that pick GPUs by name: the team policy refuses a pod that sets them
        (components/tenancy.py), so the job file says so before anything is submitted; those the
        Training Operator sets over the template's on the job's kind (OPERATOR_ENV); and the pre-flight's
        switch, which takes run or skip."""
        problems = Problems()
        for name in (n for n in self.env if n in GPU_DEVICE_ENV):
            problems.add(f"env.{name}", "picks GPUs by name, which no team pod may: GPUs come from resources.gpus")
        operator = OPERATOR_ENV.get(self.kind)  # none on a serving Deployment
        for name in self.env:
            if operator is not None and operator.overrides(name):
                problems.add(
                    f"env.{name}",
                    f"is set on {operator.on} by the Training Operator ({operator.what}); leave it out of env",
                )
        switch = self.env.get(PREFLIGHT_SWITCH)
        if switch is not None and switch.lower() not in PREFLIGHT_SWITCH_VALUES:  # preflight.py reads any case
            problems.add(
                f"env.{PREFLIGHT_SWITCH}",
                f"{switch[:40]!r}: the pre-flight check's switch is run or skip (skip: this job starts without it)",
            )
        problems.raise_any()
        return self

    @model_validator(mode="after")
    def _name_says_its_kind(self) -> JobFile:
        """A Kubeflow job's name carries its kind (infra/core/names.py job_name_problem), as the team
        policy checks at its CREATE: said here before anything is submitted."""
        problems = Problems()
        problem = job_name_problem(self.name, self.kind)
        if problem:
            problems.add("name", f"{self.name}: {problem}; this job's framework is {self.framework}")
        problems.raise_any()
        return self

    @model_validator(mode="after")
    def _elastic_fits(self) -> JobFile:
        problems = Problems()
        if self.elastic is not None and self.framework != "pytorch":
            problems.add(
                "elastic", f"only PyTorch jobs are elastic (the operator's elasticPolicy), not {self.framework}"
            )
        elif self.elastic is not None and int(self.elastic.min_gpus) > int(self.resources.gpus):
            problems.add(
                "elastic.minGpus",
                f"{self.elastic.min_gpus} is more than resources.gpus {self.resources.gpus}, the most the job grows to",
            )
        problems.raise_any()
        return self

    @model_validator(mode="after")
    def _serving_keys(self) -> JobFile:
        """What a serving Deployment has no use for, refused when written (a default is no choice)."""
        problems, written = Problems(), self.model_fields_set
        if self.class_ != "serving":
            if self.port is not None:
                problems.add("port", f"only a serving job has a port (class: serving), not a {self.class_} job")
            if self.ready_path is not None:
                problems.add(
                    "readyPath", f"only a serving job has a readiness path (class: serving), not a {self.class_} job"
                )
            problems.raise_any()
            return self
        if "framework" in written:
            problems.add("framework", "a serving job runs as a Deployment, not a Kubeflow job: leave framework out")
        if self.elastic is not None:
            problems.add("elastic", "a serving job has a fixed number of replicas: leave elastic out")
        if self.ready_path is not None and self.port is None:
            problems.add("readyPath", "is asked on the replicas' port: set port too")
        if "checkpoints" in written and self.checkpoints == "shared":
            problems.add("checkpoints", "a serving job saves no checkpoints: leave checkpoints out (or off)")
        if self.resources.interconnect == "efa":
            problems.add(
                "resources.interconnect",
                "efa: a serving replica is one pod on one node and uses no EFA; leave interconnect out",
            )
        problems.raise_any()
        return self

    @property
    def kind(self) -> str:
        """The kind of the object that runs the job: a Deployment for serving, else the framework's Kubeflow job."""
        return SERVING_KIND if self.class_ == "serving" else FRAMEWORKS[self.framework][0]


def _yaml_kind(value: Any) -> str:
    return "null" if value is None else "a boolean" if isinstance(value, bool) else "a number"


def _yaml_value(value: Any) -> str:
    """What YAML read a whole file as, where it is no mapping: `a string ('python train.py')`, `a number (3)`."""
    return f"a string ({value[:40]!r})" if isinstance(value, str) else f"{_yaml_kind(value)} ({value!r})"


def load_job(data: Any, source: str = "job file") -> JobFile:
    """The job file's mapping validated: a ConfigError with one line per problem, each naming its key
    (`JOB.yaml: resources.gpuType[0]`)."""
    from infra.config.loading import _as_meant, _as_written, did_you_mean, problems_of

    if not isinstance(data, dict):
        what = "is empty" if data is None else f"is {'a list' if isinstance(data, list) else _yaml_value(data)}"
        raise ConfigError(
            source, f"{what}: a job file is a mapping of settings (name, team, command, resources, ...; {REFERENCE})"
        )
    # A misspelt key is read as the setting it means (`gpu` as `gpus`, when that is not set), as a
    # stack file's are: its one line names it, and the setting it stands for is not also "required".
    meant, renamed = _as_meant(data, JobFile, (), by_name=True)  # the Python API writes names

    def unknown(loc: tuple[str | int, ...]) -> str:
        instead = INSTEAD.get(str(loc[-1])) if loc[:-1] in ((), ("resources",)) else None
        hint = f": a job file says what it needs, not where: {instead}" if instead else did_you_mean(loc, JobFile)
        return f"is not a job file setting{hint} ({REFERENCE})"

    problems = [Problem(written, unknown(written), source=source) for written in renamed.values()]
    try:
        job = JobFile.model_validate(meant)
    except ValidationError as exc:
        extra = {tuple(e["loc"]) for e in exc.errors() if e["type"] == "extra_forbidden"}
        # a key YAML read as a number, a boolean or null (`1: 2`, `yes: x`): named as YAML wrote it
        not_text = {
            tuple(e["loc"]): ((*e["loc"][:-1], json.dumps(e["input"])), _yaml_kind(e["input"]))
            for e in exc.errors()
            if e["type"] == "invalid_key"
        }
        # `cudaDriver: 580`, `--epochs, 3`: text to the writer, a number to YAML
        numbers = {
            tuple(e["loc"])
            for e in exc.errors()
            if e["type"] == "string_type" and isinstance(e["input"], (int, float)) and not isinstance(e["input"], bool)
        }
        problems += [
            Problem(
                _as_written(not_text[p.loc][0] if p.loc in not_text else p.loc, renamed),
                f"is not a job file setting: YAML reads this key as {not_text[p.loc][1]}, never a setting's name "
                f"({REFERENCE})"
                if p.loc in not_text
                else unknown(p.loc)
                if p.loc in extra
                else f"{p.message} (YAML reads it unquoted as a number: quote it)"
                if p.loc in numbers
                else p.message,
                source=source,
            )
            for p in problems_of(exc)
        ]
    if problems:
        raise ConfigError(problems[0].key, problems[0].message, problems) from None
    return job
