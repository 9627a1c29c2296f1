"""Every image in the cluster is pinned: ours, the charts', and the ones controllers pull by default.

"Pinned" is a digest (`@sha256:` and 64 hex digits) or a fixed tag (not empty, not `latest`).
The test walks every image reference the plan makes: what each chart renders with the values we
pass (the chart's own default, read in its values.yaml/templates at the pinned version and cited
in CHART_IMAGES, or our override), every container of the objects we render, the images the
Training Operator injects into team pods (its flags in our kustomization), and every *_IMAGE pin in
infra/core/versions.py. What the charts render can only be confirmed with helm itself (no network
here): `helm template <release> <repo>/<chart> --version <v> -f values.json | grep -E 'image:'`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import yaml

from components.registry import image_tag
from components.training import KUSTOMIZATION
from infra.core import versions
from infra.offline.evaluate import Plan
from infra.offline.rendered import DIGEST, images_of, pinned, problems

RELEASE = "kubernetes:helm.sh/v3:Release"


@pytest.mark.parametrize(
    "image,ok",
    [
        ("alpine:3.10", True),
        ("alpine", False),
        ("grafana/grafana:latest", False),
        ("prom/prometheus", False),
        ("ghcr.io/kubeflow/training-v1/kubectl-delivery:latest", False),
        ("registry:5000/x", False),
        ("docker.io/library/alpine:3.22.2@sha256:" + "a" * 64, True),
        ("repo/x:<tag>", False),
    ],
)
def test_pinned_means_a_digest_or_a_fixed_tag(image, ok):
    assert pinned(image) is ok


def _get(values: dict, *path: str, default=None):
    for key in path:
        if not isinstance(values, dict) or key not in values:
            return default
        values = values[key]
    return values


# What each chart renders with our values: (images, the upstream lines that decide them).
CHART_IMAGES: dict[str, Callable[[dict], list[str]]] = {
    # values.yaml@cluster-autoscaler-chart-9.59.0:302-306 image.repository/tag (default tag v1.35.0);
    # deployment.yaml:63.
    "cluster-autoscaler": lambda v: [
        f"registry.k8s.io/autoscaling/cluster-autoscaler:{_get(v, 'image', 'tag', default='v1.35.0')}"
    ],
    # volcano values.yaml@v1.15.1:1-22 (docker.io/volcanosh/vc-*, image_tag_version); scheduler.yaml:198,
    # controllers.yaml:174,
    # admission.yaml:156, admission-init.yaml:110. grafana.yaml:96 grafana/grafana:latest, prometheus.yaml:226
    # prom/prometheus and
    # kubestatemetrics.yaml:175 render only with custom.metrics_enable; agent/agent-scheduler only when enabled.
    "volcano": lambda v: (
        [
            f"{_get(v, 'basic', 'image_registry', default='docker.io')}/"
            f"{_get(v, 'basic', key, default='volcanosh/' + name)}:"
            f"{_get(v, 'basic', 'image_tag_version', default='v1.15.1')}"
            for key, name in (
                ("controller_image_name", "vc-controller-manager"),
                ("scheduler_image_name", "vc-scheduler"),
                ("admission_image_name", "vc-webhook-manager"),
            )
        ]
        + (
            ["grafana/grafana:latest", "prom/prometheus", "docker.io/volcanosh/kube-state-metrics:v2.0.0-beta"]
            if _get(v, "custom", "metrics_enable", default=False)
            else []
        )
        + (["docker.io/volcanosh/vc-agent:<unset>"] if _get(v, "custom", "colocation_enable", default=False) else [])
    ),
    # NVIDIA/k8s-device-plugin values.yaml@v0.19.3 image.repository, tag "" -> v{appVersion} (_helpers.tpl:83-85); NFD
    # subchart
    # 0.17.3: registry.k8s.io/nfd/node-feature-discovery, tag | default .Chart.AppVersion v0.17.3
    # (templates/master.yaml:48, worker.yaml:47).
    "nvidia-device-plugin": lambda v: (
        [f"nvcr.io/nvidia/k8s-device-plugin:{_get(v, 'image', 'tag') or 'v0.19.3'}"]
        + (
            [f"registry.k8s.io/nfd/node-feature-discovery:{_get(v, 'nfd', 'image', 'tag') or 'v0.17.3'}"]
            if _get(v, "gfd", "enabled") or _get(v, "nfd", "enabled")
            else []
        )
    ),
    # aws/eks-charts:stable/aws-efa-k8s-device-plugin/values.yaml@5239609 image.repository/tag v0.5.20;
    # templates/daemonset.yaml:66.
    "aws-efa-k8s-device-plugin": lambda v: [
        "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:"
        + (_get(v, "image", "tag") or "v0.5.20")
    ],
    # metrics-server values.yaml@metrics-server-helm-chart-3.13.0:5-8 (tag "" -> v{appVersion} 0.8.0,
    # _helpers.tpl:70-72);
    # addon-resizer (1.8.23) only with addonResizer.enabled (values.yaml:130-131, default false).
    "metrics-server": lambda v: (
        [f"registry.k8s.io/metrics-server/metrics-server:{_get(v, 'image', 'tag') or 'v0.8.0'}"]
        + (["registry.k8s.io/autoscaling/addon-resizer:1.8.23"] if _get(v, "addonResizer", "enabled") else [])
    ),
    # NVIDIA/dcgm-exporter:deployment/values.yaml@4.5.3-4.8.2:16-20 (tag 4.5.3-4.8.2-distroless);
    # templates/daemonset.yaml:117.
    "dcgm-exporter": lambda v: [
        f"nvcr.io/nvidia/k8s/dcgm-exporter:{_get(v, 'image', 'tag') or '4.5.3-4.8.2-distroless'}"
    ],
    # prometheus-community/helm-charts:charts/prometheus-adapter/values.yaml@prometheus-adapter-5.3.0:11-14 (tag "" ->
    # appVersion v0.12.0);
    # templates/deployment.yaml:55.
    "prometheus-adapter": lambda v: [
        f"registry.k8s.io/prometheus-adapter/prometheus-adapter:{_get(v, 'image', 'tag') or 'v0.12.0'}"
    ],
    # kube-prometheus-stack: read at 88.5.3 (the pinned 88.6.5 is newer than the stored snapshot): every image a fixed
    # tag or the
    # chart's appVersion, except crds.upgradeJob's busybox "latest" (values.yaml@kube-prometheus-stack-88.5.3:44-48),
    # rendered only
    # with crds.upgradeJob.enabled (default false). Its grafana/kube-state-metrics/node-exporter subcharts are not read
    # here.
    "kube-prometheus-stack": lambda v: ["docker.io/busybox:latest"] if _get(v, "crds", "upgradeJob", "enabled") else [],
}


def _releases(plan: Plan):
    return [(r.inputs["chart"], r.inputs["values"]) for r in plan.of_type(RELEASE)]


def test_every_chart_we_install_has_its_images_accounted_for(plan):
    assert {chart for chart, _ in _releases(plan)} <= set(CHART_IMAGES)


def test_every_image_a_chart_renders_with_our_values_is_pinned(plan):
    unpinned = [
        (chart, image)
        for chart, values in _releases(plan)
        for image in CHART_IMAGES[chart](values)
        if not pinned(image)
    ]
    assert not unpinned


def test_our_chart_values_set_no_unpinned_image(plan):
    def walk(value, path):
        if isinstance(value, dict):
            for k, v in value.items():
                yield from walk(v, f"{path}.{k}")
        elif isinstance(value, str) and (
            re.search(r"(^|/)[\w.-]+:latest$", value) or path.endswith(".tag") and value in ("", "latest")
        ):
            yield path, value

    assert not [hit for chart, values in _releases(plan) for hit in walk(values, chart)]


def test_volcano_image_tag_is_the_pinned_one_and_its_own_monitoring_stays_off(plan):
    (values,) = [v for c, v in _releases(plan) if c == "volcano"]
    assert values["basic"]["image_tag_version"] == versions.VOLCANO_IMAGE_TAG == f"v{versions.VOLCANO.version}"
    assert values["custom"]["metrics_enable"] is False  # grafana/grafana:latest, prom/prometheus otherwise


def test_volcano_images_come_from_ghcr_and_are_pulled_only_when_missing(plan):
    """docker.io limits anonymous pulls per address (a NAT gateway's nodes share one), and with the
    chart's `Always` a registry outage keeps a restarted scheduler from starting."""
    (values,) = [v for c, v in _releases(plan) if c == "volcano"]
    images = CHART_IMAGES["volcano"](values)
    assert images and all(i.startswith("ghcr.io/volcano-sh/vc-") for i in images), images
    assert values["basic"]["image_pull_policy"] == "IfNotPresent"


def _containers(spec: dict):
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def test_every_container_we_render_runs_a_pinned_image(plan):
    images = []
    for r in plan.resources:
        template = (
            ((r.inputs.get("spec") or {}).get("template") or {}).get("spec")
            if r.type.startswith("kubernetes:")
            else None
        )
        for c in _containers(template or {}):
            images.append((r.name, c["image"]))
    assert images
    for name, image in images:
        if image == "<computed>":  # the stack's ECR repository at this checkout's image tag
            # the health gate (one per gated pool), its reboot check, the EFA counters' exporter and the
            # job watchdog run it
            ours = name.startswith("health-gate-daemonset-") or name in (
                "health-gate-reboot-check",
                "monitoring-efa-exporter",
                "job-watchdog-deployment",
            )
            assert ours and pinned(f"repo/training:{image_tag()}"), name
        else:
            assert pinned(image), (name, image)


def _operator_args() -> list[str]:
    (patch,) = yaml.safe_load((KUSTOMIZATION / "kustomization.yaml").read_text())["patches"]
    (container,) = yaml.safe_load(patch["patch"])["spec"]["template"]["spec"]["containers"]
    return container["args"]


def test_operator_injects_pinned_images_into_team_pods():
    # Without these flags the operator puts alpine:3.10 (PyTorchJob init container) and
    # kubectl-delivery:latest (MPIJob launcher) into team namespaces
    # (kubeflow/trainer:pkg/config/config.go@v1.9.4; flags in cmd/training-operator.v1/main.go@v1.9.4:104, 112).
    flags = dict(a[2:].split("=", 1) for a in _operator_args() if "=" in a)
    assert flags["pytorch-init-container-image"] == versions.PYTORCH_INIT_CONTAINER_IMAGE
    assert flags["mpi-kubectl-delivery-image"] == versions.MPI_KUBECTL_DELIVERY_IMAGE
    assert all(pinned(flags[f]) for f in ("pytorch-init-container-image", "mpi-kubectl-delivery-image"))


def test_every_image_pin_in_versions_is_pinned_and_has_provenance():
    images = {
        name: value for name, value in vars(versions).items() if name.endswith("_IMAGE") and isinstance(value, str)
    }
    # (no LUSTRE_LAYOUT_IMAGE: the Lustre layout runs on an EC2 layout client, components/storage.py)
    assert {"PYTORCH_INIT_CONTAINER_IMAGE", "MPI_KUBECTL_DELIVERY_IMAGE", "TRAINING_OPERATOR_IMAGE"} <= set(images)
    sources = versions.sources()
    for name, image in images.items():
        if "/" in image or ":" in image:  # container images (not e.g. the CodeBuild image name)
            assert pinned(image), name
        assert name in sources, name


def test_the_init_image_pin_is_by_digest():
    # The one image with a digest available: pinned by it, so a retag upstream cannot change it.
    assert DIGEST.search(versions.PYTORCH_INIT_CONTAINER_IMAGE)


def test_the_online_check_flags_an_unpinned_image_in_what_helm_renders():
    rendered = [
        {
            "kind": "Deployment",
            "metadata": {"name": "grafana", "namespace": "volcano-system"},
            "spec": {"template": {"spec": {"containers": [{"name": "g", "image": "grafana/grafana:latest"}]}}},
        },
        {
            "kind": "CronJob",
            "metadata": {"name": "c"},
            "spec": {
                "jobTemplate": {"spec": {"template": {"spec": {"initContainers": [{"name": "i", "image": "busybox"}]}}}}
            },
        },
    ]
    assert [image for _, image in images_of(rendered)] == ["grafana/grafana:latest", "busybox"]
    assert len(problems(rendered)) == 2


def test_the_online_check_passes_our_operator_rbac_and_fails_without_it():
    ours = [o for o in yaml.safe_load_all((KUSTOMIZATION / "leader-election-rbac.yaml").read_text()) if o]
    account = {
        "kind": "ServiceAccount",
        "metadata": {"name": "training-operator", "namespace": "kubeflow"},
    }  # manifests/base/rbac/service-account.yaml@v1.9.4
    assert problems([account, *ours]) == []
    assert len(problems([account])) == 3  # the upstream overlay alone: no lease get, update or create
