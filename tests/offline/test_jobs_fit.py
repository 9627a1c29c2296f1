"""Example jobs that fit: sized within the pool at maxSize, the team's GPU quota and its queue's
capability; sizes that don't are refused naming the limit; `check` fails a stack whose shipped
examples cannot run; the rendered YAML keeps the template's comments and scripts readable."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from infra.cli.main import main
from infra.offline import jobs
from tests.conftest import ROOT, STACKS, config_of, plan_of, set_field

SHIPPED = [(s, e) for s in STACKS for e in jobs.examples_for(config_of(s))]


@pytest.mark.parametrize(("stack", "example"), SHIPPED, ids=["-".join(s) for s in SHIPPED])
def test_every_shipped_example_fits_every_shipped_stack_by_default(stack, example):
    cfg = plan_of(stack).config
    objects = jobs.render(example, cfg)
    job = objects[-1]
    (pool_name,) = {
        t["spec"]["nodeSelector"]["higgsfield.io/pool"]
        for t in jobs.pod_templates(job)
        if "higgsfield.io/pool" in t["spec"]["nodeSelector"]
    }
    pool = next(p for p in cfg.gpu_pools if p.name == pool_name)
    team = next(t for t in cfg.scheduler.teams if t.name == job["metadata"]["namespace"])
    queue = next(q for q in cfg.scheduler.queues if q.name == team.queue)
    gpus = jobs.gpus_at_most(objects)
    limit = min(pool.max_size * pool.gpus_per_node, team.gpu_quota, queue.gpu_capability)
    if jobs.WORKLOAD[example] == "serving":
        limit = min(limit, team.serving_gpu_quota)
    assert 0 < gpus <= limit


def test_the_default_ddp_job_of_dev_asks_for_the_two_gpus_dev_has(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["jobs", "render", "dev", "pytorch-ddp"]) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    job = objects[-1]
    assert jobs.gpus_at_most(objects) == 2 and job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 2


@pytest.mark.parametrize(
    ("workers", "says"),
    [
        ("-1", "error: --workers: must be at least 1, got -1"),
        ("0", "error: --workers: must be at least 1, got 0"),
        (
            "100",
            "error: --workers: 100 needs 101 GPUs (101 pods x 1), more than pool l40s's 2 nodes x 1 GPUs "
            "(higgsfield:gpuPools[0].maxSize); "
            "team ml's quota of 2 GPUs (higgsfield:scheduler.teams[0].gpuQuota); queue ml's capability of 2 GPUs "
            "(higgsfield:scheduler.queues[0].gpuCapability); at most --workers 1 fits",
        ),
    ],
)
def test_a_job_size_that_does_not_fit_is_refused_naming_the_limit(workers, says, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["jobs", "render", "dev", "pytorch-ddp", "--workers", workers]) == 2
    assert capsys.readouterr().err == says + "\n"


def test_an_elastic_job_may_not_grow_beyond_the_teams_quota(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["jobs", "render", "staging", "pytorch-elastic", "--team", "vision", "--workers", "2"]) == 2
    assert "more than team vision's quota of 8 GPUs (higgsfield:scheduler.teams[1].gpuQuota)" in capsys.readouterr().err


def test_check_fails_a_stack_whose_shipped_examples_do_not_fit(project_copy, capsys):
    def one_gpu_team(config: dict) -> None:
        set_field("higgsfield:scheduler", "teams", [{**config["higgsfield:scheduler"]["teams"][0], "gpuQuota": 1}])(
            config
        )
        set_field(
            "higgsfield:scheduler", "queues", [{**config["higgsfield:scheduler"]["queues"][0], "gpuCapability": 1}]
        )(config)

    project_copy("dev", one_gpu_team)
    assert main(["check", "bad"]) == 1
    out = capsys.readouterr().out
    findings = [
        " ".join(part.split()) for part in out.split("example-jobs-fit")[1:]
    ]  # each message is wrapped below its policy line
    (finding,) = [f for f in findings if "examples/pytorch-ddp.yaml" in f]
    assert "team ml's quota of 1 GPUs" in finding


def test_rendered_yaml_keeps_the_templates_comments_and_the_script_as_a_block(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    main(["jobs", "render", "dev", "pytorch-ddp"])
    out = capsys.readouterr().out
    assert "minAvailable: 2            # gang: master + all workers, or nothing" in out
    assert re.search(r"^  train_ddp\.py: \|", out, re.M)
    assert (ROOT / "examples" / "train_ddp.py").read_text().splitlines()[0] in out


@pytest.mark.parametrize(("stack", "example"), SHIPPED, ids=["-".join(s) for s in SHIPPED])
def test_rendered_yaml_reads_back_as_the_rendered_objects_in_a_yaml_1_1_reader(stack, example):
    """kubectl reads YAML 1.1 (`on`, `yes` are booleans there): what we print means what we built."""
    objects = jobs.render(example, plan_of(stack).config)
    assert list(yaml.safe_load_all(jobs.to_yaml(objects))) == json.loads(json.dumps(objects))


def test_check_names_each_other_team_an_example_fits_at_no_size_as_advisory():
    """staging's vision team (8 GPUs) is given training, but DDP's smallest gang on the H100 pool is
    16 GPUs: `jobs render staging pytorch-ddp --team vision` refuses, and check says so up front."""
    from infra.offline import check

    (finding,) = [f for f in check.examples_teams_cannot_run(plan_of("staging")) if "pytorch-ddp" in f.message]
    assert finding.level == "advisory" and finding.message.startswith(
        "example pytorch-ddp (jobs render STACK pytorch-ddp) for team vision: pytorch-ddp needs at least 16 GPUs"
    )


def test_the_default_team_is_not_named_again_among_the_teams_an_example_does_not_fit():
    cfg = config_of("staging")
    default = next(t for t in cfg.scheduler.teams if cfg.scheduler.classes_of(t, "training"))
    assert all(
        team != default for example in jobs.examples_for(cfg) for team, _ in jobs.teams_it_does_not_fit(example, cfg)
    )
