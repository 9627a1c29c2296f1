"""Round 22's attack on the teams' CPU nodes (components/cpu_nodes.py, the `team-cpu-nodes` group) and the rule that
puts every team pod without GPUs there (components/tenancy.py node_share_validations): can one team, within what the
team policy and its quotas admit, leave another team's MPI launcher no node there, so that the other team's MPIJobs
never run while their workers' GPU nodes are bought and given back by the gang deadline?

A node is lost to another team's launcher as soon as one dimension the launcher asks is used up there, so a team's
room goes furthest spent one dimension a node: a pod asking just more than a node's CPU less a launcher's takes a
node by its CPU, one asking just more than a node's memory less a launcher's takes another by its memory, and pods
asking a millicore take a node by its pod slots. The group's maxSize counts that (infra/config/stack.py
_team_cpu_nodes_defaults: per team, twice its room over a node's in CPU and in memory, and one node for its
`cpu-only` and `cpu-services` quotas' 16 pods, the nodes whose slots they fill past the node daemons'), so one
team's room, however spent, leaves the others nodes. Each such pod is a plain batch Job's, on the teams' CPU nodes
as the platform puts a launcher there, with the deadline the CPU-only quota counts it by: the policy admits it (the
team's rules as a shipped stack renders them, evaluated with cel-expr-python as tests/security/test_tenancy.py
does).

The nodes are counted at their full capacity (the bundled EC2 catalog's vCPUs, memory and the VPC CNI's pod limit,
ENIs x (IPv4 addresses per ENI - 1) + 2, without prefix delegation, as EKS computes maxPods), so what a node has for
pods on a cluster (less kubelet and system reservations and the node daemons) only makes the attack cheaper. The
launcher asks what a rendered team job's asks: the team's LimitRange default (components/teams.py
container_defaults; infra/offline/team_job.py gives its container no request of its own), above kubectl-delivery's
100m/512Mi.
"""

from __future__ import annotations

import copy
from fractions import Fraction

from components import tenancy
from components.cpu_nodes import ON_TEAM_CPU_NODES
from components.teams import cpu_only_quota, cpu_service_quota
from infra.config import Team
from infra.config.gpu_pools import seconds_of
from infra.core.bundled import instance_types
from infra.core.names import LONGEST_POD_DEADLINE
from infra.offline.evaluate import load_stack
from tests.conftest import config_of, set_pool, team_rules
from tests.security.test_tenancy import denied_by

MIB = 2**20


def _node(stack: str) -> dict[str, int]:
    """The largest node the stack's teams' CPU nodes may be (vCPUs, memory in MiB, pod slots): the hardest to fill."""
    facts = []
    for name in config_of(stack).team_cpu_nodes.instance_types:
        t = instance_types()[name]
        net = t["NetworkInfo"]
        facts.append(
            {
                "cpu": t["VCpuInfo"]["DefaultVCpus"],
                "memory": t["MemoryInfo"]["SizeInMiB"],
                "pods": net["MaximumNetworkInterfaces"] * (net["Ipv4AddressesPerInterface"] - 1) + 2,
            }
        )
    return {k: max(f[k] for f in facts) for k in ("cpu", "memory", "pods")}


def _launcher(stack: str, team: str) -> tuple[Fraction, Fraction]:
    """What a rendered launcher of `team` asks (vCPUs, MiB): the LimitRange default, or kubectl-delivery's if more."""
    cpu, memory = tenancy.limit_range_defaults(next(t for t in config_of(stack).scheduler.teams if t.name == team))
    init = tenancy.LAUNCHER_INIT_REQUESTS
    return Fraction(max(cpu, init["cpu"])).limit_denominator(1000), Fraction(max(memory, init["memory"]) / MIB)


def _job(team: str, uid: int, name: str, parallelism: int, cpu: str, memory: str) -> dict:
    """A team's batch Job of `parallelism` pods without GPUs, each asking `cpu` and `memory`, on the teams' CPU nodes
    as the platform places a pod without GPUs (their label and taint), with the deadline the CPU-only quota counts,
    scheduled by Volcano as the launchers there are."""
    container = {
        "name": "c",
        "image": "x",
        "command": ["sleep", "infinity"],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "resources": {"requests": {"cpu": cpu, "memory": memory}},
    }
    spec = {
        "schedulerName": tenancy.SCHEDULER,
        "securityContext": {"runAsUser": uid, "runAsGroup": uid, "fsGroup": uid},
        "restartPolicy": "Never",
        "activeDeadlineSeconds": LONGEST_POD_DEADLINE,
        "containers": [container],
        **copy.deepcopy(ON_TEAM_CPU_NODES),
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": team},
        "spec": {"parallelism": parallelism, "completions": parallelism, "template": {"spec": spec}},
    }


def _room(team: Team, key: str) -> Fraction:
    """CPU-only work's room in `key` (vCPUs, MiB or pods): the `cpu-only` quota's and the `cpu-services` quota's
    together. A service's pods take nodes as a Job's do; the Jobs below stand for both."""
    quotas = (cpu_only_quota(team), cpu_service_quota(team))
    values = [q["spec"]["hard"][key] for q in quotas]
    if key == "requests.memory":
        return sum((Fraction(v.removesuffix("Gi")) * 1024 for v in values), Fraction(0))
    return sum((Fraction(v) for v in values), Fraction(0))


def _blocking_jobs(stack: str, attacker: str, victim: str, pod_slots: bool) -> list[dict]:
    """`attacker`'s Jobs that leave `victim`'s launcher no room on as many of the teams' CPU nodes as its CPU-only
    room allows: pods a node each by CPU, then by memory, then (`pod_slots`) by the node's pod slots."""
    cfg = config_of(stack)
    team = next(t for t in cfg.scheduler.teams if t.name == attacker)
    room_cpu, room_mib = _room(team, "requests.cpu"), _room(team, "requests.memory")
    node = _node(stack)
    l_cpu, l_mib = _launcher(stack, victim)
    # just more than a node's CPU (memory) less the launcher's: the launcher no longer fits beside it
    by_cpu = (node["cpu"] - l_cpu) * 1000 + 1  # millicores
    by_mib = (node["memory"] - l_mib) + 1
    n_cpu = int(room_cpu * 1000 // by_cpu)
    left_cpu = room_cpu * 1000 - n_cpu * by_cpu - 1  # what the memory pods and the tiny ones still may ask
    n_mib = int((room_mib - n_cpu) // by_mib)
    jobs = [
        _job(attacker, team.uid, "by-cpu", n_cpu, f"{by_cpu}m", "1Mi"),
        _job(attacker, team.uid, "by-memory", n_mib, "1m", f"{by_mib}Mi"),
    ]
    if pod_slots:
        pods_quota = int(_room(team, "pods"))
        tiny = min(pods_quota - n_cpu - n_mib, int(left_cpu) - n_mib)
        jobs.append(_job(attacker, team.uid, "by-pod-slots", tiny, "1m", "1Mi"))
    return jobs


def _admitted(jobs: list[dict], rules: tenancy.TeamRules) -> list[dict]:
    """Those of `jobs` the team policy admits, and each of whose pods, as the Job controller makes it (its account, the
    Job its controller, the tracking finalizer), it admits too."""
    admitted = []
    for job in jobs:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{job['metadata']['name']}-0",
                "namespace": job["metadata"]["namespace"],
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": job["metadata"]["name"],
                        "uid": "u-job",
                        "controller": True,
                    }
                ],
                "finalizers": [tenancy.JOB_TRACKING_FINALIZER],
            },
            "spec": copy.deepcopy(job["spec"]["template"]["spec"]),
        }
        if denied_by(job, rules) == [] and denied_by(pod, rules) == []:
            admitted.append(job)
    return admitted


def _nodes_taken(stack: str, jobs: list[dict], victim: str) -> int:
    """The teams' CPU nodes on which `jobs`' pods leave `victim`'s launcher no room: a pod that leaves a node less CPU
    or memory than the launcher asks takes that node alone (two would not fit one node), and pods asking next to
    nothing take a node by filling its pod slots."""
    node = _node(stack)
    l_cpu, l_mib = _launcher(stack, victim)
    taken, tiny = 0, 0
    for job in jobs:
        asked = job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
        cpu = Fraction(asked["cpu"].removesuffix("m")) / 1000
        mib = Fraction(asked["memory"].removesuffix("Mi"))
        n = job["spec"]["parallelism"]
        if cpu > node["cpu"] - l_cpu or mib > node["memory"] - l_mib:
            taken += n
        else:
            tiny += n
    return taken + tiny // node["pods"]


def _asked(jobs: list[dict]) -> tuple[Fraction, Fraction, int]:
    """What `jobs`' pods ask in all: vCPUs, MiB, pods."""
    cpu = mib = Fraction(0)
    pods = 0
    for job in jobs:
        asked = job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
        n = job["spec"]["parallelism"]
        cpu += n * Fraction(asked["cpu"].removesuffix("m")) / 1000
        mib += n * Fraction(asked["memory"].removesuffix("Mi"))
        pods += n
    return cpu, mib, pods


def _team_cpu_max_size(stack: str) -> int:
    return config_of(stack).team_cpu_nodes.max_size


def test_staging_vision_within_its_cpu_only_room_leaves_llms_launcher_a_team_cpu_node():
    """Two Jobs of vision's, within its 16 vCPUs and 64 GiB: two pods of just over a node's CPU less a launcher's,
    two of just over its memory less a launcher's: four nodes with no room for llm's launcher, and staging's group
    has more, so llm's MPIJobs still find one."""
    jobs = _blocking_jobs("staging", "vision", "llm", pod_slots=False)
    rules = team_rules("staging", "vision")
    admitted = _admitted(jobs, rules)
    cpu, mib, _ = _asked(admitted)
    assert cpu <= 16 and mib <= 64 * 1024  # the cpu-only quota admits them all
    assert _nodes_taken("staging", admitted, "llm") < _team_cpu_max_size("staging")


def test_prod_foundation_within_its_quotas_leaves_the_other_teams_launchers_a_team_cpu_node():
    """foundation's Jobs: two pods by CPU, two by memory, and pods of a millicore up to its `cpu-only` quota's 16 pods,
    fewer than one node's slots: prod's group keeps nodes for llm's and vision's launchers."""
    jobs = _blocking_jobs("prod", "foundation", "vision", pod_slots=True)
    rules = team_rules("prod", "foundation")
    admitted = _admitted(jobs, rules)
    cpu, mib, pods = _asked(admitted)
    team = next(t for t in config_of("prod").scheduler.teams if t.name == "foundation")
    assert cpu <= 16 and mib <= 64 * 1024
    assert pods <= _room(team, "pods")
    assert _nodes_taken("prod", admitted, "vision") < _team_cpu_max_size("prod")


# --- an honest gang from zero: the launcher's node must wait for its GPU nodes -----------------------------------


def test_a_launchers_team_cpu_node_outlasts_its_gangs_gpu_nodes_boot_and_health_gate(project_copy):
    """Volcano binds a gang whole, so the node bought for its launcher stands empty from its own boot (a few minutes)
    until the gang's last GPU node has booted and passed the health gate (a pool's bootTime plus its gate's timeout,
    30 minutes by default), and the Cluster Autoscaler removes it once empty for its unneeded time. Pools that give
    their idle nodes back after 10 minutes must not take the launcher's node with them: the gang would wait for
    another CPU node (and a cold pull of the training image) while its GPU nodes, past the gate, stand idle."""
    root = project_copy(
        "staging",
        lambda c: [set_pool(i, scaleDownUnneededTime="10m")(c) for i in range(len(c["higgsfield:gpuPools"]))],
    )
    cfg = load_stack("bad", root=root)
    longest_start = max(
        seconds_of(p.boot_time) + (seconds_of(p.health_gate.timeout) if p.health_gate.enabled else 0)
        for p in cfg.gpu_pools
    )
    assert seconds_of(cfg.team_cpu_nodes.scale_down_unneeded_time) >= longest_start


# --- one scheduler on the teams' CPU nodes ------------------------------------------------------------------------


def test_a_plain_jobs_pods_on_the_teams_cpu_nodes_are_scheduled_by_volcano():
    """The MPI launchers there are Volcano's (the operator names it). A pod kube-scheduler binds there races Volcano for
    the same room, each scheduler counting the node from its own cache, and the kubelet fails whichever pod it admits
    second (OutOfcpu, OutOfmemory: its admission of a pod against the node's allocatable); a launcher failed so fails
    its MPIJob (updateMPIJobStatus, kubeflow/trainer:pkg/controller.v1/mpi/mpijob_controller.go@v1.9.4). On GPU nodes
    every pod was Volcano's already (components/tenancy.py gpu_and_node_validations)."""
    rules = team_rules("staging", "vision")
    job = _job("vision", 20003, "cpu-work", 1, "1", "1Gi")
    del job["spec"]["template"]["spec"]["schedulerName"]  # kube-scheduler's
    assert any(m.startswith(tenancy.ON_TEAM_CPU_NODES_BY_VOLCANO) for m in denied_by(job, rules))
    job["spec"]["template"]["spec"]["schedulerName"] = tenancy.SCHEDULER
    assert denied_by(job, rules) == []
