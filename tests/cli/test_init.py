"""`higgsfield init`: a stack of one's own in another region, that plans, checks and costs as
written; and "not offered" errors that say where a type is offered, and from which facts."""

from __future__ import annotations

import shutil

import pytest
import yaml

from infra.cli.main import main
from infra.core.bundled import zone_offerings, zones_offering
from tests.conftest import ROOT, set_pool


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A copy of the project's stacks and policy configs, as the working directory."""
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    shutil.copytree(ROOT / "stacks", tmp_path / "stacks")
    shutil.copytree(ROOT / "policies" / "config", tmp_path / "policies" / "config")
    monkeypatch.chdir(tmp_path)
    return tmp_path


ADMIN = ["--admin", "arn:aws:iam::123456789012:role/PlatformAdmin"]  # asked for, never copied


def _config(project, name):
    return yaml.safe_load((project / "stacks" / f"Pulumi.{name}.yaml").read_text())["config"]


def test_init_writes_the_region_and_azs_that_offer_the_pools_types(project, capsys):
    assert main(["init", *ADMIN, "mine", "--region", "eu-north-1"]) == 0
    config = _config(project, "mine")
    offered = zone_offerings("eu-north-1")
    assert config["aws:region"] == "eu-north-1"
    (pool,) = config["higgsfield:gpuPools"]
    assert pool["availabilityZone"] in config["higgsfield:availabilityZones"]
    assert set(pool["instanceTypes"]) <= offered[pool["availabilityZone"]]
    assert all(
        set(config["higgsfield:cpuNodes"]["instanceTypes"]) <= offered[z]
        for z in config["higgsfield:availabilityZones"]
    )
    assert (project / "policies" / "config" / "mine.json").read_text() == (
        ROOT / "policies" / "config" / "dev.json"
    ).read_text()


def test_init_keeps_the_comments_of_the_stack_it_starts_from(project):
    main(["init", *ADMIN, "mine", "--region", "eu-north-1"])
    text = (project / "stacks" / "Pulumi.mine.yaml").read_text()
    assert text.startswith("# yaml-language-server: $schema=../schemas/stack.schema.json\n")
    assert "instanceTypes: [g6e.xlarge, g6e.2xlarge]   # 1 x L40S each, no EFA" in text
    assert "publicAccessCidrs: []                 # replace with your office / VPN egress range" in text


def test_init_does_not_copy_an_example_allow_list_no_request_comes_from(project, capsys):
    """dev's 203.0.113.0/24 (RFC 5737) admits no one: the new endpoint is private, and says so."""
    assert main(["init", *ADMIN, "mine", "--region", "eu-north-1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert _config(project, "mine")["higgsfield:endpoint"]["publicAccessCidrs"] == []
    assert "203.0.113.0/24 of dev is a documentation range" in out and "--public-access-cidr" in out


def test_init_sets_who_reaches_the_api_endpoint_from_its_flag(project, capsys):
    argv = [
        "init",
        *ADMIN,
        "mine",
        "--region",
        "eu-north-1",
        "--public-access-cidr",
        "8.8.8.0/24",
        "--public-access-cidr",
        "1.1.1.1/32",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    assert _config(project, "mine")["higgsfield:endpoint"]["publicAccessCidrs"] == ["8.8.8.0/24", "1.1.1.1/32"]
    assert "documentation range" not in capsys.readouterr().out


def test_an_allow_list_flag_the_stack_refuses_is_named_with_its_value(project, capsys):
    assert main(["init", *ADMIN, "mine", "--region", "eu-north-1", "--public-access-cidr", "10.0.0.0/8"]) == 2
    assert capsys.readouterr().err.startswith(
        "error: --public-access-cidr 10.0.0.0/8: 10.0.0.0/8 is a private (RFC 1918) range"
    )
    assert not (project / "stacks" / "Pulumi.mine.yaml").exists()


def test_more_allow_list_flags_than_eks_takes_are_refused_naming_the_flag_and_the_limit(project, capsys):
    """The user typed --public-access-cidr 41 times, and never the setting init writes them to."""
    flags = [arg for i in range(41) for arg in ("--public-access-cidr", f"8.8.{i}.0/24")]
    assert main(["init", *ADMIN, "mine", "--region", "eu-north-1", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --public-access-cidr: ") and "at most 40" in err and "got 41" in err, err
    assert "publicAccessCidrs" not in err and err.count("\n") == 1
    assert not (project / "stacks" / "Pulumi.mine.yaml").exists()


@pytest.mark.parametrize("cidrs", [["0.0.0.0/0"], ["8.8.8.8/32", "52.0.0.0/8"]], ids=["everyone", "one-too-wide"])
def test_an_allow_list_wider_than_the_policy_pack_allows_is_refused_before_a_file_is_written(project, capsys, cidrs):
    """`check` and every deploy would refuse the stack (eks-endpoint-restricted): init says so first."""
    flags = [arg for cidr in cidrs for arg in ("--public-access-cidr", cidr)]
    assert main(["init", *ADMIN, "mine", "--region", "eu-north-1", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --public-access-cidr {cidrs[-1]}: the ranges open the API server to ")
    assert "eks-endpoint-restricted" in err and err.count("\n") == 1
    assert not (project / "stacks" / "Pulumi.mine.yaml").exists()


def test_a_reserved_range_the_stack_accepts_counts_toward_the_share_the_pack_allows(project, capsys):
    """198.18.0.0/15 (benchmarking) is private to Python's ipaddress but no range the stack settings refuse, and the
    policy pack counts it: twice a /16, which `check` and every deploy would refuse."""
    assert main(["init", *ADMIN, "mine", "--region", "eu-north-1", "--public-access-cidr", "198.18.0.0/15"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --public-access-cidr 198.18.0.0/15: the ranges open the API server to ")
    assert not (project / "stacks" / "Pulumi.mine.yaml").exists()


def test_a_stack_from_init_plans_checks_and_costs_without_edits(project, capsys):
    """eu-north-1: a region whose EC2 prices are bundled and the rest not, so `cost` marks, not fails."""
    assert main(["init", *ADMIN, "mine", "--region", "eu-north-1"]) == 0
    assert main(["plan", "mine"]) == 0
    assert main(["check", "mine"]) == 0
    assert main(["cost", "mine"]) == 0
    assert "0 mandatory" in capsys.readouterr().out


def test_init_from_prod_buys_on_demand_where_prod_had_reservations_and_checks_clean(project, capsys):
    assert main(["init", *ADMIN, "big", "--region", "eu-north-1", "--from", "prod"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # notes wrap within 120 columns
    pools = _config(project, "big")["higgsfield:gpuPools"]
    assert {p.get("capacity", {}).get("type", "on-demand") for p in pools} <= {"on-demand", "spot"}
    assert "capacity-block cr-0a1b2c3d4e5f60718 is prod's, in us-east-2" in out
    assert main(["check", "big"]) == 0


def test_init_refuses_a_region_without_the_templates_pool_types_naming_the_pools_and_the_flag(project, capsys):
    """af-south-1 offers no 8-GPU type with half an H100's memory: no stand-in is offered, only the way."""
    assert main(["init", *ADMIN, "far", "--region", "af-south-1", "--from", "prod"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "error: --region: prod's GPU pools h100 (p5.48xlarge); h200-block (p5en.48xlarge); b200-odcr "
        "(p6-b200.48xlarge) are not offered in af-south-1 (AWS's catalog as bundled with moto"
    )
    assert "pass the pools as --gpu-pool NAME:TYPE:MIN-MAX (`higgsfield types af-south-1` lists" in err
    assert "nearest" not in err and err.count("\n") == 1
    assert not (project / "stacks" / "Pulumi.far.yaml").exists()


def test_init_in_a_region_without_devs_types_offers_the_nearest_offered_pool_as_flags_that_work(project, capsys):
    """Sydney has no g6e: the line names the L4 stand-in, and pasting its flags makes the stack."""
    assert main(["init", *ADMIN, "syd", "--region", "ap-southeast-2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --region: dev's GPU pool l40s (g6e.xlarge, g6e.2xlarge) is not offered in ")
    assert "the nearest offered there, on demand: --gpu-pool l40s:g6.xlarge,g6.2xlarge:0-2 (1 x L4 22 GiB for " in err
    assert not (project / "stacks" / "Pulumi.syd.yaml").exists()
    assert (
        main(["init", *ADMIN, "syd", "--region", "ap-southeast-2", "--gpu-pool", "l40s:g6.xlarge,g6.2xlarge:0-2"]) == 0
    )


def test_init_suggests_every_pool_since_gpu_pool_flags_replace_them_all(project, capsys):
    """prod in Sydney: h100 is offered and kept; p5en and p6-b200 get the H200 p5e."""
    assert main(["init", *ADMIN, "syd", "--region", "ap-southeast-2", "--from", "prod"]) == 2
    assert (
        "--gpu-pool h100:p5.48xlarge:0-16 --gpu-pool h200-block:p5e.48xlarge:0-8 --gpu-pool b200-odcr:p5e.48xlarge:0-4 "
        "(p5e.48xlarge for p5en.48xlarge: the same 8 x H200 141 GiB; "
    ) in capsys.readouterr().err


def test_init_never_overwrites_a_stack(project, capsys):
    before = (project / "stacks" / "Pulumi.dev.yaml").read_text()
    assert main(["init", *ADMIN, "dev", "--region", "eu-north-1"]) == 2
    assert "stacks/Pulumi.dev.yaml exists already" in capsys.readouterr().err
    assert (project / "stacks" / "Pulumi.dev.yaml").read_text() == before


def test_a_type_not_offered_in_the_pools_zone_names_the_zones_that_offer_it(project_copy, capsys):
    project_copy("dev", set_pool(0, instanceTypes=["p5en.48xlarge"], availabilityZone="us-west-2b"))
    assert main(["plan", "bad"]) == 2
    err = capsys.readouterr().err
    assert "instance type 'p5en.48xlarge' is not offered in us-west-2b; offered in us-west-2 (" in err
    assert "(AWS's catalog as bundled with moto" in err


def test_check_refuses_a_stack_without_its_policy_config(project, capsys):
    shutil.copy(project / "stacks" / "Pulumi.dev.yaml", project / "stacks" / "Pulumi.mine.yaml")
    assert main(["check", "mine"]) == 2
    assert (
        "policies/config/mine.json not found: `cp policies/config/dev.json policies/config/mine.json` starts from "
        "the dev levels (the stack's environment), or pass --policy-config FILE" in capsys.readouterr().err
    )


def test_the_missing_policy_config_hint_is_a_command_that_makes_check_run(project, capsys):
    """Not `init`, which refuses a stack file that exists: the hint's cp line, run as printed."""
    import re
    import subprocess

    shutil.copy(project / "stacks" / "Pulumi.prod.yaml", project / "stacks" / "Pulumi.mine.yaml")
    shutil.rmtree(project / "policies")  # a project of one's own: the levels are the installed package's
    assert main(["check", "mine"]) == 2
    command = re.search(r"`((?:mkdir -p [^`]+ && )?cp [^`]+)`", capsys.readouterr().err)[1]
    assert "prod.json" in command
    subprocess.run(command, shell=True, check=True, cwd=project)
    assert main(["check", "mine"]) in (0, 1), capsys.readouterr().err


def test_preflight_says_which_azs_the_account_is_offered_a_missing_type_in():
    """moto answers DescribeInstanceTypeOfferings from the same bundled catalog, as the account would."""
    import boto3
    from moto import mock_aws

    from infra.cli import preflight

    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
        fix = preflight._offered_instead(preflight.Clients(ec2, None, None, None, None), "p5en.48xlarge", "us-west-2b")
    zones = ", ".join(zones_offering("p5en.48xlarge", "us-west-2"))
    assert fix == f"this account is offered it in {zones}: set the pool's availabilityZone to one of them"


# --- a real new stack from flags; nothing bound to another account, region or CI carried over


def test_init_flags_set_the_pools_system_types_and_teams_of_the_new_stack(project, capsys):
    argv = [
        "init",
        *ADMIN,
        "eu",
        "--region",
        "eu-north-1",
        "--from",
        "staging",
        "--gpu-pool",
        "h100:p5.48xlarge:0-4",
        "--gpu-pool",
        "l4:g6.xlarge:1-3",
        "--cpu-type",
        "m7i.xlarge",
        "--team",
        "vision:16",
        "--team",
        "nlp",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    config = _config(project, "eu")
    pools = {p["name"]: p for p in config["higgsfield:gpuPools"]}
    assert pools["h100"]["instanceTypes"] == ["p5.48xlarge"] and (pools["l4"]["minSize"], pools["l4"]["maxSize"]) == (
        1,
        3,
    )
    assert config["higgsfield:cpuNodes"]["instanceTypes"] == ["m7i.xlarge"]
    teams = {t["name"]: t for t in config["higgsfield:scheduler"]["teams"]}
    assert teams["vision"]["gpuQuota"] == 16 and teams["nlp"]["gpuQuota"] == 4 * 8 + 3 * 1  # the new pools' GPUs
    assert len({t["uid"] for t in teams.values()}) == 2


def test_init_never_copies_the_ci_connection_state_bucket_admins_image_or_s3_link(project, capsys):
    assert main(["init", *ADMIN, "eu", "--region", "eu-north-1", "--from", "prod"]) == 0, capsys.readouterr().err
    config = _config(project, "eu")
    out = " ".join(capsys.readouterr().out.split())  # notes wrap within 120 columns
    assert "higgsfield:delivery" not in config and "s3" not in config["higgsfield:fsx"]
    assert config["higgsfield:admins"] == [ADMIN[1]]  # the flag's, none of prod's
    for said in ("higgsfield:delivery (CI: account", "fsx.s3 linked prod's bucket"):
        assert said in out


def test_init_never_copies_the_health_gate_image_which_runs_privileged_on_every_gpu_node(project_copy, capsys):
    from tests.conftest import set_key

    gate = "111122223333.dkr.ecr.us-west-2.amazonaws.com/higgsfield-dev/training:src-abc"
    project = project_copy("dev", set_key("higgsfield:healthGateImage", gate))
    assert main(["init", *ADMIN, "mine", "--region", "eu-central-1", "--from", "bad"]) == 0, capsys.readouterr().err
    assert "higgsfield:healthGateImage" not in _config(project, "mine")
    assert f"healthGateImage {gate} is bad's: not copied" in " ".join(capsys.readouterr().out.split())


def test_init_without_an_admin_is_refused_naming_the_flag_and_writes_nothing(project, capsys):
    assert main(["init", "eu", "--region", "eu-north-1", "--from", "prod"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: --admin: the new stack needs the IAM role or user ARN")
        and "prod's admins are not copied" in err
    )
    assert (
        not (project / "stacks" / "Pulumi.eu.yaml").exists()
        and not (project / "policies" / "config" / "eu.json").exists()
    )


def test_jobs_for_a_stack_that_names_no_account_are_refused_not_rendered_with_a_placeholder(project_copy, capsys):
    """No admins and no delivery: `<account>.dkr.ecr...` is no registry a node can pull from."""
    from tests.conftest import delete_key

    project_copy(
        "dev", lambda config: (delete_key("higgsfield:admins")(config), delete_key("higgsfield:delivery")(config))
    )
    assert main(["jobs", "render", "bad", "pytorch-ddp"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: higgsfield:admins: names no AWS account") and "--image" in err
    assert (
        main(
            [
                "jobs",
                "render",
                "bad",
                "pytorch-ddp",
                "--image",
                "123456789012.dkr.ecr.us-west-2.amazonaws.com/x/training:1",
            ]
        )
        == 0
    )


def test_init_puts_every_efa_pool_in_one_zone_with_the_file_system(project, capsys):
    argv = [
        "init",
        *ADMIN,
        "eu",
        "--region",
        "eu-north-1",
        "--from",
        "prod",
        "--gpu-pool",
        "a:p5.48xlarge:0-2",
        "--gpu-pool",
        "b:p5en.48xlarge:0-2",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    zones = {p["availabilityZone"] for p in _config(project, "eu")["higgsfield:gpuPools"]}
    assert (
        len(zones) == 1 and "availabilityZone" not in _config(project, "eu")["higgsfield:fsx"]
    )  # FSx defaults to the EFA zone


@pytest.mark.parametrize(
    "flag, value", [("--gpu-pool", "h100"), ("--gpu-pool", "h100:p5.48xlarge:four"), ("--team", "a:b:c")]
)
def test_a_malformed_init_flag_is_refused_naming_the_flag(project, capsys, flag, value):
    assert main(["init", *ADMIN, "eu", "--region", "eu-north-1", flag, value]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"error: {flag}: ")
        and err.count("\n") == 1
        and not (project / "stacks" / "Pulumi.eu.yaml").exists()
    )


def test_init_output_fits_120_columns(project, capsys):
    assert main(["init", *ADMIN, "eu", "--region", "eu-north-1", "--from", "prod"]) == 0
    assert max(map(len, capsys.readouterr().out.splitlines())) <= 120


def test_a_pool_flag_the_stack_refuses_is_named_with_its_value_not_a_line_of_an_unwritten_file(project, capsys):
    assert main(["init", *ADMIN, "eu", "--region", "eu-north-1", "--gpu-pool", "h100:p5.48xlarge:0-99999"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --gpu-pool h100:p5.48xlarge:0-99999: gpuPools[0].maxSize: must be at most 450")
    assert "Pulumi.eu.yaml" not in err and not (project / "stacks" / "Pulumi.eu.yaml").exists()


def test_a_team_flag_the_stack_refuses_is_named_with_its_value_in_one_line(project, capsys):
    """The team's name is its queue's too: one line for the flag, not one for each."""
    assert main(["init", *ADMIN, "eu", "--region", "eu-north-1", "--team", "Vision:8"]) == 2
    assert capsys.readouterr().err == (
        "error: --team Vision:8: the team's name 'Vision' must be a lowercase DNS label of at most 30 characters "
        "(a-z, 0-9, '-'; starts and ends alphanumeric)\n"
    )


def test_a_mistyped_instance_type_is_a_typo_with_the_closest_types_not_a_type_offered_nowhere(project, capsys):
    assert main(["init", *ADMIN, "eu", "--region", "eu-north-1", "--gpu-pool", "h100:P5.48xlarge:0-2"]) == 2
    err = capsys.readouterr().err
    assert "no such instance type in AWS's catalog" in err and "did you mean p5.48xlarge" in err


def test_check_names_one_refusal_once_with_every_example_it_stops(project_copy, capsys):
    from infra.offline import check, jobs
    from tests.conftest import delete_key

    project_copy(
        "dev", lambda config: (delete_key("higgsfield:admins")(config), delete_key("higgsfield:delivery")(config))
    )
    result = check.check_stack("bad")
    (finding,) = [f for f in result.mandatory if f.policy == "example-jobs-fit"]
    needs_ours = [
        e for e in jobs.examples_for(result.plan.config) if e not in jobs.OWN_IMAGE
    ]  # the others run upstream images
    assert len(needs_ours) > 1 and all(f"examples/{e}.yaml" in finding.message for e in needs_ours)
    assert finding.message.count("higgsfield:admins: names no AWS account") == 1


def _new_project(tmp_path, monkeypatch, capsys, prefix):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.prefix", str(prefix))  # where the package is installed (a virtualenv)
    assert main(["init", *ADMIN, "paris", "--region", "eu-north-1"]) == 0
    return yaml.safe_load((tmp_path / "Pulumi.yaml").read_text()), " ".join(capsys.readouterr().out.split())


def test_a_new_project_names_no_path_of_this_machine_for_a_virtualenv_outside_it(tmp_path, monkeypatch, capsys):
    """Pulumi.yaml is committed: an absolute path to one's own virtualenv fails on a teammate's machine."""
    project, said = _new_project(tmp_path, monkeypatch, capsys, "/home/me/venvs/higgsfield")
    assert "virtualenv" not in project["runtime"]["options"]
    assert "/home/me/venvs" not in (tmp_path / "policies" / "PulumiPolicy.yaml").read_text()
    assert "`pulumi` runs python3 from PATH" in said and "PULUMI_PYTHON_CMD=" in said


def test_a_virtualenv_inside_the_project_is_its_runtime_relative_to_the_project(tmp_path, monkeypatch, capsys):
    project, said = _new_project(tmp_path, monkeypatch, capsys, tmp_path / ".venv")
    assert project["runtime"]["options"]["virtualenv"] == ".venv"
    policy = yaml.safe_load((tmp_path / "policies" / "PulumiPolicy.yaml").read_text())
    assert policy["runtime"]["options"]["virtualenv"] == "../.venv"  # relative to policies/
    assert "PULUMI_PYTHON_CMD" not in said


def test_the_projects_program_is_the_installed_infra_even_beside_a_folder_named_infra(tmp_path, monkeypatch, capsys):
    """Pulumi runs the project's __main__.py with the project first on the import path: a project's
    own `infra/` package must not stand in for the installed program."""
    import subprocess
    import sys

    _new_project(tmp_path, monkeypatch, capsys, "/elsewhere")
    (tmp_path / "infra").mkdir()
    (tmp_path / "infra" / "__init__.py").write_text("raise SystemExit('the project infra ran')\n")
    probe = (
        "import importlib.util, runpy, sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "runpy.run_module = lambda name, **_: print(importlib.util.find_spec(name).origin)\n"
        f"runpy.run_path({str(tmp_path / '__main__.py')!r}, run_name='__main__')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(ROOT)}
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(ROOT / "infra" / "__init__.py")


def test_a_pool_flag_whose_minimum_is_above_its_maximum_says_so(project, capsys):
    assert main(["init", *ADMIN, "mine", "--region", "eu-north-1", "--gpu-pool", "h100:p5.48xlarge:4-0"]) == 2
    assert capsys.readouterr().err == (
        "error: --gpu-pool: 'h100:p5.48xlarge:4-0': its minimum 4 is above its maximum 0 (MIN-MAX nodes)\n"
    )


def test_the_pool_flags_help_says_sizes_are_optional_and_their_default(capsys):
    with pytest.raises(SystemExit):
        main(["init", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "NAME:TYPE[,TYPE][:MIN-MAX]" in help_text and "its nodes from 0 to 2 if no MIN-MAX" in help_text


def test_init_leaves_nothing_in_stacks_but_the_stack_file(tmp_path, monkeypatch, capsys):
    """No lock file to be swept into the first commit."""
    monkeypatch.chdir(tmp_path)
    assert main(["init", *ADMIN, "paris", "--region", "eu-north-1"]) == 0
    assert sorted(p.name for p in (tmp_path / "stacks").iterdir()) == ["Pulumi.paris.yaml"]


def test_a_team_gets_the_same_uid_in_every_stack_init_makes(project, capsys):
    """Its files on FSx and in S3 belong to one UID, whichever stack the new one starts from."""
    for name, base in (("one", "dev"), ("two", "prod")):
        argv = [
            "init",
            *ADMIN,
            name,
            "--region",
            "eu-north-1",
            "--from",
            base,
            "--team",
            "speech:1",
            "--team",
            "nlp:1",
        ]
        assert main(argv) == 0, capsys.readouterr().err
    uids = [
        {t["name"]: t["uid"] for t in _config(project, stack)["higgsfield:scheduler"]["teams"]}
        for stack in ("one", "two")
    ]
    assert uids[0] == uids[1] and len(set(uids[0].values())) == 2


def _a_region_the_catalog_lacks() -> str:
    """An EKS region whose AWS offerings moto does not bundle (ap-southeast-7 with moto 5.2.6)."""
    from infra.config import eks_regions
    from infra.core.bundled import regions

    lacking = sorted(set(eks_regions()) - set(regions()))
    if not lacking:
        pytest.skip("the bundled catalog has offerings for every EKS region")
    return lacking[0]


def _in_region(region: str):
    def change(config: dict) -> None:
        config["aws:region"] = region
        config["higgsfield:availabilityZones"] = [f"{region}a", f"{region}b"]
        config["higgsfield:gpuPools"] = [{**p, "availabilityZone": f"{region}a"} for p in config["higgsfield:gpuPools"]]

    return change


def test_a_stack_in_a_region_the_catalog_lacks_plans_and_says_its_types_are_checked_by_preflight(project_copy, capsys):
    region = _a_region_the_catalog_lacks()
    project_copy("dev", _in_region(region))
    assert main(["plan", "bad"]) == 0, capsys.readouterr().err
    (note,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: aws:region")]
    assert note.startswith(f"note: aws:region {region}: AWS's catalog as bundled with moto")
    assert note.endswith("`higgsfield preflight bad` checks them against your account")


def test_check_of_a_stack_in_a_region_the_catalog_lacks_prints_plans_note_and_still_passes(project_copy, capsys):
    """`check` evaluates the same offline plan as `plan`: what that plan cannot know is said by both."""
    region = _a_region_the_catalog_lacks()
    project_copy("dev", _in_region(region))
    assert main(["plan", "bad"]) == 0, capsys.readouterr().err
    plan_notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: ")]
    assert main(["check", "bad"]) == 0, capsys.readouterr().err
    check_notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: ")]
    assert any(note.startswith(f"note: aws:region {region}:") for note in plan_notes)
    assert check_notes == plan_notes


def test_init_in_a_region_the_catalog_lacks_says_how_to_write_the_stack_instead(project, capsys):
    region = _a_region_the_catalog_lacks()
    assert main(["init", *ADMIN, "mine", "--region", region]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "set aws:region and the zones yourself" in err
    assert not (project / "stacks" / "Pulumi.mine.yaml").exists()
