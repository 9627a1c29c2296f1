"""`higgsfield jobs render STACK EXAMPLE` without --pool: the example goes on the pool it fits best
(serving and evaluation on the pool with the fewest GPUs a node, a training example on the first
pool some size of it fits), the output's first line says which pool and why, and "no size of it
fits" is said only when no pool of the stack fits it."""

from __future__ import annotations

import shutil

import pytest
import yaml

from infra.cli.main import main
from tests.conftest import ROOT

ADMIN = "arn:aws:iam::123456789012:role/PlatformAdmin"


@pytest.fixture
def syd(tmp_path, monkeypatch, capsys):
    """The new user's Sydney stack: an 8 x H100 training pool, a 4 x A10G serving pool, two teams."""
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    monkeypatch.chdir(tmp_path)
    argv = ["init", "syd", "--region", "ap-southeast-2", "--admin", ADMIN]
    argv += ["--gpu-pool", "train:p5.48xlarge:0-4", "--gpu-pool", "serve:g5.12xlarge:0-6"]
    assert main([*argv, "--team", "speech:16", "--team", "robotics:8"]) == 0
    capsys.readouterr()
    return tmp_path


def _pool_of(out: str) -> set[str]:
    return {
        obj["spec"]["template"]["spec"]["nodeSelector"]["higgsfield.io/pool"]
        for obj in yaml.safe_load_all(out)
        if obj and obj["kind"] in ("Deployment", "Job")
    }


@pytest.mark.parametrize("example", ["serving-classifier", "eval-sweep"])
def test_serving_and_evaluation_examples_go_on_the_serving_pool_not_the_h100_training_pool(syd, capsys, example):
    assert main(["jobs", "render", "syd", example, "--team", "speech"]) == 0
    assert _pool_of(capsys.readouterr().out) == {"serve"}


def test_a_rendered_example_says_first_which_pool_it_was_placed_on_and_what_else_fits(syd, capsys):
    assert main(["jobs", "render", "syd", "serving-classifier", "--team", "speech"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("# Placed on pool serve (g5.12xlarge, 4 GPUs a node, on-demand): ")
    assert first.endswith("also fits: train (--pool NAME).")


def test_a_training_example_too_big_for_the_first_pool_renders_on_a_pool_it_fits(syd, capsys):
    """robotics's 8 GPUs hold no 2 x 8-GPU DDP job on train, but 2 x 4 GPUs on serve."""
    assert main(["jobs", "render", "syd", "pytorch-ddp", "--team", "robotics"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Placed on pool serve (")
    assert "higgsfield.io/pool: serve" in out and "higgsfield.io/pool: train" not in out


def test_a_pool_asked_for_that_no_size_fits_names_the_pool_that_does(syd, capsys):
    assert main(["jobs", "render", "syd", "pytorch-ddp", "--team", "robotics", "--pool", "train"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.rstrip().endswith("no size of it fits on pool train; it fits pool serve (--pool serve)")


def test_check_says_no_size_fits_only_when_no_pool_of_the_stack_fits(syd, capsys):
    assert main(["check", "syd"]) == 0
    assert "no size of it fits" not in capsys.readouterr().out
    path = syd / "stacks" / "Pulumi.syd.yaml"
    path.write_text(path.read_text().replace("maxSize: 6", "maxSize: 1"))  # serve: 4 GPUs, DDP needs 2 pods
    assert main(["check", "syd"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "example pytorch-ddp (jobs render STACK pytorch-ddp) for team robotics" in out
    assert "no size of it fits on any pool of the stack" in out
