"""The habits a user brings to the CLI: `-o json`/`-o yaml` as kubectl reads them, a `diff --allow`
that says what it let through and refuses a name that matches nothing, the help listing every
example job, `--json` on the commands that were without it, a diff that names the subnet an input
now comes from, and a note for a stack that is new since the base."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from infra.cli.main import main
from infra.offline import diff as offline_diff
from infra.offline import jobs
from infra.offline.cost import load_prices
from infra.offline.evaluate import record
from tests.conftest import ROOT, plan_of


def test_dash_o_json_prints_json_instead_of_writing_a_file_named_json(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no project here: the commands use this checkout's
    assert main(["cost", "dev", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["stack"] == "dev"
    assert not (tmp_path / "json").exists()


def test_dash_o_yaml_prints_the_same_report_as_yaml(capsys):
    assert main(["cost", "dev", "--json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert main(["cost", "dev", "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == as_json


def test_dash_o_with_a_path_still_writes_the_file(tmp_path, capsys):
    target = tmp_path / "cost.txt"
    assert main(["cost", "dev", "-o", str(target)]) == 0
    assert target.read_text().startswith("Cost of dev") and capsys.readouterr().out == ""


def test_a_diff_allow_name_that_matches_nothing_is_refused_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(offline_diff, "plan_json_at", lambda ref, stack, root: record("dev").as_dict())
    assert main(["diff", "dev", "--base", "HEAD", "--allow", "lustre-typo"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --allow: lustre-typo names no resource of dev") and err.count("\n") == 1


def test_a_matching_allow_is_acknowledged():
    base = record("dev").as_dict()
    kept = next(r for r in base["resources"] if r["type"] in offline_diff.KEPT)
    head = {**base, "resources": [r for r in base["resources"] if r["urn"] != kept["urn"]]}
    refused = offline_diff.compare(base, head, set())
    assert refused.refused and not refused.allowed
    allowed = offline_diff.compare(base, head, {kept["name"]})
    assert not allowed.refused
    assert allowed.allowed == [
        f"delete of {offline_diff.KEPT[kept['type']]} {kept['name']} (allowed by {kept['name']})"
    ]
    assert f"allowed: delete of {offline_diff.KEPT[kept['type']]} {kept['name']}" in offline_diff.render_diff(
        "dev", "main", allowed
    )


def test_jobs_render_help_lists_every_example(capsys):
    with pytest.raises(SystemExit):
        main(["jobs", "render", "--help"])
    listed = "".join(capsys.readouterr().out.split())  # argparse wraps at hyphens
    assert all(example in listed for example in jobs.EXAMPLES) and len(jobs.EXAMPLES) == 7


def test_the_help_says_jobs_runs_a_teams_own_job_file_not_only_the_examples(capsys):
    """A researcher reading `higgsfield --help` for how to run their job finds it under `jobs`, and `jobs render
    --help` says it renders their job file (-f) as well as the examples."""

    def described(argv: list[str], command: str, following: str) -> str:
        with pytest.raises(SystemExit):
            main([*argv, "--help"])
        listing = " ".join(capsys.readouterr().out.split())  # argparse wraps a command's help over lines
        return listing.split(f" {command} ", 1)[1].split(f" {following} ", 1)[0]

    jobs_help = described([], "jobs", "stacks")
    assert "job file" in jobs_help and "submit" in jobs_help
    assert "job file" in described(["jobs"], "render", "submit")


def test_the_help_says_preflight_checks_the_add_ons_configuration_values_too(capsys):
    """An operator upgrading reads `higgsfield --help` for what preflight asks AWS: the add-ons' configuration values
    against their version's schema are one of its checks ("add-on values", infra/cli/preflight.py _addon_values)."""
    with pytest.raises(SystemExit):
        main(["--help"])
    listing = " ".join(capsys.readouterr().out.split())
    assert "add-on versions and configuration values" in listing.split(" preflight ", 1)[1].split(" verify ", 1)[0]


def test_preflight_help_says_what_it_asks_aws_what_its_lines_mean_and_its_exit_codes(capsys):
    """`higgsfield preflight --help` is where an operator about to upgrade looks first: it says the calls are
    read-only, what is checked (the add-ons' configuration values among it), what ok, FAIL and n/c mean, the exit
    codes (infra/cli/commands/preflight.py run) and where the IAM actions it needs are listed."""
    with pytest.raises(SystemExit):
        main(["preflight", "--help"])
    out = capsys.readouterr().out
    text = " ".join(out.split())
    assert "Read-only" in text and "configuration values" in text
    assert all(word in text for word in ("ok;", "FAIL,", "n/c,")) and "Exit 0" in text and "2:" in text
    assert "docs/concepts/health-and-observability.md" in "".join(out.split())  # argparse wraps at hyphens


@pytest.mark.parametrize(
    "argv",
    [["bootstrap", "dev"], ["jobs", "render", "dev", "pytorch-ddp"], ["charts", "dev", "--out", "{tmp}"]],
    ids=["bootstrap", "jobs", "charts"],
)
def test_commands_that_had_no_json_print_json(argv, tmp_path, capsys):
    assert main([a.replace("{tmp}", str(tmp_path / "charts")) for a in argv] + ["--json"]) == 0
    assert isinstance(json.loads(capsys.readouterr().out), dict)


def test_rendered_jobs_as_json_are_a_list_kubectl_applies(capsys):
    assert main(["jobs", "render", "dev", "pytorch-ddp", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["kind"] == "List" and {o["kind"] for o in document["items"]} >= {"PyTorchJob"}


def test_init_says_what_it_wrote_as_json(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # an empty folder: init makes a project here
    admin = "arn:aws:iam::123456789012:role/PlatformAdmin"
    assert main(["init", "oslo", "--region", "eu-north-1", "--admin", admin, "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["stack_file"] == "stacks/Pulumi.oslo.yaml" and "Pulumi.yaml" in said["new_project_files"]
    assert (tmp_path / said["stack_file"]).is_file()


def test_a_private_subnet_change_names_the_subnet_of_the_az_that_changed():
    base = plan_of("dev").as_dict()
    head = record("dev", overrides={"higgsfield:availabilityZones": '["us-west-2a", "us-west-2c"]'}).as_dict()
    changed = {c.name: c for c in offline_diff.compare(base, head, {"cluster-eks"}).changed}
    cluster = changed["cluster-eks"]
    assert cluster.replace_paths == ["privateSubnetIds[1]"]  # [0] is us-west-2a's, which stays
    assert cluster.because == {"privateSubnetIds[1]": "aws:ec2/subnet:Subnet network-private-us-west-2c"}


def test_a_stack_new_since_the_base_gets_a_new_stack_note():
    base = {"project": "higgsfield", "stack": "dev", "resources": [], "outputs": {}, "new_stack": True}
    found = offline_diff.compare(base, plan_of("dev").as_dict(), set())
    assert found.new_stack
    assert "note: a new stack: stacks/Pulumi.dev.yaml is not at main" in offline_diff.render_diff("dev", "main", found)


def test_the_docs_name_the_bus_bandwidth_setting_as_the_config_reads_it():
    written = set(re.findall(r"minBusBandwidthGB\w*", "".join(p.read_text() for p in (ROOT / "docs").rglob("*.md"))))
    assert written == {"minBusBandwidthGBps"}


def test_a_stack_in_a_region_without_prices_never_headlines_zero_dollars(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    admin = "arn:aws:iam::123456789012:role/A"
    assert main(["init", "rio", "--region", "sa-east-1", "--admin", admin, "--gpu-pool", "a100:p4d.24xlarge"]) == 0
    capsys.readouterr()
    assert main(["cost", "rio"]) == 0
    headline = capsys.readouterr().out.splitlines()[0]
    assert "not priced in sa-east-1" in headline and "$0.00" not in headline


def test_a_stack_in_eu_north_1_headlines_its_ec2_prices_and_says_what_is_left_out(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    admin = "arn:aws:iam::123456789012:role/A"
    assert main(["init", "paris", "--region", "eu-north-1", "--admin", admin, "--gpu-pool", "h100:p5.48xlarge"]) == 0
    capsys.readouterr()
    assert main(["cost", "paris"]) == 0
    out = capsys.readouterr().out
    headline = out.splitlines()[0]
    assert headline.startswith("Cost of paris (eu-north-1): idle $") and " items not priced (" in headline
    eu = load_prices()["regions"]["eu-north-1"]["ec2_on_demand_hour"]
    assert f"${2 * eu['p5.48xlarge']:,.2f}" in out  # the pool's full scale at the region's own rate
    assert "EC2 from SkyPilot's AWS catalog" in out


def test_init_never_writes_over_a_file_in_a_folder_that_is_no_project(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "__main__.py").write_text("print('mine')\n")
    assert main(["init", "oslo", "--region", "eu-north-1", "--admin", "arn:aws:iam::123456789012:role/A"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: __main__.py: exists already in") and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["__main__.py"]
    assert (tmp_path / "__main__.py").read_text() == "print('mine')\n"


def test_healthcheck_render_without_a_pool_lists_the_stacks_pools_and_its_help_shows_pool_required(capsys):
    assert main(["healthcheck", "render", "dev"]) == 2
    assert "name the pool after the stack (pools of dev: l40s)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["healthcheck", "render", "--help"])
    usage = capsys.readouterr().out.splitlines()[0]
    assert "STACK POOL" in usage and "[POOL]" not in usage


def test_jobs_render_without_an_example_lists_the_examples_the_stack_runs(capsys):
    assert main(["jobs", "render", "dev"]) == 2
    assert "name the example after the stack (examples of dev: pytorch-ddp, " in capsys.readouterr().err


def test_init_takes_o_json_as_every_report_does(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["init", "paris", "--region", "eu-north-1", "--admin", "arn:aws:iam::123456789012:role/A", "-o", "json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["stack"] == "paris"


def test_healthcheck_render_takes_json_as_jobs_render_does(capsys):
    assert main(["healthcheck", "render", "dev", "l40s", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "List"


def test_json_with_another_format_is_refused_not_one_of_them_printed_silently(capsys):
    assert main(["cost", "dev", "--json", "-o", "yaml"]) == 2
    assert "--json and -o yaml ask for two formats: give one" in capsys.readouterr().err


def _completer(argv_prefix: list[str], dest: str):
    from infra.cli.main import parser

    sub = parser()
    for name in argv_prefix:  # down the subcommands
        sub = next(a for a in sub._actions if a.dest and a.choices and name in a.choices).choices[name]
    return next(a for a in sub._actions if a.dest == dest).completer


def test_completion_after_jobs_render_stack_offers_the_examples_not_files():
    assert _completer(["jobs", "render"], "example")() == sorted(jobs.EXAMPLES)


def test_completion_after_healthcheck_render_stack_offers_its_pools():
    import argparse

    assert _completer(["healthcheck", "render"], "pool")(parsed_args=argparse.Namespace(stack="prod")) == [
        "h100",
        "h200-block",
        "b200-odcr",
    ]
