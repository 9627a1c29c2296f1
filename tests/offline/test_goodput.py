"""Goodput (infra/offline/goodput.py): the share of allocated GPU-hours spent training, per job and
per team, and where the rest went; and the dashboard's panels."""

from __future__ import annotations

import progress
import pytest

from components.observability import (
    CHECKPOINT_SHARE_EXPR,
    TEAM_TRAINING_SHARE_EXPR,
    TRAINING_SHARE_EXPR,
    gpu_dashboard,
)
from infra.core.names import GPU_RESOURCE
from infra.offline.goodput import Interval, Job, Observed, of_job, of_objects, of_teams, seconds
from infra.offline.pods import gpus_of

checkpoint_note = progress.checkpoint_note

H = 3600.0


def _job(name: str = "pretrain", team: str = "llm", *intervals: Interval) -> Job:
    return Job(team, name, intervals)


def test_a_job_that_only_trained_has_all_its_gpu_hours_as_goodput():
    result = of_job(_job("a", "llm", Interval(0, 2 * H, "training", 16)))
    assert result.allocated == pytest.approx(32) and result.share == pytest.approx(1.0)


def test_the_lost_hours_are_split_by_where_they_went():
    result = of_job(
        _job(
            "a",
            "llm",
            Interval(0, 0.5 * H, "waiting", 8),  # half the gang's nodes waited half an hour
            Interval(0.5 * H, 0.6 * H, "gate", 16),
            Interval(0.6 * H, 0.7 * H, "preflight", 16),
            Interval(0.7 * H, 2.7 * H, "training", 16),
            Interval(2.7 * H, 2.95 * H, "hung", 16),
            Interval(2.95 * H, 3.1 * H, "restart", 16),
            Interval(3.1 * H, 4.1 * H, "training", 16),
        )
    )
    hours = result.gpu_hours
    assert hours["waiting"] == pytest.approx(4) and hours["hung"] == pytest.approx(4)
    assert hours["training"] == pytest.approx(48) and result.share == pytest.approx(48 / result.allocated)
    assert result.line().startswith("goodput 76% of 63.2 GPU-hours (lost to checkpoint") is False
    assert "hung 6%" in result.line()


def test_a_checkpoint_stall_inside_a_training_stretch_counts_as_checkpoint_only_where_no_step_was_made():
    result = of_job(_job("a", "llm", Interval(0, H, "training", 8), Interval(0.5 * H, 0.6 * H, "checkpoint", 8)))
    # overlapping: training wins (the interval lists a step), so nothing is lost
    assert result.gpu_hours["checkpoint"] == 0 and result.share == pytest.approx(1.0)


def test_a_teams_goodput_sums_its_jobs_hours_not_their_shares():
    jobs = [
        _job("big", "llm", Interval(0, H, "training", 64), Interval(H, 2 * H, "restart", 64)),
        _job("small", "llm", Interval(0, H, "training", 1)),
        _job("other", "vision", Interval(0, H, "waiting", 8)),
    ]
    teams = of_teams(jobs)
    assert teams["llm"].share == pytest.approx(65 / 129) and teams["vision"].share == 0


def test_an_unknown_phase_is_refused_in_one_line():
    with pytest.raises(ValueError, match="unknown phase 'lunch'"):
        Interval(0, 1, "lunch", 1)


def test_the_dashboard_shows_goodput_per_job_and_per_team():
    panels = {p["title"]: p for p in gpu_dashboard()["panels"]}
    job = panels["Training goodput per job (share of the last hour stepping)"]
    team = panels["Training goodput per team"]
    assert job["targets"][0]["expr"] == TRAINING_SHARE_EXPR and team["targets"][0]["expr"] == TEAM_TRAINING_SHARE_EXPR
    assert job["targets"][0]["legendFormat"] == "{{namespace}}/{{job_name}}"
    positions = [(p["gridPos"]["x"], p["gridPos"]["y"]) for p in gpu_dashboard()["panels"]]
    assert len(positions) == len(set(positions))  # no panel on top of another


def _observed_with_log(*lines: str) -> Observed:
    """One 8-GPU pod bound and running since midnight (the gang complete), its log's lines, now 02:00."""
    pod = {
        "metadata": {"name": "a-master-0", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": "n", "containers": [{"resources": {"limits": {GPU_RESOURCE: "8"}}}]},
        "status": {"containerStatuses": [{"state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]},
    }
    job = {"metadata": {"name": "a", "namespace": "llm"}, "spec": {"pytorchReplicaSpecs": {"Master": {}}}}
    logs = {"a-master-0": [(float(i), text) for i, text in enumerate(lines)]}
    return Observed(job=job, pods=[pod], events=[], nodes={}, logs=logs, now=seconds("2026-01-01T02:00:00Z") or 0.0)


def test_the_runs_checkpoint_stalls_in_the_log_move_from_training_to_checkpoint():
    """Rank 0's newest save line says 900 s blocked in all: a quarter hour of 8 GPUs is checkpoint."""
    found = of_objects(
        _observed_with_log(
            "step 99 loss 1.2 world 16 checkpoint " + checkpoint_note(300.0, 300.0),
            "step 199 loss 1.1 world 16 checkpoint " + checkpoint_note(600.0, 900.0),
        )
    )
    assert found.gpu_hours["checkpoint"] == pytest.approx(2.0) and found.gpu_hours["training"] == pytest.approx(14)
    assert "checkpoint 12%" in found.line()


def test_a_log_without_a_checkpoint_line_loses_nothing_to_checkpoints():
    found = of_objects(_observed_with_log("step 1 loss 2.0"))
    assert found.gpu_hours["checkpoint"] == 0 and found.share == pytest.approx(1.0)


def test_the_dashboard_shows_each_jobs_share_blocked_on_checkpoints_from_the_ranks_counter():
    panels = {p["title"]: p for p in gpu_dashboard()["panels"]}
    expr = panels["Checkpoint stalls per job (share of the last hour)"]["targets"][0]["expr"]
    assert expr == CHECKPOINT_SHARE_EXPR and "higgsfield_training_checkpoint_seconds_total" in expr


def test_a_pods_gpus_are_its_containers_and_sidecars_as_the_team_policy_counts_them():
    """A native sidecar (an init container that restarts always) holds its GPUs for the pod's life, as the policy's
    count of a pod's GPUs reads it (components/tenancy.py _POD_GPUS); an init container that ends holds none."""
    gpu = {"resources": {"limits": {GPU_RESOURCE: "2"}}}
    pod = {
        "spec": {
            "containers": [{"name": "main", "resources": {"requests": {GPU_RESOURCE: "4"}}}],
            "initContainers": [{"name": "watch", "restartPolicy": "Always", **gpu}, {"name": "setup", **gpu}],
        }
    }
    assert gpus_of(pod) == 6
