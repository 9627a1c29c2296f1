"""Every rendered PyTorch training job runs the pre-flight gang check (images/training/preflight.py)
before its training command, with the pool's expectations (infra/offline/jobs.py add_preflight)."""

from __future__ import annotations

import pytest

from infra.config import ConfigError
from infra.offline import jobs
from tests.conftest import ROOT, STACKS, plan_of

PYTORCH = ("pytorch-ddp", "pytorch-elastic")


def _rendered(stack: str):
    cfg = plan_of(stack).config
    for example in jobs.examples_for(cfg):
        if example not in PYTORCH:
            continue
        for pool in cfg.gpu_pools:
            try:
                objects = jobs.render(example, cfg, pool=pool.name)
            except ConfigError:  # an example that does not fit this pool: nothing to run
                continue
            yield example, pool, objects


def _env(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


@pytest.mark.parametrize("stack", STACKS)
def test_every_rendered_pytorch_job_runs_the_preflight_before_training(stack):
    for example, pool, objects in _rendered(stack):
        for template in jobs.pod_templates(jobs.workload_of(objects)):
            container = template["spec"]["containers"][0]
            assert container["command"][:3] == ["python", "/code/preflight.py", "--"], (example, pool.name)
            assert "/code/checkpointing.py" in container["command"][3:], (example, pool.name)
            env = _env(container)
            assert env["HIGGSFIELD_PREFLIGHT"] == "run"
            assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
            assert env["PREFLIGHT_NCCL_NETWORK"] == ("efa" if pool.efa else "any")


@pytest.mark.parametrize("stack", STACKS)
def test_the_job_ships_the_preflight_and_the_node_check_it_imports(stack):
    for example, _pool, objects in _rendered(stack):
        (code,) = [o for o in objects if o["kind"] == "ConfigMap"]
        for name in jobs.PREFLIGHT_FILES:
            assert code["data"][name] == (ROOT / "images" / "training" / name).read_text(), (example, name)


def test_the_preflight_floor_is_one_gpus_share_of_the_pools_fabric():
    from infra.offline.healthcheck import bus_bandwidth_threshold

    cfg = plan_of("prod").config
    pool = next(p for p in cfg.gpu_pools if p.efa)
    env = jobs.preflight_env(cfg, pool, checkpoints=True)
    expected = bus_bandwidth_threshold(cfg, pool) / pool.gpus_per_node
    assert float(env["PREFLIGHT_MIN_BUS_BANDWIDTH_GBPS"]) == pytest.approx(expected, abs=0.05)


def test_the_checkpoint_write_is_asked_only_of_a_job_that_checkpoints():
    cfg = plan_of("prod").config
    pool = cfg.gpu_pools[0]
    assert jobs.preflight_env(cfg, pool, checkpoints=False)["PREFLIGHT_CHECKPOINT_BYTES"] == "0"
    assert int(jobs.preflight_env(cfg, pool, checkpoints=True)["PREFLIGHT_CHECKPOINT_BYTES"]) > 0


@pytest.mark.parametrize("example", ["tf-mnist", "xgboost-iris"])
def test_the_frameworks_without_pytorch_check_each_node_alone_before_training(example):
    cfg = plan_of("prod").config
    objects = jobs.render(example, cfg)
    code = next(o for o in objects if o["kind"] == "ConfigMap")
    assert {"preflight.py", "node_check.py", "progress.py"} <= set(code["data"])
    for template in jobs.pod_templates(jobs.workload_of(objects)):
        container = template["spec"]["containers"][0]
        assert container["command"][:4] == ["python", "/code/preflight.py", "--node", "--"], example
        assert _env(container)["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


@pytest.mark.parametrize("framework", ["tensorflow", "xgboost", "jax", "paddle"])
def test_a_teams_job_file_of_a_framework_without_pytorch_gets_the_node_preflight(framework):
    from tests.offline.test_team_job import _render

    _, objects, _ = _render(framework=framework)
    code, workload = objects
    assert "preflight.py" in code["data"]
    for template in jobs.pod_templates(workload):
        container = template["spec"]["containers"][0]
        assert container["command"][:4] == ["python", "/code/preflight.py", "--node", "--"]
        assert _env(container)["HIGGSFIELD_PROGRESS_PORT"]  # its failing node is served for a re-check


@pytest.mark.parametrize("example", ["tf-mnist", "xgboost-iris"])
def test_the_node_preflight_pods_declare_the_progress_port_their_suspect_is_served_on(example):
    """A failing node is served on the `progress` port (scraped as training-progress), so the watchdog
    can ask the gate to re-check it: the pods declare the port and name it to the program."""
    from infra.core.names import PROGRESS_PORT, PROGRESS_PORT_NAME

    objects = jobs.render(example, plan_of("prod").config)
    for template in jobs.pod_templates(jobs.workload_of(objects)):
        container = template["spec"]["containers"][0]
        assert {"name": PROGRESS_PORT_NAME, "containerPort": PROGRESS_PORT, "protocol": "TCP"} in container["ports"]
        assert _env(container)["HIGGSFIELD_PROGRESS_PORT"] == str(PROGRESS_PORT)


def _mpi_checks(objects: list[dict]) -> None:
    """The launcher checks its workers' nodes before its mpirun; the workers carry what the check
    reads (their node's name, its settings) and the program, from the job's ConfigMap."""
    code, job = objects[0], objects[-1]
    assert {"preflight.py", "node_check.py", "progress.py"} <= set(code["data"])
    specs = job["spec"]["mpiReplicaSpecs"]
    launcher = specs["Launcher"]["template"]["spec"]
    main = launcher["containers"][0]
    assert main["command"][:5] == ["python", "/code/preflight.py", "--mpi", "--", "mpirun"]
    assert _env(main)["HIGGSFIELD_PREFLIGHT"] == "run" and any(p["name"] == "progress" for p in main["ports"])
    # OnFailure: a failed launcher restarts in place; under ExitCode it would fail the whole job
    assert specs["Launcher"]["restartPolicy"] == "OnFailure"
    worker = specs["Worker"]["template"]["spec"]
    assert _env(worker["containers"][0])["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    for spec in (launcher, worker):
        mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["mountPath"] == "/code")
        volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
        assert volume["configMap"]["name"] == code["metadata"]["name"]


def test_the_mpi_example_checks_every_workers_node_from_its_launcher_before_mpirun():
    _mpi_checks(jobs.render("mpi-nccl-tests", plan_of("prod").config))


def test_a_teams_mpi_job_file_checks_every_workers_node_from_its_launcher_before_mpirun():
    from tests.offline.test_team_job import _render

    _, objects, _ = _render(framework="mpi", command=["mpirun", "-np", "16", "python", "train.py"])
    _mpi_checks(objects)
