"""A rendered job promises a resume only where the stack can give one. A multi-node job's
checkpoints need shared storage: without it each pod publishes to its own disk, no checkpoint is
ever complete (rank 0 waits for every rank's marker: examples/checkpointing.py _complete), and a
restarted gang starts over. Such a job renders without checkpoints by default (and says so), is
refused when checkpoints are asked for (exit 2, one line naming higgsfield:fsx.enabled), and
`check` fails a stack whose shipped examples would promise otherwise."""

from __future__ import annotations

import copy
import os
import subprocess

import pytest

from infra.cli.main import main
from infra.offline import day_one, jobs
from tests.conftest import ROOT, STACKS, needs_torch, plan_of, torch_python


def _job(objects):
    return next(o for o in objects if o["kind"] != "ConfigMap")


def _envs(job) -> list[dict]:
    return [{e["name"]: e.get("value") for e in t["spec"]["containers"][0]["env"]} for t in jobs.pod_templates(job)]


def test_dev_has_no_shared_storage_and_its_ddp_job_spans_two_nodes():
    cfg = plan_of("dev").config
    assert not cfg.fsx.enabled
    sizes = jobs.fit("pytorch-ddp", cfg, cfg.gpu_pools[0], cfg.scheduler.teams[0])
    assert sizes.pods(sizes.default_workers) == 2


def test_a_multi_node_job_without_shared_storage_renders_with_checkpoints_off():
    objects = jobs.render("pytorch-ddp", plan_of("dev").config)
    for env in _envs(_job(objects)):
        assert env["CHECKPOINT_EVERY_STEPS"] == "0" and "CHECKPOINT_SHARED_DIR" not in env


def test_its_yaml_says_a_restart_starts_over_and_promises_no_resume():
    text = jobs.to_yaml(jobs.render("pytorch-ddp", plan_of("dev").config))
    header = text.split("apiVersion: kubeflow.org/v1")[0]
    assert "which starts again at step 0: checkpoints are off" in header
    assert "resumes from" not in header


def test_asking_for_checkpoints_there_is_refused_naming_the_setting_and_the_fix(capsys):
    assert main(["jobs", "render", "dev", "pytorch-ddp", "--checkpoints"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: higgsfield:fsx.enabled: pytorch-ddp runs on 2 nodes")
    assert "enable higgsfield:fsx" in err and "Traceback" not in err


def test_a_one_node_job_keeps_its_checkpoints_and_says_they_live_with_the_node():
    objects = jobs.render("pytorch-elastic", plan_of("dev").config, workers=1, checkpoints=True)
    (env,) = _envs(_job(objects))
    assert env["CHECKPOINT_EVERY_STEPS"] == "100"
    assert "resumes from its newest checkpoint only while its node lives" in jobs.to_yaml(objects)


@pytest.mark.parametrize("example", ["pytorch-ddp", "pytorch-elastic"])
def test_with_fsx_the_job_checkpoints_to_the_shared_volume_and_says_it_resumes(example):
    cfg = plan_of("prod").config
    objects = jobs.render(example, cfg, pool="h100")
    for env in _envs(_job(objects)):
        assert env["CHECKPOINT_SHARED_DIR"].startswith("/fsx/") and env["CHECKPOINT_EVERY_STEPS"] == "100"
    assert "resumes from the newest complete checkpoint on FSx" in jobs.to_yaml(objects)
    assert jobs.resume_promise(_job(objects), cfg) is None


def test_a_job_named_otherwise_keeps_its_own_code_and_checkpoint_directory():
    """A second copy beside a team's own job (verify's node-loss trial) never shares its checkpoints."""
    objects = jobs.render("pytorch-ddp", plan_of("prod").config, pool="h100", name="verify-node-loss-1")
    code, job = objects[0], _job(objects)
    assert code["metadata"]["name"] == "verify-node-loss-1-code" and job["metadata"]["name"] == "verify-node-loss-1"
    for env in _envs(job):
        assert env["CHECKPOINT_SHARED_DIR"] == "/fsx/checkpoints/verify-node-loss-1"
    for template in jobs.pod_templates(job):
        assert {"name": "code", "configMap": {"name": "verify-node-loss-1-code"}} in template["spec"]["volumes"]


def test_a_job_whose_checkpoints_lost_their_shared_volume_is_a_broken_promise():
    cfg = plan_of("prod").config
    job = copy.deepcopy(_job(jobs.render("pytorch-ddp", cfg, pool="h100")))
    for template in jobs.pod_templates(job):
        template["spec"]["volumes"] = [v for v in template["spec"]["volumes"] if "persistentVolumeClaim" not in v]
    assert "not on shared storage, so a restarted gang cannot resume" in jobs.resume_promise(job, cfg)


@pytest.mark.parametrize("stack", STACKS)
def test_no_shipped_example_promises_a_resume_its_stack_cannot_give(stack):
    assert day_one.resume_findings(plan_of(stack).config) == []


def test_check_fails_a_stack_whose_example_would_promise_a_resume(monkeypatch):
    cfg = plan_of("prod").config
    broken = copy.deepcopy(_job(jobs.render("pytorch-ddp", cfg, pool="h100")))
    for template in jobs.pod_templates(broken):
        template["spec"]["volumes"] = [v for v in template["spec"]["volumes"] if "persistentVolumeClaim" not in v]
    monkeypatch.setattr(jobs, "render", lambda example, cfg, **kw: [broken])
    findings = day_one.resume_findings(cfg)
    assert findings and all(m.startswith("higgsfield:fsx.enabled: examples/") for _, m in findings)


@needs_torch
def test_train_ddp_with_checkpoints_off_neither_saves_nor_resumes(tmp_path):
    python = torch_python()
    env = {
        **os.environ,
        "CHECKPOINT_DIR": str(tmp_path / "nvme"),
        "CHECKPOINT_EVERY_STEPS": "0",
        "STEPS": "20",
        "OMP_NUM_THREADS": "1",
        # progress.py ships next to the script in the job's ConfigMap; here it is the image's
        "PYTHONPATH": str(ROOT / "images" / "training"),
    }
    done = subprocess.run(
        [
            python,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(ROOT / "examples" / "train_ddp.py"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0 and "checkpoints off: starting at step 0" in done.stdout, (
        done.stdout[-2000:] + done.stderr[-2000:]
    )
    assert not (tmp_path / "nvme").exists() or not any((tmp_path / "nvme").iterdir())
