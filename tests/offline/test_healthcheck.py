"""The GPU health check: its verdicts on CPU-side inputs (parsing, thresholds, EFA, Lustre),
the objects rendered for a pool, and its GPU measurements when a GPU is present."""

from __future__ import annotations

import json

import node_check
import pytest
from node_check import Expectations, Gpu

from infra.config import ConfigError
from infra.offline import healthcheck, jobs, kubernetes_schema
from tests.conftest import ROOT, plan_of

SMI = """NVIDIA H100 80GB HBM3, 580.95.05, 81559
NVIDIA H100 80GB HBM3, 580.95.05, 81559
"""
EXPECT = Expectations(
    gpus=2,
    model="H100",
    min_driver_branch=570,
    efa_devices=32,
    min_matmul_fraction=0.6,
    min_memory_bandwidth_fraction=0.7,
    min_lustre_mb_s=200,
    min_bus_bandwidth_gb_s=50,
)
H100 = [Gpu("NVIDIA H100 80GB HBM3", "580.95.05", 81559)] * 2


def _failed(report) -> list[str]:
    return [r.check for r in report.results if not r.ok]


def test_nvidia_smi_rows_are_parsed_into_gpus():
    assert node_check.parse_nvidia_smi(SMI) == H100


def test_gpu_model_is_read_from_the_marketing_name():
    assert node_check.model_of("NVIDIA A100-SXM4-40GB") == "A100"
    assert node_check.model_of("NVIDIA L40S") == "L40S"
    assert node_check.model_of("Tesla T4") is None


def test_a_node_meeting_every_threshold_is_healthy():
    report = node_check.evaluate("n1", H100, EXPECT, tflops=[700, 720], memory=[3000, 3100], efa=32, lustre=(900, 1200))
    assert report.healthy and _failed(report) == []


def test_a_missing_gpu_makes_the_node_unhealthy():
    assert _failed(node_check.evaluate("n1", H100[:1], EXPECT)) == ["GPU count"]


def test_a_driver_older_than_the_images_cuda_needs_fails():
    gpus = [Gpu("NVIDIA H100 80GB HBM3", "565.57.01", 81559)] * 2
    assert _failed(node_check.evaluate("n1", gpus, EXPECT)) == ["NVIDIA driver"]


def test_matmul_below_the_fraction_of_peak_fails_on_the_slowest_gpu():
    report = node_check.evaluate("n1", H100, EXPECT, tflops=[800, 500])  # 500 / 989 = 51% < 60%
    assert _failed(report) == ["bf16 matmul"]
    assert "51% of peak" in report.results[-1].value


def test_memory_bandwidth_threshold_is_a_fraction_of_the_model_peak():
    assert _failed(node_check.evaluate("n1", H100, EXPECT, memory=[2300])) == ["memory bandwidth"]  # 69% of 3350
    assert _failed(node_check.evaluate("n1", H100, EXPECT, memory=[2400])) == []  # 72%


def test_no_gpu_measurements_at_all_is_unhealthy_not_skipped():
    assert set(_failed(node_check.evaluate("n1", H100, EXPECT, tflops=[], memory=[]))) == {
        "bf16 matmul",
        "memory bandwidth",
    }


def test_fewer_efa_devices_than_the_pool_promises_fails():
    assert _failed(node_check.evaluate("n1", H100, EXPECT, efa=31)) == ["EFA devices"]


def test_efa_devices_are_counted_from_sysfs(tmp_path):
    for i in range(4):
        (tmp_path / f"rdmap{i}s0").mkdir()
    assert node_check.efa_devices(tmp_path) == 4
    assert node_check.efa_devices(tmp_path / "absent") == 0


def test_lustre_check_writes_and_reads_a_real_file(tmp_path):
    write, read = node_check.lustre_mb_s(tmp_path, megabytes=8)
    assert write > 0 and read > 0
    assert list(tmp_path.iterdir()) == []  # cleaned up


def test_slow_lustre_fails_on_the_slower_direction():
    assert _failed(node_check.evaluate("n1", H100, EXPECT, lustre=(900, 150))) == ["Lustre write/read"]


def test_bus_bandwidth_follows_the_nccl_tests_formula():
    # 1 GiB in 0.01 s over 16 ranks: algbw 107.4 GB/s x 2*15/16
    assert node_check.bus_bandwidth_gb_s(2**30, 0.01, 16) == pytest.approx(2**30 / 0.01 * 30 / 16 / 1e9)


def test_report_is_a_table_and_one_json_line():
    report = node_check.evaluate("ip-10-0-0-1", H100[:1], EXPECT)
    assert report.table().startswith("node ip-10-0-0-1: UNHEALTHY")
    data = json.loads(report.json())
    assert data["healthy"] is False and data["results"][0]["check"] == "GPU count"


def test_expectations_come_from_the_job_environment():
    env = {
        "EXPECTED_GPUS": "8",
        "EXPECTED_GPU_MODEL": "H100",
        "MIN_DRIVER_BRANCH": "570",
        "EXPECTED_EFA_DEVICES": "32",
        "MIN_MATMUL_FRACTION": "0.6",
        "MIN_MEMORY_BANDWIDTH_FRACTION": "0.7",
        "MIN_LUSTRE_MBPS": "200",
        "MIN_BUS_BANDWIDTH_GBPS": "50",
        "LUSTRE_PATH": "",
    }
    expected = Expectations.from_env(env)
    assert (expected.gpus, expected.efa_devices, expected.lustre_path) == (8, 32, None)


# --- rendered objects ---------------------------------------------------------------------------


@pytest.fixture(params=[("prod", "h100"), ("staging", "a100"), ("dev", "l40s")], ids=lambda p: f"{p[0]}-{p[1]}")
def rendered(request):
    stack, pool = request.param
    cfg = plan_of(stack).config
    return cfg, pool, healthcheck.render(cfg, pool)


def test_rendered_objects_validate_against_the_kubernetes_schema(rendered):
    """The built-in kinds against the stack's Kubernetes, the NCCL PyTorchJob against its pinned CRD (what the API
    server would prune or refuse) and its pod templates again as Pods of the stack's version, as `check` does."""
    cfg, _, objects = rendered
    for obj in objects:
        assert kubernetes_schema.problem(obj, cfg.kubernetes_version) is None, obj["kind"]
        if obj["kind"] == "PyTorchJob":
            for template in jobs.pod_templates(obj):
                pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": template["spec"]}
                assert kubernetes_schema.problem(pod, cfg.kubernetes_version) is None


def test_one_check_pod_per_node_of_the_pool_with_all_its_gpus(rendered):
    cfg, pool_name, objects = rendered
    (job,) = [o for o in objects if o["kind"] == "Job"]
    pod = job["spec"]["template"]["spec"]
    (pool,) = [p for p in cfg.gpu_pools if p.name == pool_name]
    assert pod["nodeSelector"] == {"higgsfield.io/pool": pool_name}
    assert (
        pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"]
        == "kubernetes.io/hostname"
    )
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == pool.gpus_per_node
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]


def test_thresholds_and_expectations_come_from_the_stack(rendered):
    cfg, pool_name, objects = rendered
    (job,) = [o for o in objects if o["kind"] == "Job"]
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    (pool,) = [p for p in cfg.gpu_pools if p.name == pool_name]
    assert env["EXPECTED_GPU_MODEL"] == pool.instance.gpu_model
    assert float(env["MIN_MATMUL_FRACTION"]) == cfg.observability.health.min_matmul_fraction
    assert int(env["EXPECTED_EFA_DEVICES"]) == (pool.instance.efa_max_interfaces if pool.efa else 0)
    assert env["LUSTRE_PATH"] == ("/fsx" if cfg.fsx.enabled else "")


def test_the_program_in_the_config_map_is_the_tested_one(rendered):
    _, _, objects = rendered
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap"]
    assert config_map["data"]["node_check.py"] == (ROOT / "images" / "training" / "node_check.py").read_text()


def test_multi_node_pools_also_get_an_nccl_allreduce_job(rendered):
    _, _, objects = rendered
    (nccl,) = [o for o in objects if o["kind"] == "PyTorchJob"]
    worker = nccl["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert nccl["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == worker["replicas"] >= 2
    assert "--allreduce" in worker["template"]["spec"]["containers"][0]["command"]


def test_health_check_render_rejects_an_unknown_pool(capsys, monkeypatch):
    from infra.cli.main import main

    monkeypatch.chdir(ROOT)
    assert main(["healthcheck", "render", "dev", "h100"]) == 2
    assert capsys.readouterr().err.startswith("error: POOL: no pool 'h100' in stack dev")


def _cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


@pytest.mark.skipif(_cuda() is None, reason="needs PyTorch with a CUDA GPU")
def test_gpu_measurements_reach_a_sane_fraction_of_peak():
    torch = _cuda()
    device = torch.device("cuda", 0)
    model = node_check.model_of(torch.cuda.get_device_name(0))
    tflops = node_check.matmul_tflops(torch, device, size=4096, iterations=20)
    memory = node_check.memory_gb_s(torch, device, megabytes=512, iterations=10)
    assert tflops > 0 and memory > 0
    if model:
        assert 0.2 < tflops / node_check.PEAKS[model]["bf16_tflops"] < 1.2
        assert 0.2 < memory / node_check.PEAKS[model]["memory_gb_s"] < 1.2


# `fi_info -p efa -t FI_EP_RDM` on an instance with EFA, in the shape the EC2 user guide shows when it
# asks to confirm the EFA software components ("Get started with EFA and MPI", step "fi_info -p efa").
FI_INFO = """provider: efa
    fabric: efa
    domain: rdmap16s27-rdm
    version: 122.0
    type: FI_EP_RDM
    protocol: FI_PROTO_EFA
provider: efa
    fabric: efa
    domain: rdmap32s27-rdm
    version: 122.0
    type: FI_EP_RDM
    protocol: FI_PROTO_EFA
"""


def test_libfabric_endpoints_of_the_efa_provider_are_counted():
    assert node_check.efa_provider_endpoints(FI_INFO) == 2
    assert node_check.efa_provider_endpoints("fi_getinfo: -61 (No data available)\n") == 0


def test_efa_devices_libfabric_cannot_open_fail_the_node():
    report = node_check.evaluate("n1", H100, EXPECT, efa=32, efa_endpoints=0)
    assert _failed(report) == ["libfabric efa provider"]


def test_the_check_job_names_a_class_the_teams_plain_gpu_quota_counts():
    cfg = plan_of("prod").config
    job = next(o for o in healthcheck.render(cfg, "h100", team="vision") if o["kind"] == "Job")
    assert job["spec"]["template"]["spec"]["priorityClassName"] == "evaluation"


def test_a_team_without_an_evaluation_or_serving_class_is_named():
    cfg = plan_of("prod").config
    vision = next(t for t in cfg.scheduler.teams if t.name == "vision")
    teams = [
        t if t is not vision else t.model_copy(update={"priority_classes": ["batch-low"]}) for t in cfg.scheduler.teams
    ]
    cfg = cfg.model_copy(update={"scheduler": cfg.scheduler.model_copy(update={"teams": teams})})
    with pytest.raises(ConfigError, match=r"teams\[2\]\.priorityClasses.*no evaluation or serving class"):
        healthcheck.render(cfg, "h100", team="vision")
