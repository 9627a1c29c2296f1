"""DCGM's deeper diagnostics on demand (`higgsfield healthcheck dcgm STACK POOL NODE`): a one-off Job
on the named node, in the gate's namespace, beside the gate's DCGM container, that asks it for
`dcgmi diag -r 3` with a deadline past node_check's own for that level (infra/offline/healthcheck.py
render_dcgm); and node_check.py --dcgm LEVEL, which runs DCGM alone."""

from __future__ import annotations

import json

import node_check
import pytest

from components.healthgate import dcgm_container
from infra.config import ConfigError
from infra.core.names import HEALTH_NAMESPACE
from infra.offline import healthcheck, kubernetes_schema
from tests.conftest import ROOT, plan_of
from tests.images.test_node_deep_checks import stand_in_dcgm_container

NODE = "ip-10-0-1-7.us-east-2.compute.internal"


def _job(level: int = 3) -> dict:
    cfg = plan_of("prod").config
    (job,) = healthcheck.render_dcgm(cfg, cfg.gpu_pools[0].name, NODE, level=level)
    return job


def test_the_job_runs_dcgm_level_3_on_the_named_node_only_with_every_gpu_of_it():
    cfg = plan_of("prod").config
    job = _job()
    spec = job["spec"]["template"]["spec"]
    (check,) = spec["containers"]
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": NODE}
    assert check["command"][-2:] == ["--dcgm", "3"]
    assert check["resources"]["limits"]["nvidia.com/gpu"] == cfg.gpu_pools[0].gpus_per_node  # no job beside it
    assert job["metadata"]["namespace"] == HEALTH_NAMESPACE and spec["automountServiceAccountToken"] is False
    kubernetes_schema.validate(job, cfg.kubernetes_version)


def test_the_gates_dcgm_container_runs_beside_it_and_ends_with_the_check():
    (sidecar,) = _job()["spec"]["template"]["spec"]["initContainers"]
    assert sidecar["restartPolicy"] == "Always"  # a native sidecar: the Job completes when the check does
    assert {k: v for k, v in sidecar.items() if k != "restartPolicy"} == dcgm_container()


def test_the_jobs_deadline_outlasts_the_checks_own_wait_for_the_level():
    for level in healthcheck.DCGM_LEVELS:
        assert _job(level)["spec"]["activeDeadlineSeconds"] > node_check.DCGM_TIMEOUT_S[level]


@pytest.mark.parametrize(("node", "level", "key"), [("Not A Node", 3, "NODE"), (NODE, 4, "--level")])
def test_a_bad_node_name_or_level_is_refused_naming_it(node, level, key):
    cfg = plan_of("prod").config
    with pytest.raises(ConfigError) as refused:
        healthcheck.render_dcgm(cfg, cfg.gpu_pools[0].name, node, level=level)
    assert refused.value.key == key


def test_the_cli_prints_the_job_for_kubectl_apply(capsys, monkeypatch):
    from infra.cli.main import main

    monkeypatch.chdir(ROOT)
    pool = plan_of("prod").config.gpu_pools[0].name
    assert main(["healthcheck", "dcgm", "prod", pool, NODE]) == 0
    assert "dcgmi diag" in capsys.readouterr().out


def test_node_check_dcgm_asks_its_dcgm_container_for_that_level_alone(tmp_path, monkeypatch, capsys):
    """A stand-in DCGM container answers a failing level-3 run: the check prints it and exits 1."""

    stand_in_dcgm_container(tmp_path, "targeted_stress")
    monkeypatch.setenv(node_check.DCGM_EXCHANGE_ENV, str(tmp_path))
    monkeypatch.setenv("NODE_NAME", NODE)
    assert node_check.main(["--dcgm", "3"]) == 1
    (result,) = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["results"]
    assert result["check"] == "DCGM diagnostics" and result["value"] == "targeted_stress-r3 (GPU 0)"
