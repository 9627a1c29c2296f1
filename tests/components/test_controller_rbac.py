"""Every controller we deploy or configure has the RBAC its flags need, and no more where the RBAC is ours.

For each controller, NEEDS derives the API calls its flags (as we set them, or as its chart sets
them from our values) imply, each row citing the upstream code line that makes the call. The
calls are checked against the RBAC the controller gets: rules we write (the Training Operator's
leader-election Role in components/kustomize/training-operator, the health gate's objects in the
plan), parsed from what we ship; or rules its chart renders, read in the chart's template at the
pinned ref (CHART_GRANTS, each citing the template line, with the condition under which the chart
renders it evaluated on the values we pass). Nothing here copies an upstream file: a grant is one
rule, cited.

RBAC is evaluated the way the authorizer does it (k8s.io/apiserver RBAC: a rule matches when
apiGroups, resources and verbs match, and resourceNames is empty or names the object; a request
without a name, such as create, never matches a rule with resourceNames; a Role applies only in
its own namespace, a ClusterRole bound by a ClusterRoleBinding everywhere).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest
import yaml

from components import autoscaler, device_plugins, healthgate
from components.training import KUSTOMIZATION, VOLCANO_NAMESPACE
from infra.core import versions
from infra.offline.evaluate import Plan
from infra.offline.rendered import Call, Scoped, allows, rules_for

RELEASE = "kubernetes:helm.sh/v3:Release"
TRAINER, CR, CG = "kubeflow/trainer", "kubernetes-sigs/controller-runtime", "kubernetes/client-go"
VOLCANO, CA, NDP = "volcano-sh/volcano", "kubernetes/autoscaler", "NVIDIA/k8s-device-plugin"
NFD = "kubernetes-sigs/node-feature-discovery"
CA_CHART = "kubernetes/autoscaler:cluster-autoscaler/charts/cluster-autoscaler/templates"
VC_CHART = "volcano-sh/volcano:installer/helm/chart/volcano/templates"
NFD_CHART = (
    "NVIDIA/k8s-device-plugin:deployments/helm/nvidia-device-plugin/charts/"
    "node-feature-discovery-chart-0.17.3.tgz@v0.19.3 (node-feature-discovery/templates"
)
NDP_CHART = "NVIDIA/k8s-device-plugin:deployments/helm/nvidia-device-plugin/templates"
MS_CHART = "kubernetes-sigs/metrics-server:charts/metrics-server/templates"


# --- the authorizer: infra/offline/rendered.py (the online contract workflow runs it on what helm renders) ---


# --- what each controller's flags imply -----------------------------------------------------------


@dataclass(frozen=True)
class Need:
    controller: str
    because: str  # the flag or value that implies the call
    call: Call
    source: str  # the upstream line that makes it


def _operator_args() -> list[str]:
    (patch,) = yaml.safe_load((KUSTOMIZATION / "kustomization.yaml").read_text())["patches"]
    (container,) = yaml.safe_load(patch["patch"])["spec"]["template"]["spec"]["containers"]
    return container["args"]


def _flag(args: Sequence[str], name: str, default: str) -> str:
    return next((a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")), default)


def operator_needs() -> list[Need]:
    args, ns, op = _operator_args(), versions.TRAINING_OPERATOR_NAMESPACE, "training-operator"
    needs = []
    if "--leader-elect" in args or "--leader-elect=true" in args:
        lease = _flag(args, "leader-election-id", "1ca428e5.training-operator.kubeflow.org")  # main.go:93 default
        lock = f"{CG}:tools/leaderelection/resourcelock/leaselock.go@v0.36.3"
        needs += [
            Need(
                op,
                "--leader-elect",
                Call("get", "coordination.k8s.io", "leases", ns, lease),
                f"{lock}:43 (LeaseLock.Get); lock kind leases: "
                f"{CR}:pkg/leaderelection/leader_election.go@v0.24.1:75, namespace :86",
            ),
            Need(
                op,
                "--leader-elect",
                Call("create", "coordination.k8s.io", "leases", ns),
                f"{lock}:68 (LeaseLock.Create)",
            ),
            Need(
                op,
                "--leader-elect",
                Call("update", "coordination.k8s.io", "leases", ns, lease),
                f"{lock}:89 (LeaseLock.Update)",
            ),
            Need(
                op,
                "--leader-elect",
                Call("create", "", "events", ns),
                f"{lock}:99 (RecordEvent on the Lease); {CR}:pkg/leaderelection/leader_election.go@v0.24.1:130",
            ),
        ]
    if "--gang-scheduler-name=volcano" in args:
        needs += [
            Need(
                op,
                "--gang-scheduler-name=volcano",
                Call(v, "scheduling.volcano.sh", "podgroups", "team-ns"),
                f"{TRAINER}:pkg/controller.v1/common/job.go@v1.9.4:281 (PodGroup per job)",
            )
            for v in ("create", "get", "update")
        ]
    # Webhook certificates, always on (cert.ManageCerts in main.go:165): the Secret in the pod's namespace.
    needs += [
        Need(
            op,
            "webhook cert rotation (always)",
            Call(v, "", "secrets", ns, "training-operator-webhook-cert"),
            f"{TRAINER}:pkg/cert/cert.go@v1.9.4:41 (rbac marker; SecretKey in MY_POD_NAMESPACE)",
        )
        for v in ("get", "update")
    ]
    return needs


def _values(plan: Plan, chart: str) -> dict:
    (release,) = [r for r in plan.of_type(RELEASE) if r.inputs["chart"] == chart]
    return release.inputs["values"]


def volcano_needs(plan: Plan) -> list[Need]:
    custom, ns = _values(plan, "volcano")["custom"], VOLCANO_NAMESPACE
    needs = []
    # --leader-elect=true --leader-elect-resource-namespace=<release ns>: templates/scheduler.yaml:216-218,
    # controllers.yaml:181-186
    if custom.get("leader_elect_enable"):
        for component, server in (
            ("volcano-scheduler", "cmd/scheduler/app/server.go@v1.15.1:126"),
            ("volcano-controllers", "cmd/controller-manager/app/server.go@v1.15.1:106"),
        ):
            needs += [
                Need(
                    component,
                    "custom.leader_elect_enable",
                    Call(v, "coordination.k8s.io", "leases", ns, None if v == "create" else f"{component}-lease"),
                    f"{VOLCANO}:{server} (resourcelock.New, leases: pkg/util/util.go@v1.15.1:77)",
                )
                for v in ("get", "create", "update")
            ]
            needs.append(
                Need(
                    component,
                    "custom.leader_elect_enable",
                    Call("create", "", "events", ns),
                    f"{VOLCANO}:{server.rsplit(':', 1)[0]} (StartRecordingToSink Events(ResourceNamespace))",
                )
            )
    needs += [
        Need(
            "volcano-scheduler",
            "--default-queue (default)",
            Call(v, "scheduling.volcano.sh", "queues", "", "default"),
            f"{VOLCANO}:pkg/scheduler/cache/cache.go@v1.15.1:{line}",
        )
        for v, line in (("get", 467), ("create", 498))
    ]
    if "/podgroups/mutate" in custom.get("enabled_admissions", "").split(","):
        needs.append(
            Need(
                "volcano-admission",
                "custom.enabled_admissions /podgroups/mutate",
                Call("get", "", "namespaces", "", "team-ns"),
                f"{VOLCANO}:pkg/webhooks/admission/podgroups/mutate/mutate_podgroup.go@v1.15.1:108",
            )
        )
    return needs


def autoscaler_needs(plan: Plan) -> list[Need]:
    extra, ns, ca = _values(plan, "cluster-autoscaler").get("extraArgs", {}), autoscaler.NAMESPACE, "cluster-autoscaler"
    main = f"{CA}:cluster-autoscaler/main.go@cluster-autoscaler-1.35.2"
    needs = []
    if str(extra.get("leader-elect", True)).lower() != "false":  # on by default: main.go:467
        lease = extra.get("leader-elect-resource-name", "cluster-autoscaler")  # main.go:472
        needs += [
            Need(
                ca,
                "--leader-elect (default), --namespace=<release ns> (chart deployment.yaml:71)",
                Call(v, "coordination.k8s.io", "leases", ns, None if v == "create" else lease),
                f"{main}:431-433 (resourcelock.New in ConfigNamespace)",
            )
            for v in ("get", "create", "update")
        ]
    if str(extra.get("write-status-configmap", True)).lower() != "false":  # flags.go:155
        status = extra.get("status-config-map-name", "cluster-autoscaler-status")  # flags.go:156
        src = f"{CA}:cluster-autoscaler/clusterstate/utils/status.go@cluster-autoscaler-1.35.2"
        needs += [
            Need(
                ca,
                "--write-status-configmap (default)",
                Call(v, "", "configmaps", ns, None if v == "create" else status),
                f"{src}:{line}",
            )
            for v, line in (("get", 101), ("update", 116), ("create", 130))
        ]
    if "priority" in str(extra.get("expander", "")).split(","):
        src = f"{CA}:cluster-autoscaler/expander/factory/expander_factory.go@cluster-autoscaler-1.35.2:98"
        needs += [
            Need(
                ca,
                "--expander=priority",
                Call(v, "", "configmaps", ns),
                f"{src} (a ConfigMap lister in ConfigNamespace)",
            )
            for v in ("list", "watch")
        ]
    needs += [
        Need(
            ca,
            "scale-down (always)",
            Call("create", "", "pods/eviction", "team-ns"),
            f"{CA}:cluster-autoscaler/core/scaledown/actuation/drain.go@cluster-autoscaler-1.35.2:250 (Pods().Evict)",
        ),
        Need(
            ca,
            "scale-down (always)",
            Call("update", "", "nodes", "", "gpu-node"),
            f"{CA}:cluster-autoscaler/utils/taints/taints.go@cluster-autoscaler-1.35.2:223 "
            "(ToBeDeletedByClusterAutoscaler taint)",
        ),
    ]
    return needs


def device_plugin_needs(plan: Plan) -> list[Need]:
    values, ns = _values(plan, "nvidia-device-plugin"), device_plugins.NAMESPACE
    needs = []
    if values.get("gfd", {}).get("enabled"):
        gfd = f"{NDP}:internal/lm/output.go@v0.19.3"
        needs += [
            Need(
                "gpu-feature-discovery",
                "gfd.enabled (use-node-feature-api defaults to true: "
                "cmd/gpu-feature-discovery/main.go@v0.19.3:101-102)",
                Call(v, "nfd.k8s-sigs.io", "nodefeatures", ns, None if v == "create" else "gpu-node"),
                f"{gfd}:{line}",
            )
            for v, line in (("get", 132), ("create", 147), ("update", 166))
        ]
        needs.append(
            Need(
                "gpu-feature-discovery",
                "gfd.enabled",
                Call("get", "", "pods", ns, "gfd-pod"),
                f"{gfd}:182 (its own pod, owner of the NodeFeature)",
            )
        )
        # NFD comes with GFD (Chart.yaml dependency condition nfd.enabled,gfd.enabled @v0.19.3).
        master = f"{NFD}:pkg/nfd-master/nfd-master.go@v0.17.3"
        needs += [
            Need(
                "nfd-master",
                "-enable-leader-election (always: templates/master.yaml:119)",
                Call(v, "coordination.k8s.io", "leases", ns, None if v == "create" else "nfd-master.nfd.kubernetes.io"),
                f"{master}:1376 (LeaseLock nfd-master.nfd.kubernetes.io)",
            )
            for v in ("get", "create", "update")
        ]
        needs += [
            Need("nfd-master", "node labelling", Call(v, "", "nodes", "", "gpu-node"), f"{master}:{line}")
            for v, line in (("update", 500), ("patch", 524))
        ]
        worker = f"{NFD}:pkg/nfd-worker/nfd-worker.go@v0.17.3"
        needs += [
            Need(
                "nfd-worker",
                "NodeFeature API",
                Call(v, "nfd.k8s-sigs.io", "nodefeatures", ns, None if v == "create" else "gpu-node"),
                f"{worker}:{line}",
            )
            for v, line in (("get", 659), ("create", 674), ("update", 694))
        ]
    return needs


def metrics_server_needs() -> list[Need]:
    src = "kubernetes-sigs/metrics-server:pkg/scraper/client/resource/client.go@v0.8.0:85"
    return [
        Need(
            "metrics-server",
            "kubelet /metrics/resource scrape (always)",
            Call("get", "", "nodes/metrics", "", "gpu-node"),
            f"{src} (the kubelet authorizes it as nodes/metrics)",
        ),
        Need(
            "metrics-server",
            "node and pod informers (always)",
            Call("list", "", "nodes", ""),
            "kubernetes-sigs/metrics-server:pkg/server/config.go@v0.8.0:91",
        ),
        Need(
            "metrics-server",
            "node and pod informers (always)",
            Call("list", "", "pods", "team-ns"),
            "kubernetes-sigs/metrics-server:pkg/server/config.go@v0.8.0:92",
        ),
    ]


def prometheus_adapter_needs(plan: Plan) -> list[Need]:
    if not [r for r in plan.of_type(RELEASE) if r.inputs["chart"] == "prometheus-adapter"]:
        return []
    # Custom metrics (our rules: pods' GPU utilisation for the HPA) by label selector: the adapter lists the
    # objects' names with the dynamic client (ListObjectNames). No resource rules, so no pod/node informers
    # (cmd/adapter/adapter.go@v0.12.0:237); no leader election.
    src = "kubernetes-sigs/prometheus-adapter:pkg/custom-provider/provider.go@v0.12.0:196"
    return [
        Need("prometheus-adapter", "rules.custom (pods)", Call("list", "", "pods", "team-ns"), src),
        Need(
            "prometheus-adapter",
            "rules.custom (namespace overrides)",
            Call("get", "", "namespaces", "", "team-ns"),
            f"{src.rsplit(':', 1)[0]}:84 (helpers.ReferenceFor)",
        ),
    ]


def gate_needs() -> list[Need]:
    src = "higgsfield:images/training/health_gate.py"
    ns = healthgate.NAMESPACE
    return [
        Need(
            "health-gate",
            "gate on its node",
            Call("get", "", "nodes", "", "gpu-node"),
            f"{src}:88 (KubernetesApi.get_node)",
        ),
        Need(
            "health-gate",
            "gate on its node",
            Call("patch", "", "nodes", "", "gpu-node"),
            f"{src}:91 (patch_node: taint and labels)",
        ),
        Need(
            "health-gate",
            "EVENTS_NAMESPACE",
            Call("create", "", "events", healthgate.EVENTS_NAMESPACE),
            f"{src}:94 (create_event)",
        ),
        Need(
            "health-gate",
            "EXPECTATIONS_NAMESPACE",
            Call("get", "", "configmaps", ns, healthgate.expectations_name("h100")),
            f"{src}:97 (get_config_map)",
        ),
    ]


# --- what charts grant (read in each template at the pinned ref) ------------------------------------


@dataclass(frozen=True)
class Grant:
    controller: str
    namespace: str | None  # None: ClusterRole + ClusterRoleBinding; else a Role there
    rule: dict
    source: str  # the template line
    renders: Callable[[dict], bool] = lambda values: True  # under the values we pass

    def scoped(self) -> Scoped:
        return Scoped(self.namespace, self.rule)


def _rule(groups: list[str], resources: list[str], verbs: list[str], names: list[str] | None = None) -> dict:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs, **({"resourceNames": names} if names else {})}


def _ca_cluster_scoped(v: dict) -> bool:
    rbac = v.get("rbac", {})
    return rbac.get("create", True) and rbac.get(
        "clusterScoped", True
    )  # templates/clusterrole.yaml:1; values.yaml rbac.create/clusterScoped default true


def _ca_priority(v: dict) -> bool:
    return "priority" in str(v.get("extraArgs", {}).get("expander", "")).split(
        ","
    )  # _helpers.tpl priorityExpanderEnabled


CHART_GRANTS: tuple[Grant, ...] = (
    # Training Operator: the upstream ClusterRole (kubeflow/trainer:manifests/base/rbac/role.yaml@v1.9.4), the rules the
    # calls above use.
    Grant(
        "training-operator",
        None,
        _rule([""], ["events"], ["create", "delete", "get", "list", "patch", "update", "watch"]),
        f"{TRAINER}:manifests/base/rbac/role.yaml@v1.9.4:16-27",
    ),
    Grant(
        "training-operator",
        None,
        _rule([""], ["secrets"], ["get", "list", "update", "watch"]),
        f"{TRAINER}:manifests/base/rbac/role.yaml@v1.9.4:46-54",
    ),
    Grant(
        "training-operator",
        None,
        _rule(
            ["scheduling.volcano.sh"], ["podgroups"], ["create", "delete", "get", "list", "patch", "update", "watch"]
        ),
        f"{TRAINER}:manifests/base/rbac/role.yaml@v1.9.4:269-280",
    ),
    # Volcano, chart 1.15.1: ClusterRoles bound to each component's ServiceAccount.
    Grant(
        "volcano-scheduler",
        None,
        _rule(["coordination.k8s.io"], ["leases"], ["get", "create", "update", "watch"]),
        f"{VC_CHART}/scheduler.yaml@v1.15.1:110-112",
        lambda v: v["custom"].get("scheduler_enable", True),
    ),
    Grant(
        "volcano-scheduler",
        None,
        _rule([""], ["events"], ["create", "list", "watch", "update", "patch"]),
        f"{VC_CHART}/scheduler.yaml@v1.15.1:53-55",
        lambda v: v["custom"].get("scheduler_enable", True),
    ),
    Grant(
        "volcano-scheduler",
        None,
        _rule(
            ["scheduling.incubator.k8s.io", "scheduling.volcano.sh"],
            ["queues"],
            ["get", "list", "watch", "create", "delete", "update"],
        ),
        f"{VC_CHART}/scheduler.yaml@v1.15.1:89-91",
        lambda v: v["custom"].get("scheduler_enable", True),
    ),
    Grant(
        "volcano-controllers",
        None,
        _rule(["coordination.k8s.io"], ["leases"], ["get", "create", "update", "watch"]),
        f"{VC_CHART}/controllers.yaml@v1.15.1:91-93",
        lambda v: v["custom"].get("controller_enable", True),
    ),
    Grant(
        "volcano-controllers",
        None,
        _rule([""], ["events"], ["create", "list", "watch", "update", "patch"]),
        f"{VC_CHART}/controllers.yaml@v1.15.1:46-48",
        lambda v: v["custom"].get("controller_enable", True),
    ),
    Grant(
        "volcano-admission",
        None,
        _rule([""], ["namespaces"], ["get", "list", "watch"]),
        f'{VC_CHART}/admission.yaml@v1.15.1:66-69 (only with regexMatch "/podgroups/mutate")',
        lambda v: (
            v["custom"].get("admission_enable", True)
            and "/podgroups/mutate" in v["custom"].get("enabled_admissions", "")
        ),
    ),
    # Cluster Autoscaler, chart 9.59.0.
    Grant(
        "cluster-autoscaler",
        None,
        _rule(["coordination.k8s.io"], ["leases"], ["create"]),
        f"{CA_CHART}/clusterrole.yaml@cluster-autoscaler-chart-9.59.0:170-175",
        _ca_cluster_scoped,
    ),
    Grant(
        "cluster-autoscaler",
        None,
        _rule(["coordination.k8s.io"], ["leases"], ["get", "update"], ["cluster-autoscaler"]),
        f"{CA_CHART}/clusterrole.yaml@cluster-autoscaler-chart-9.59.0:176-184",
        _ca_cluster_scoped,
    ),
    Grant(
        "cluster-autoscaler",
        None,
        _rule([""], ["pods/eviction"], ["create"]),
        f"{CA_CHART}/clusterrole.yaml@cluster-autoscaler-chart-9.59.0:34-39",
        _ca_cluster_scoped,
    ),
    Grant(
        "cluster-autoscaler",
        None,
        _rule([""], ["nodes"], ["watch", "list", "get", "update"]),
        f"{CA_CHART}/clusterrole.yaml@cluster-autoscaler-chart-9.59.0:55-63",
        _ca_cluster_scoped,
    ),
    Grant(
        "cluster-autoscaler",
        autoscaler.NAMESPACE,
        _rule([""], ["configmaps"], ["create"]),
        f"{CA_CHART}/role.yaml@cluster-autoscaler-chart-9.59.0:16-25",
        lambda v: v.get("rbac", {}).get("create", True),
    ),
    Grant(
        "cluster-autoscaler",
        autoscaler.NAMESPACE,
        _rule([""], ["configmaps"], ["delete", "get", "update"], ["cluster-autoscaler-status"]),
        f"{CA_CHART}/role.yaml@cluster-autoscaler-chart-9.59.0:26-41",
        lambda v: v.get("rbac", {}).get("create", True),
    ),
    Grant(
        "cluster-autoscaler",
        autoscaler.NAMESPACE,
        _rule([""], ["configmaps"], ["list", "watch"]),
        f"{CA_CHART}/role.yaml@cluster-autoscaler-chart-9.59.0:22-25 (with priorityExpanderEnabled)",
        _ca_priority,
    ),
    # NVIDIA device plugin 0.19.3 with GFD, and its NFD 0.17.3 subchart (templates unchanged from v0.19.0 but for the
    # role/binding/service account, now always rendered: `git diff v0.19.0 v0.19.3 -- deployments/helm`).
    Grant(
        "gpu-feature-discovery",
        None,
        _rule(["nfd.k8s-sigs.io"], ["nodefeatures"], ["get", "list", "watch", "create", "update"]),
        f"{NDP_CHART}/role.yml@v0.19.3:13-15",
        lambda v: v.get("gfd", {}).get("enabled", False),
    ),
    Grant(
        "gpu-feature-discovery",
        None,
        _rule([""], ["pods"], ["get"]),
        f"{NDP_CHART}/role.yml@v0.19.3:16-18",
        lambda v: v.get("gfd", {}).get("enabled", False),
    ),
    Grant(
        "nfd-master",
        None,
        _rule(["coordination.k8s.io"], ["leases"], ["create"]),
        f"{NFD_CHART}/clusterrole.yaml:43-48)",
    ),
    Grant(
        "nfd-master",
        None,
        _rule(["coordination.k8s.io"], ["leases"], ["get", "update"], ["nfd-master.nfd.kubernetes.io"]),
        f"{NFD_CHART}/clusterrole.yaml:49-57)",
    ),
    Grant(
        "nfd-master",
        None,
        _rule([""], ["nodes", "nodes/status"], ["get", "patch", "update", "list"]),
        f"{NFD_CHART}/clusterrole.yaml:16-25)",
    ),
    Grant(
        "nfd-worker",
        device_plugins.NAMESPACE,
        _rule(["nfd.k8s-sigs.io"], ["nodefeatures"], ["create", "get", "update", "delete"]),
        f"{NFD_CHART}/role.yaml:10-18)",
    ),
    # prometheus-adapter chart 5.3.0.
    Grant(
        "prometheus-adapter",
        None,
        _rule([""], ["namespaces", "pods", "services", "configmaps"], ["get", "list", "watch"]),
        "prometheus-community/helm-charts:charts/prometheus-adapter/templates/cluster-role-resource-reader.yaml@prometheus-adapter-5.3.0:13-23",
        lambda v: v.get("rbac", {}).get("create", True),
    ),
    # metrics-server chart 3.13.0.
    Grant(
        "metrics-server",
        None,
        _rule([""], ["nodes/metrics"], ["get"]),
        f"{MS_CHART}/clusterrole.yaml@metrics-server-helm-chart-3.13.0:9-14",
    ),
    Grant(
        "metrics-server",
        None,
        _rule([""], ["pods", "nodes", "namespaces", "configmaps"], ["get", "list", "watch"]),
        f"{MS_CHART}/clusterrole.yaml@metrics-server-helm-chart-3.13.0:15-26",
    ),
)
CHART_OF = {
    "volcano-scheduler": "volcano",
    "volcano-controllers": "volcano",
    "volcano-admission": "volcano",
    "cluster-autoscaler": "cluster-autoscaler",
    "gpu-feature-discovery": "nvidia-device-plugin",
    "nfd-master": "nvidia-device-plugin",
    "nfd-worker": "nvidia-device-plugin",
    "metrics-server": "metrics-server",
    "prometheus-adapter": "prometheus-adapter",
}


def chart_rules(plan: Plan, controller: str) -> list[Scoped]:
    chart = CHART_OF.get(controller)
    values = _values(plan, chart) if chart else {}
    return [g.scoped() for g in CHART_GRANTS if g.controller == controller and g.renders(values)]


def _operator_objects() -> list[dict]:
    return [o for o in yaml.safe_load_all((KUSTOMIZATION / "leader-election-rbac.yaml").read_text()) if o]


def operator_rules() -> list[Scoped]:
    """Ours (the kustomization's Role, as bound) and the upstream ClusterRole's cited rules."""
    ours = rules_for(_operator_objects(), versions.TRAINING_OPERATOR_NAMESPACE, "training-operator")
    return ours + [g.scoped() for g in CHART_GRANTS if g.controller == "training-operator"]


def gate_rules(plan: Plan) -> list[Scoped]:
    objects = [r.inputs for r in plan.resources if r.type.startswith("kubernetes:rbac.authorization.k8s.io/")]
    return rules_for(objects, healthgate.NAMESPACE, healthgate.SERVICE_ACCOUNT)


def _all_needs(plan: Plan) -> list[Need]:
    return (
        operator_needs()
        + volcano_needs(plan)
        + autoscaler_needs(plan)
        + device_plugin_needs(plan)
        + metrics_server_needs()
        + prometheus_adapter_needs(plan)
        + (gate_needs() if plan.config.gpu_pools and any(p.health_gate.enabled for p in plan.config.gpu_pools) else [])
    )


def _rules(plan: Plan, controller: str) -> list[Scoped]:
    if controller == "training-operator":
        return operator_rules()
    if controller == "health-gate":
        return gate_rules(plan)
    return chart_rules(plan, controller)


# --- the tests -------------------------------------------------------------------------------------


def test_every_controllers_flags_imply_calls_its_rbac_grants(plan):
    missing = [
        f"{n.controller}: {n.call} (needed for {n.because}, {n.source})"
        for n in _all_needs(plan)
        if not allows(_rules(plan, n.controller), n.call)
    ]
    assert not missing, "\n".join(missing)


def test_every_need_cites_the_upstream_line_that_makes_the_call(plan):
    for need in _all_needs(plan):
        assert ":" in need.source and ("@" in need.source or need.source.startswith("higgsfield:")), need


def test_operator_rbac_grants_the_leases_its_leader_election_takes():
    rules, ns = operator_rules(), versions.TRAINING_OPERATOR_NAMESPACE
    lease = _flag(_operator_args(), "leader-election-id", "")
    assert lease == versions.TRAINING_OPERATOR_LEADER_ELECTION_ID
    for verb in ("get", "update"):
        assert allows(rules, Call(verb, "coordination.k8s.io", "leases", ns, lease))
    assert allows(rules, Call("create", "coordination.k8s.io", "leases", ns))


def test_upstream_operator_cluster_role_alone_would_never_start_the_controllers():
    upstream = [g.scoped() for g in CHART_GRANTS if g.controller == "training-operator"]
    lease = versions.TRAINING_OPERATOR_LEADER_ELECTION_ID
    assert not allows(
        upstream, Call("get", "coordination.k8s.io", "leases", versions.TRAINING_OPERATOR_NAMESPACE, lease)
    )


def test_operator_leader_election_role_is_bound_to_the_upstream_service_account_in_its_namespace():
    (binding,) = [o for o in _operator_objects() if o["kind"] == "RoleBinding"]
    # manifests/base/rbac/service-account.yaml@v1.9.4 names it training-operator; the standalone overlay's namespace is
    # kubeflow.
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "training-operator", "namespace": versions.TRAINING_OPERATOR_NAMESPACE}
    ]
    assert all(o["metadata"]["namespace"] == versions.TRAINING_OPERATOR_NAMESPACE for o in _operator_objects())


@pytest.mark.parametrize(
    "attack",
    [
        Call("update", "coordination.k8s.io", "leases", "kubeflow", "some-other-controller-lease"),  # resourceNames
        Call("get", "coordination.k8s.io", "leases", "kubeflow", "another-lease"),  # resourceNames
        Call("update", "coordination.k8s.io", "leases", "kube-system", "cluster-autoscaler"),  # Role namespace
        Call("create", "coordination.k8s.io", "leases", "volcano-system"),  # Role namespace
        Call("delete", "coordination.k8s.io", "leases", "kubeflow", "1ca428e5.training-operator.kubeflow.org"),  # verbs
        Call("list", "coordination.k8s.io", "leases", "kubeflow"),  # verbs
    ],
)
def test_operator_leader_election_role_grants_nothing_beside_its_own_lease(attack):
    ours = rules_for(_operator_objects(), versions.TRAINING_OPERATOR_NAMESPACE, "training-operator")
    assert not allows(ours, attack)


def test_autoscaler_values_keep_the_lease_and_status_names_its_chart_grants(plan):
    # The chart grants the lease and status ConfigMap by name (clusterrole.yaml:176-183, role.yaml:26-40):
    # overriding the names, the lock kind or the namespace in extraArgs would leave them ungranted.
    extra = _values(plan, "cluster-autoscaler").get("extraArgs", {})
    assert not {
        "leader-elect-resource-name",
        "leader-elect-resource-lock",
        "status-config-map-name",
        "namespace",
    } & set(extra)
    (release,) = [r for r in plan.of_type(RELEASE) if r.inputs["chart"] == "cluster-autoscaler"]
    assert release.inputs["namespace"] == autoscaler.NAMESPACE


def test_efa_device_plugin_needs_and_gets_no_api_access(plan):
    # The EFA device plugin talks only to the kubelet (device plugin gRPC); its chart has no RBAC
    # template and runs with automountServiceAccountToken: false
    # (aws/eks-charts:stable/aws-efa-k8s-device-plugin/templates/daemonset.yaml@5239609:33).
    efa = [r for r in plan.of_type(RELEASE) if r.inputs["chart"] == "aws-efa-k8s-device-plugin"]
    assert all("rbac" not in r.inputs["values"] and "serviceAccount" not in r.inputs["values"] for r in efa)


@pytest.mark.parametrize(
    "attack",
    [
        Call("delete", "", "nodes", "", "gpu-node"),  # verbs: only get/patch on nodes
        Call("update", "", "nodes", "", "gpu-node"),  # verbs
        Call("get", "", "secrets", healthgate.NAMESPACE, "anything"),  # resources
        Call("create", "", "events", "kube-system"),  # Role namespace: events only in default
        Call("get", "", "configmaps", "kube-system", "aws-auth"),  # Role namespace: configmaps only in its own
        Call("create", "", "pods/eviction", "team-ns"),  # resources
    ],
)
def test_health_gate_rbac_grants_nothing_beside_what_the_gate_calls(plan, attack):
    if not any(p.health_gate.enabled for p in plan.config.gpu_pools):
        pytest.skip("no gated pool")
    assert not allows(gate_rules(plan), attack)
