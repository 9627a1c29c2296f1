"""Jobs that use EFA use it: over every shipped stack, every container that requests EFA
interfaces (example jobs on every pool, health checks of every pool) runs the stack's training
image with the EFA environment; none on a non-EFA pool does; pods are sized to their node; bad
images and templates are rejected naming the key."""

from __future__ import annotations

import shutil

import pytest

from components.efa import EFA_POD_HUGEPAGES_MI, NCCL_SOCKET_IFNAME, efa_environment, efa_resources
from infra.config import ConfigError
from infra.core import versions
from infra.core.catalog import InstanceFacts
from infra.offline import healthcheck, jobs, pods
from infra.offline.pods import mebibytes
from tests.conftest import ROOT, STACKS, config_of, plan_of

EFA = "vpc.amazonaws.com/efa"
STOCK_IMAGE = "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"


def _shipped(stack: str) -> list[tuple[str, object]]:
    """(what, pool) of every example on every pool it runs on, and every pool's health check."""
    cfg = config_of(stack)
    out = []
    for pool in cfg.gpu_pools:
        for example in jobs.examples_for(cfg):
            if example == "mpi-nccl-tests" and not pool.efa:
                continue
            out.append((f"{example}@{pool.name}", pool))
        out.append((f"healthcheck@{pool.name}", pool))
    return out


def _objects(stack: str, what: str) -> list[dict]:
    """What `what` renders to (rendered when a test asks, not when the module is collected)."""
    example, pool = what.split("@")
    cfg = config_of(stack)
    return healthcheck.render(cfg, pool) if example == "healthcheck" else jobs.render(example, cfg, pool=pool)


RENDERED = [(stack, what, pool) for stack in STACKS for what, pool in _shipped(stack)]
IDS = [f"{s}-{w}" for s, w, _ in RENDERED]
NON_EFA = [r for r in RENDERED if not r[2].efa]


def _gpu_pods(objects: list[dict]):
    for obj in objects:
        for spec in pods._pod_specs(obj):
            limits = (spec["containers"][0].get("resources") or {}).get("limits") or {}
            if (
                "higgsfield.io/pool" in (spec.get("nodeSelector") or {}) and "nvidia.com/gpu" in limits
            ):  # not the MPI launcher
                yield spec


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_shipped_stacks_render_efa_jobs_and_non_efa_jobs():
    assert any(pool.efa for _, _, pool in RENDERED) and any(not pool.efa for _, _, pool in RENDERED)


@pytest.mark.parametrize(("stack", "what", "pool"), RENDERED, ids=IDS)
def test_every_container_requesting_efa_runs_the_training_image_with_the_efa_environment(stack, what, pool):
    objects = _objects(stack, what)
    cfg = plan_of(stack).config
    found = list(pods.efa_containers(objects))
    assert bool(found) == (pool.efa and what.split("@")[0] not in jobs.WITHOUT_EFA)
    for _, container in found:
        assert container["image"].startswith(pods.stack_repository(cfg) + ":")
        assert _env(container).items() >= efa_environment(pool.instance).items()


@pytest.mark.parametrize(("stack", "what", "pool"), NON_EFA, ids=[f"{s}-{w}" for s, w, _ in NON_EFA])
def test_no_container_on_a_non_efa_pool_requests_efa_or_carries_its_environment(stack, what, pool):
    objects = _objects(stack, what)
    for spec in _gpu_pods(objects):
        for container in spec["containers"]:
            assert not set((container.get("resources") or {}).get("limits", {})) & {EFA, "hugepages-2Mi"}
            assert not {"FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "NCCL_TUNER_PLUGIN"} & set(_env(container))


@pytest.mark.parametrize(("stack", "what", "pool"), RENDERED, ids=IDS)
def test_efa_pods_take_every_interface_and_the_anchors_huge_pages_not_the_whole_reservation(stack, what, pool):
    objects = _objects(stack, what)
    for _, container in pods.efa_containers(objects):
        limits = container["resources"]["limits"]
        assert limits[EFA] == efa_resources(pool.instance)[EFA]
        assert (
            mebibytes(limits["hugepages-2Mi"])
            == EFA_POD_HUGEPAGES_MI
            < mebibytes(efa_resources(pool.instance)["hugepages-2Mi"])
        )


@pytest.mark.parametrize(("stack", "what", "pool"), RENDERED, ids=IDS)
def test_every_gpu_pod_mounts_dev_shm_within_its_memory_limit_and_fits_the_node(stack, what, pool):
    objects = _objects(stack, what)
    for spec in _gpu_pods(objects):
        main = spec["containers"][0]
        memory = mebibytes(main["resources"]["limits"]["memory"])
        assert memory <= pool.instance.memory_mib
        if what.split("@")[0] in jobs.ONE_GPU_PODS:  # a GPU of a shared node: no NCCL, no /dev/shm of its own
            continue
        (shm,) = [v for v in spec["volumes"] if v["name"] == "shm"]
        assert shm["emptyDir"]["medium"] == "Memory" and 0 < mebibytes(shm["emptyDir"]["sizeLimit"]) < memory
        assert {"name": "shm", "mountPath": "/dev/shm"} in main["volumeMounts"]


def _facts(name: str, efa: bool = True) -> InstanceFacts:
    return InstanceFacts(
        name=name,
        gpus=8,
        gpu_model="H100",
        gpu_memory_mib=0,
        efa_supported=efa,
        efa_max_interfaces=4,
        network_cards=(0,),
        nvme_disks=0,
        vcpus=32,
        architectures=("x86_64",),
    )


@pytest.mark.parametrize("instance_type", ["p4d.24xlarge", "p5.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge"])
def test_efa_environment_turns_on_device_rdma_on_rdma_instances(instance_type):
    env = efa_environment(_facts(instance_type))
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"


def test_efa_environment_leaves_device_rdma_off_where_efa_has_no_rdma():
    env = efa_environment(_facts("g6e.12xlarge"))
    assert env["FI_PROVIDER"] == "efa" and "FI_EFA_USE_DEVICE_RDMA" not in env


def test_efa_environment_keeps_nccl_off_loopback_and_bridges_and_finds_the_plugin_and_tuner():
    env = efa_environment(_facts("p5.48xlarge"))
    assert env["NCCL_SOCKET_IFNAME"] == NCCL_SOCKET_IFNAME == "^docker,lo,veth"
    assert env["LD_LIBRARY_PATH"].split(":")[0] == f"{versions.AWS_OFI_NCCL_PREFIX}/lib"
    assert "/opt/amazon/efa/lib" in env["LD_LIBRARY_PATH"].split(":")
    assert env["NCCL_TUNER_PLUGIN"] == "ofi"


def test_there_is_no_efa_environment_for_an_instance_without_efa():
    with pytest.raises(ValueError):
        efa_environment(_facts("g6e.xlarge", efa=False))


def test_health_check_fabric_threshold_is_the_instance_types_on_efa_pools():
    cfg = plan_of("prod").config
    (job,) = [o for o in healthcheck.render(cfg, "h100") if o["kind"] == "PyTorchJob"]
    env = _env(job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0])
    assert float(env["MIN_BUS_BANDWIDTH_GBPS"]) == pytest.approx(436.95 * 0.8, abs=0.1)
    assert env["EXPECTED_NCCL_NETWORK"] == "efa" and env["NCCL_DEBUG"] == "INFO"
    assert env["EXPECTED_OFI_NCCL_VERSION"] == versions.AWS_OFI_NCCL.version


def test_offline_image_is_the_stacks_repository_in_the_stacks_account_and_region():
    cfg = plan_of("staging").config
    image = pods.stack_image(cfg, tag="0123abc")
    assert image == "777788889999.dkr.ecr.us-east-1.amazonaws.com/higgsfield-staging/training:0123abc"


# --- bad input ---------------------------------------------------------------------------------


def _main(capsys, monkeypatch, *argv: str) -> tuple[int, str]:
    from infra.cli.main import main

    monkeypatch.chdir(ROOT)
    code = main(list(argv))
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "command", [("jobs", "render", "prod", "pytorch-ddp", "--pool", "h100"), ("healthcheck", "render", "prod", "h100")]
)
def test_a_stock_image_on_an_efa_pool_is_rejected_naming_the_option(command, capsys, monkeypatch):
    code, err = _main(capsys, monkeypatch, *command, "--image", STOCK_IMAGE)
    assert code == 2
    assert err.startswith(
        "error: --image: 'pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime' is not an EFA-ready image for EFA pool h100"
    )
    assert "Traceback" not in err


def test_another_tag_of_the_stacks_repository_is_accepted(capsys, monkeypatch):
    cfg = plan_of("prod").config
    image = f"{pods.stack_repository(cfg)}:v2"
    objects = jobs.render("pytorch-ddp", cfg, pool="h100", image=image)
    assert {c["image"] for _, c in pods.efa_containers(objects)} == {image}


def test_any_image_may_run_on_a_pool_without_efa():
    objects = jobs.render("pytorch-ddp", plan_of("dev").config, image=STOCK_IMAGE)
    assert {spec["containers"][0]["image"] for spec in _gpu_pods(objects)} == {STOCK_IMAGE}


def _edited_examples(tmp_path, monkeypatch, example: str, old: str, new: str) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    path = tmp_path / "examples" / f"{example}.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    monkeypatch.setattr(jobs, "EXAMPLES_DIR", tmp_path / "examples")


def test_a_template_asking_for_more_efa_interfaces_than_the_node_has_is_rejected_naming_the_key(tmp_path, monkeypatch):
    _edited_examples(
        tmp_path,
        monkeypatch,
        "mpi-nccl-tests",
        "limits: {nvidia.com/gpu: ${gpus}}",
        "limits: {nvidia.com/gpu: ${gpus}, vpc.amazonaws.com/efa: 64}",
    )
    with pytest.raises(ConfigError) as failure:
        jobs.render("mpi-nccl-tests", plan_of("prod").config, pool="h100")
    assert failure.value.key == (
        "examples/mpi-nccl-tests.yaml "
        "spec.mpiReplicaSpecs.Worker.template.spec.containers[0].resources.limits.vpc.amazonaws.com/efa"
    )
    assert "64 is more than the 32 EFA interfaces a p5.48xlarge node offers" in str(failure.value)


def test_a_template_asking_for_more_huge_pages_than_the_node_reserves_is_rejected(tmp_path, monkeypatch):
    _edited_examples(
        tmp_path,
        monkeypatch,
        "mpi-nccl-tests",
        "limits: {nvidia.com/gpu: ${gpus}}",
        "limits: {nvidia.com/gpu: ${gpus}, hugepages-2Mi: 20Gi}",
    )
    with pytest.raises(ConfigError) as failure:
        jobs.render("mpi-nccl-tests", plan_of("prod").config, pool="h100")
    assert failure.value.key.endswith("containers[0].resources.limits.hugepages-2Mi")


def test_a_template_asking_for_efa_on_a_pool_without_efa_is_rejected(tmp_path, monkeypatch):
    _edited_examples(
        tmp_path,
        monkeypatch,
        "pytorch-ddp",
        "limits: {nvidia.com/gpu: ${gpus}}",
        "limits: {nvidia.com/gpu: ${gpus}, vpc.amazonaws.com/efa: 1}",
    )
    with pytest.raises(ConfigError) as failure:
        jobs.render("pytorch-ddp", plan_of("dev").config)
    assert failure.value.key.endswith("containers[0].resources.limits.vpc.amazonaws.com/efa")
    assert "pool l40s has no EFA" in str(failure.value)


def test_the_nccl_test_on_a_stack_without_efa_names_the_pools_not_a_pool_flag_never_given():
    with pytest.raises(ConfigError) as failure:
        jobs.render("mpi-nccl-tests", plan_of("dev").config)
    assert (
        str(failure.value)
        == "higgsfield:gpuPools: stack dev has no EFA pool (pools: l40s); the NCCL test is for EFA pools"
    )


# --- a team's own EFA-ready image: higgsfield:trainingImage -------------------------------------

OWN_IMAGE = "123456789012.dkr.ecr.us-east-2.amazonaws.com/llm/efa-train:2026.11"


def _with_own_image(stack: str):
    return plan_of(stack).config.model_copy(update={"training_image": OWN_IMAGE})


def test_the_stacks_own_image_setting_replaces_the_built_one_everywhere():
    cfg = _with_own_image("prod")
    objects = jobs.render("pytorch-ddp", cfg, pool="h100") + healthcheck.render(cfg, "h100")
    assert {c["image"] for _, c in pods.efa_containers(objects)} == {OWN_IMAGE}
    assert all(
        _env(c).items() >= efa_environment(cfg.gpu_pools[0].instance).items() for _, c in pods.efa_containers(objects)
    )


def test_other_tags_of_the_stacks_own_image_are_accepted_on_efa_pools():
    cfg = _with_own_image("prod")
    objects = jobs.render("pytorch-ddp", cfg, pool="h100", image=OWN_IMAGE.replace("2026.11", "2026.12"))
    assert {c["image"] for _, c in pods.efa_containers(objects)} == {OWN_IMAGE.replace("2026.11", "2026.12")}


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        ("efa-train", "is not an image reference with a tag or digest"),
        ("registry.example.com/efa-train", "is not an image reference with a tag or digest"),
        ("pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime", "has no EFA provider and no aws-ofi-nccl"),
    ],
)
def test_a_bad_training_image_setting_names_its_key(value, detail, project_copy, capsys):
    from tests.conftest import assert_plan_rejects, set_key

    assert_plan_rejects(
        project_copy, capsys, "prod", set_key("higgsfield:trainingImage", value), "higgsfield:trainingImage", detail
    )


def test_a_stock_image_is_allowed_as_the_training_image_of_a_stack_without_efa(project_copy, capsys):
    from infra.cli.main import main
    from tests.conftest import set_key

    project_copy("dev", set_key("higgsfield:trainingImage", STOCK_IMAGE))
    assert main(["plan", "bad"]) == 0


def test_jobs_on_a_pool_with_its_own_taint_tolerate_it(project_copy):
    """The README's `dedicated=research` pool: its jobs must still schedule there."""
    from infra.offline.evaluate import load_stack
    from tests.conftest import set_pool

    project_copy("staging", set_pool(1, taints=[{"key": "dedicated", "value": "research", "effect": "NoSchedule"}]))
    cfg = load_stack("bad")
    for objects in (jobs.render("pytorch-ddp", cfg, pool="h100"), healthcheck.render(cfg, "h100")):
        for spec in _gpu_pods(objects):
            assert {"key": "dedicated", "operator": "Equal", "value": "research", "effect": "NoSchedule"} in spec[
                "tolerations"
            ]


def test_the_efa_variables_are_written_in_one_place_only():
    """Examples, the health check and the CLI take them from efa_environment (the Dockerfile's
    image defaults aside): no other source file spells them out."""
    names = ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "NCCL_TUNER_PLUGIN", "NCCL_SOCKET_IFNAME")
    sources = [
        p
        for d in ("components", "infra", "examples", "images", "policies")
        for p in (ROOT / d).rglob("*")
        if p.suffix in (".py", ".yaml", ".yml")
    ]
    spelled = sorted(str(p.relative_to(ROOT)) for p in sources if any(n in p.read_text() for n in names))
    assert spelled == ["components/efa.py"]
