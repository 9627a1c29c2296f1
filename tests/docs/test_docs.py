"""The README is a landing page and docs/ the manual by purpose; every link in either leads somewhere."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import ROOT

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in page.read_text().splitlines() if line.startswith("#")}


def test_readme_is_a_landing_page_of_at_most_200_lines():
    assert len(README.read_text().splitlines()) <= 200


def test_readme_says_first_that_the_platform_has_not_run_on_a_real_account():
    head = "\n".join(README.read_text().splitlines()[:40])
    assert "## Status" in head and "Never deployed on a real AWS account" in head


def test_readme_names_what_a_user_needs_and_the_two_commands():
    text = README.read_text()
    for need in ("AWS account", "Pulumi CLI", "Docker"):
        assert need in text
    assert "higgsfield plan dev" in text and "python -m pytest -q -n auto" in text


@pytest.mark.parametrize(
    "page",
    [
        "getting-started.md",
        "tasks.md",
        "troubleshooting.md",
        "security.md",
        "verified.md",
        "reference/settings.md",
        "reference/cli.md",
        "concepts/training-jobs.md",
        "performance.md",
    ],
)
def test_the_manual_has_a_page_for_each_purpose(page):
    assert (ROOT / "docs" / page).is_file()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists() or anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def _quick_start() -> list[list[str]]:
    """The README quick start's offline `higgsfield` commands, as argv lists (continuations joined,
    comments dropped, `a && b` two commands, `a | b` only a)."""
    import shlex

    text = README.read_text().split("## Quick start", 1)[1]
    block = text.split("```bash\n", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    commands = []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        while words:
            command, words = (
                (words[: words.index("&&")], words[words.index("&&") + 1 :]) if "&&" in words else (words, [])
            )
            command = command[: command.index("|")] if "|" in command else command
            if command[0] == "higgsfield" and command[1] in ("init", "check", "cost", "plan", "jobs"):
                commands.append(command[1:])
    return commands


def test_the_readme_quick_start_runs_as_written_to_a_rendered_job(tmp_path, monkeypatch, capsys):
    """Landing page to a first job's YAML for one's own region, types and team, offline."""
    import shutil

    import yaml

    from infra.cli.main import main

    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    shutil.copytree(ROOT / "stacks", tmp_path / "stacks")
    shutil.copytree(ROOT / "policies" / "config", tmp_path / "policies" / "config")
    monkeypatch.chdir(tmp_path)
    commands = _quick_start()
    assert [c[0] for c in commands] == ["init", "check", "cost", "jobs"]
    for argv in commands:
        capsys.readouterr()
        assert main(argv) == 0, (argv, capsys.readouterr().err)
    job = next(d for d in yaml.safe_load_all(capsys.readouterr().out) if d and d["kind"] == "PyTorchJob")
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert job["metadata"]["namespace"] == "vision" and pod["nodeSelector"]["higgsfield.io/pool"] == "h100"
    assert pod["containers"][0]["image"].startswith("123456789012.dkr.ecr.eu-north-1.amazonaws.com/")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_shell_line_in_the_manual_ends_a_command_it_means_to_continue(page):
    """`cmd \\   # comment` is no continuation: bash reads an escaped space, then the comment, and
    runs the next line as a command of its own."""
    blocks = re.findall(r"```(?:bash|sh|shell)\n(.*?)```", page.read_text(), re.S)
    assert not [line for block in blocks for line in block.splitlines() if re.search(r"\\[ \t]+(#|$)", line)]


# (column, the price-file keys it needs) of docs/reference/reports.md's table of what is priced where.
_PRICED_COLUMNS = (
    ("EKS", ("eks_cluster_hour", "eks_cluster_extended_support_hour")),
    ("KMS", ("kms_key_month",)),
    ("EBS gp3", ("ebs_gp3_gb_month",)),
    ("NAT gateway", ("nat_gateway_hour", "nat_gateway_gb")),
    ("VPC endpoints", ("vpc_interface_endpoint_az_hour",)),
    ("FSx for Lustre", ("fsx_lustre_gb_month",)),
    ("CloudWatch Logs", ("cloudwatch_logs_ingest_gb",)),
)


def priced_table() -> list[str]:
    """The table of docs/reference/reports.md: per region the file lists, the instance families whose
    EC2 prices it has (with how many sizes of each) and whether each other service is priced there
    (its own figure or the file's every_region one)."""
    from infra.offline.cost import EVERY_REGION, load_prices

    prices = load_prices()
    every = prices.get(EVERY_REGION, {})
    head = ["Region", "EC2 on-demand", *(name for name, _ in _PRICED_COLUMNS)]
    rows = [head, ["---"] * len(head)]
    for region, figures in sorted(prices["regions"].items()):
        known = every | figures
        marks = ["priced" if all(key in known for key in keys) else "`--refresh`" for _, keys in _PRICED_COLUMNS]
        sizes = Counter(name.split(".")[0] for name in figures.get("ec2_on_demand_hour", {}))
        rows.append([region, ", ".join(f"{family} ({count})" for family, count in sorted(sizes.items())), *marks])
    return ["| " + " | ".join(row) + " |" for row in rows]


def test_the_manual_lists_exactly_the_regions_and_services_the_price_file_prices():
    lines = (ROOT / "docs" / "reference" / "reports.md").read_text().splitlines()
    start = lines.index("<!-- priced: the table tests/docs/test_docs.py::priced_table makes of prices.json -->") + 1
    shown = lines[start : start + len(priced_table())]
    assert shown == priced_table(), "\n".join(["the table should read:", *priced_table()])
