"""Timings measured by `higgsfield verify --allow-cost --save FILE` flow back: `timeline --job
POOL --measured FILE` puts the measured cold path first, every step sourced to the file (none
marked estimate); `cost --measured FILE` prices each measured cold start; a file that is not one,
or is another stack's, is refused in one line naming it."""

from __future__ import annotations

import json

import pytest

from infra.cli.main import main
from infra.offline import measured
from tests.conftest import ROOT

TIMINGS = {
    "instance_type": "p5.48xlarge",
    "nodes": 2,
    "scale_up_s": 95.0,
    "node_boot_s": 240.0,
    "gate_s": 170.0,
    "image_pull_s": 2.0,
    "first_step_s": 540.0,
}


@pytest.fixture
def saved(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    path = tmp_path / "prod.measured.json"
    pools = {"h100": measured.PoolTimings(**TIMINGS)}
    measured.save(path, measured.Measured("prod", "2026-12-05T09:00:00+00:00", pools))
    return path


def test_save_keeps_the_pools_an_earlier_run_measured(saved):
    b200 = measured.PoolTimings(**{**TIMINGS, "instance_type": "p6-b200.48xlarge"})
    measured.save(saved, measured.Measured("prod", "2026-12-06T09:00:00+00:00", {"b200-odcr": b200}))
    assert sorted(measured.load(saved).pools) == ["b200-odcr", "h100"]


def test_timeline_job_puts_the_measured_cold_path_first_sourced_to_the_file(saved, capsys):
    assert main(["timeline", "prod", "--job", "h100", "--measured", str(saved), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)["paths"][0]
    assert first["path"] == "cold, measured (2 x p5.48xlarge)" and first["seconds"] == 540.0
    assert [s["seconds"] for s in first["steps"]] == [95.0, 240.0, 170.0, 2.0, 33.0]
    assert all(s["source"].startswith(f"measured: {saved}") and not s["estimate"] for s in first["steps"])


def test_timeline_job_of_a_pool_not_measured_keeps_the_estimates(saved, capsys):
    assert main(["timeline", "prod", "--job", "b200-odcr", "--measured", str(saved), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["paths"][0]["path"] == "cold"


def test_cost_prices_each_measured_cold_start(saved, capsys):
    assert main(["cost", "prod", "--measured", str(saved), "--json"]) == 0
    (start,) = json.loads(capsys.readouterr().out)["cold_starts"]
    prices = json.loads((ROOT / "infra/offline/data/prices.json").read_text())
    rate = prices["regions"]["us-east-2"]["ec2_on_demand_hour"]["p5.48xlarge"]
    assert start["pool"] == "h100" and start["usd"] == pytest.approx(round(rate * 2 * 540 / 3600, 2))


def test_cost_text_says_where_the_figures_come_from(saved, capsys):
    assert main(["cost", "prod", "--measured", str(saved)]) == 0
    assert f"Cold starts, measured ({saved}, 2026-12-05T09:00:00+00:00)" in capsys.readouterr().out


def test_another_stacks_file_is_refused_in_one_line(saved, capsys):
    assert main(["timeline", "dev", "--job", "h100", "--measured", str(saved)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds stack 'prod'" in err


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("not json", "is not JSON"),
        ('{"stack": "prod"}', "no `pools` mapping"),
        ('{"pools": {"h100": {}}}', "pools.h100"),
    ],
)
def test_a_file_that_is_not_measurements_is_refused_naming_it(tmp_path, capsys, monkeypatch, content, says):
    monkeypatch.chdir(ROOT)
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert main(["cost", "prod", "--measured", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --measured:") and says in err


def test_measured_without_job_is_a_usage_error(saved, capsys):
    assert main(["timeline", "prod", "--measured", str(saved)]) == 2
    assert "--measured goes with --job" in capsys.readouterr().err
