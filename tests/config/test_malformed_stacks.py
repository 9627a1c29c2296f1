"""Malformed and hostile stack files: every one exits 2 through the CLI with `file:line key:
message` lines naming the key (or the file and line when it is no stack file), never a
traceback; a file with several mistakes gets one line for each."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time

import pytest

from infra.cli.main import main
from tests.conftest import ROOT

DEV = (ROOT / "stacks" / "Pulumi.dev.yaml").read_text()
POOL = "    - name: l40s\n"


def replace(old: str, new: str, base: str = DEV) -> str:
    assert old in base, old
    return base.replace(old, new, 1)


def line_of(text: str) -> int:
    """The line of the dev stack file that holds `text`."""
    return next(i for i, line in enumerate(DEV.splitlines(), 1) if text in line)


def append(lines: str, base: str = DEV) -> str:
    return base + lines


def alias_bomb() -> str:
    lines = ["config:", '  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        lines.append(f"  b{i}: &b{i} [" + ",".join([f"*{'a' if i == 1 else f'b{i - 1}'}"] * 9) + "]")
    return "\n".join(lines) + "\n"


FILE = "stacks/Pulumi.bad.yaml"
CASES: dict[str, tuple[str | bytes, str | None, str]] = {
    # not a stack file at all: the file and the line
    "binary_file": (b"\x00\x01\x02\xff\xfe", None, "not UTF-8"),
    "control_characters": ("config:\n  a: \x07\n", None, "not YAML"),
    "plain_text": ("just some text\n", None, "not a map with a config: section"),
    "top_level_list": ("- config\n- aws:region\n", None, "is a list"),
    "empty_file": ("", None, "is empty"),
    "config_is_a_list": ("config:\n  - aws:region\n", None, "config: must be a map"),
    "no_config_section": ("confg:\n  aws:region: us-west-2\n", None, "has no config: section"),
    "tab_indentation": (replace("  aws:region: us-west-2", "\taws:region: us-west-2"), None, "tab"),
    "yaml_syntax_error": (replace("[us-west-2a, us-west-2b]", "[us-west-2a, us-west-2b"), None, "YAML syntax"),
    "two_documents": (DEV + "---\nconfig: {}\n", None, "YAML syntax"),
    "unknown_yaml_tag": (
        replace("higgsfield:environment: dev", "higgsfield:environment: !!python/object:os.system dev"),
        None,
        "python/object",
    ),
    "alias_bomb": (alias_bomb(), None, "more than 100,000 values"),
    "oversized_file": ("config:\n" + "  # padding\n" * 120_000, None, "bytes"),
    # the file's own mistakes
    "duplicate_environment": (
        append("  higgsfield:environment: prod\n"),
        "higgsfield:environment",
        "set twice (first at line 4)",
    ),
    "duplicate_nested_key": (
        replace("    maxSize: 4\n", "    maxSize: 4\n    maxSize: 40\n"),
        "higgsfield:cpuNodes.maxSize",
        "set twice",
    ),
    "unknown_section": (DEV + "environmnt: [a/b]\n", "environmnt", "did you mean environment?"),
    "esc_environment_not_a_list": (
        DEV + "environment: higgsfield/dev\n",
        "environment",
        "list of Pulumi ESC environment names",
    ),
    # typos and namespaces
    "namespace_typo": (append("  higgsfeld:fsx: {enabled: true}\n"), "higgsfeld:fsx", "did you mean higgsfield:fsx?"),
    "unnamespaced_key": (append("  gpuPools: []\n"), "gpuPools", "did you mean higgsfield:gpuPools?"),
    "aws_key_typo": (append("  aws:regoin: us-west-2\n"), "aws:regoin", "did you mean aws:region?"),
    "aws_key_not_read": (
        append("  aws:skipMetadataApiCheck: false\n"),
        "aws:skipMetadataApiCheck",
        "not an aws setting this program reads",
    ),
    "aws_profile": (append("  aws:profile: admin\n"), "aws:profile", "set AWS_PROFILE in your shell"),
    "foreign_namespace": (
        append("  kubernetes:context: prod\n"),
        "kubernetes:context",
        "unknown config namespace 'kubernetes'",
    ),
    "gpu_pools_typo_names_the_typo": (
        replace("higgsfield:gpuPools:", "higgsfield:gpuPool:"),
        "higgsfield:gpuPool",
        "did you mean higgsfield:gpuPools?",
    ),
    "nested_typo": (
        replace("    maxSize: 4\n", "    maxSzie: 4\n"),
        "higgsfield:cpuNodes.maxSzie",
        "did you mean maxSize?",
    ),
    "pool_field_typo": (
        replace("      rootVolumeGiB: 150", "      rootVolumeGib: 150"),
        "higgsfield:gpuPools[0].rootVolumeGib",
        "did you mean rootVolumeGiB?",
    ),
    # numbers that should be text
    "kubernetes_version_as_number": (
        replace('higgsfield:kubernetesVersion: "1.35"', "higgsfield:kubernetesVersion: 1.30"),
        "higgsfield:kubernetesVersion",
        'unquoted 1.30 as a number: quote it, "1.30"',
    ),
    "label_value_as_number": (
        replace("      rootVolumeGiB: 150", "      rootVolumeGiB: 150\n      labels: {version: 1.10}"),
        "higgsfield:gpuPools[0].labels.version",
        'quote it, "1.10"',
    ),
    "tag_value_as_boolean": (replace("    team: ml-platform", "    team: true"), "higgsfield:tags.team", "quote it"),
    # bounds AWS and Kubernetes have
    "node_group_max_size_absurd": (
        replace("    maxSize: 4\n", "    maxSize: 1000000000000000000000000000000\n"),
        "higgsfield:cpuNodes.maxSize",
        "must be at most 450",
    ),
    "pool_max_size_over_eks_quota": (
        replace("      maxSize: 2\n", "      maxSize: 451\n"),
        "higgsfield:gpuPools[0].maxSize",
        "EKS quota",
    ),
    "root_volume_over_gp3_max": (
        replace("rootVolumeGiB: 150", "rootVolumeGiB: 99999999"),
        "higgsfield:gpuPools[0].rootVolumeGiB",
        "gp3 maximum",
    ),
    "metrics_volume_over_gp3_max": (
        replace("metricsStorageGiB: 50", "metricsStorageGiB: 70000"),
        "higgsfield:observability.metricsStorageGiB",
        "gp3 maximum",
    ),
    "fsx_capacity_over_api_max": (
        replace("storageCapacityGiB: 1200", "storageCapacityGiB: 99999999999"),
        "higgsfield:fsx.storageCapacityGiB",
        "FSx API maximum",
    ),
    "fsx_capacity_not_a_valid_size": (
        replace("storageCapacityGiB: 1200", "storageCapacityGiB: 3000"),
        "higgsfield:fsx.storageCapacityGiB",
        "multiple of 2400",
    ),
    "cpu_instance_type_not_in_catalog": (
        replace("[m7i.xlarge]", "[m99.superlarge]"),
        "higgsfield:cpuNodes.instanceTypes[0]",
        "not offered anywhere",
    ),
    "gpu_instance_type_not_in_catalog": (
        replace("[g6e.xlarge, g6e.2xlarge]", "[m99.superlarge]"),
        "higgsfield:gpuPools[0].instanceTypes[0]",
        "not offered anywhere",
    ),
    # Kubernetes syntax
    "label_key_invalid": (
        replace("      rootVolumeGiB: 150", '      rootVolumeGiB: 150\n      labels: {"bad key!": x}'),
        "higgsfield:gpuPools[0].labels.bad key!",
        "qualified name",
    ),
    "label_value_invalid": (
        replace("      rootVolumeGiB: 150", '      rootVolumeGiB: 150\n      labels: {team: "-x-"}'),
        "higgsfield:gpuPools[0].labels.team",
        "label value",
    ),
    "taint_key_invalid": (
        replace("      rootVolumeGiB: 150", '      rootVolumeGiB: 150\n      taints: [{key: "a/b/c", value: x}]'),
        "higgsfield:gpuPools[0].taints[0].key",
        "qualified name",
    ),
    "taint_value_invalid": (
        replace("      rootVolumeGiB: 150", '      rootVolumeGiB: 150\n      taints: [{key: dedicated, value: "a b"}]'),
        "higgsfield:gpuPools[0].taints[0].value",
        "label value",
    ),
    "pool_name_not_dns": (replace(POOL, "    - name: L40S_pool\n"), "higgsfield:gpuPools[0].name", "DNS label"),
    "team_name_not_dns": (
        replace("- {name: ml, queue: ml,", "- {name: ML_team, queue: ml,"),
        "higgsfield:scheduler.teams[0].name",
        "DNS label",
    ),
    # plaintext credentials
    "aws_secret_key_plaintext": (
        append("  aws:secretKey: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"),
        "aws:secretKey",
        "pulumi config set --secret aws:secretKey",
    ),
    "aws_access_key_plaintext": (
        append("  aws:accessKey: AKIAIOSFODNN7EXAMPLE\n"),
        "aws:accessKey",
        "pulumi config set --secret",
    ),
    "password_named_key": (
        append("  higgsfield:grafanaPassword: hunter2\n"),
        "higgsfield:grafanaPassword",
        "pulumi config set --secret",
    ),
    "access_key_id_in_a_tag": (
        replace("    team: ml-platform", "    team: AKIAIOSFODNN7EXAMPLE"),
        "higgsfield:tags.team",
        "an AWS access key id",
    ),
    # YAML 1.1 (this reader) and YAML 1.2 (Pulumi) read these differently: refused, with the spelling that means one
    # thing
    "octal_uid": (
        replace("uid: 20001}", "uid: 020001}"),
        "higgsfield:scheduler.teams[0].uid",
        "the number 8193 (octal)",
    ),
    "octal_in_a_tag_value": (
        replace("    team: ml-platform", "    team: 010"),
        "higgsfield:tags.team",
        'quote it, "010"',
    ),
    "yes_for_a_switch": (
        replace("    nodeAutoRepair: true", "    nodeAutoRepair: yes"),
        "higgsfield:observability.nodeAutoRepair",
        "write true for a switch",
    ),
    "off_for_a_string": (replace("    team: ml-platform", "    team: off"), "higgsfield:tags.team", 'quote it, "off"'),
    "base_60_size": (replace("    maxSize: 4\n", "    maxSize: 1:30\n"), "higgsfield:cpuNodes.maxSize", "(base 60)"),
    "underscored_size": (
        replace("    maxSize: 4\n", "    maxSize: 1_0\n"),
        "higgsfield:cpuNodes.maxSize",
        "_ separators",
    ),
    "integer_of_5000_digits": (
        replace("    maxSize: 4\n", "    maxSize: " + "9" * 5000 + "\n"),
        "higgsfield:cpuNodes.maxSize",
        "must be an integer",
    ),
    "timestamp_with_month_13": (
        replace("    maxSize: 4\n", "    maxSize: 2027-13-45\n"),
        "higgsfield:cpuNodes.maxSize",
        "must be an integer",
    ),
    "deeply_nested_value": (
        append(
            "  higgsfield:tags: " + "[" * 60 + "]" * 60 + "\n",
            replace("  higgsfield:tags:\n    team: ml-platform\n    cost-center: research-dev\n", ""),
        ),
        "higgsfield:tags",
        "nests deeper than 16",
    ),
    "encrypted_required_setting": (
        replace("higgsfield:environment: dev", "higgsfield:environment: {secure: v1:abc}"),
        "higgsfield:environment",
        "cannot decrypt",
    ),
}


@pytest.fixture
def stack_text(tmp_path, monkeypatch):
    """Write `text` as stacks/Pulumi.<name>.yaml of a copy of the project and work there."""

    def write(text: str | bytes, name: str = "bad") -> None:
        (tmp_path / "stacks").mkdir(exist_ok=True)
        shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
        path = tmp_path / "stacks" / f"Pulumi.{name}.yaml"
        path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
        monkeypatch.chdir(tmp_path)

    return write


def plan_errors(capsys, name: str = "bad") -> list[str]:
    assert main(["plan", name]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err, err
    return err.splitlines()


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_stack_exits_2_naming_the_key_and_line(case, stack_text, capsys):
    text, key, detail = CASES[case]
    stack_text(text)
    lines = plan_errors(capsys)
    prefix = rf"^{re.escape(FILE)}:\d+ {re.escape(key)}: " if key else rf"^{re.escape(FILE)}:\d+: "
    assert any(re.match(prefix, line) and detail in line for line in lines), lines


def test_alias_bomb_is_refused_quickly(stack_text, capsys):
    stack_text(alias_bomb())
    start = time.perf_counter()
    plan_errors(capsys)
    assert time.perf_counter() - start < 2


def test_stack_with_five_mistakes_reports_all_five_with_their_lines(stack_text, capsys):
    text = replace("    maxSize: 4\n", "    maxSize: 4000\n")
    text = replace("higgsfield:vpcCidr: 10.20.0.0/16", "higgsfield:vpcCidr: 8.8.0.0/16", text)
    text = replace("expander: least-waste", "expander: cheapest", text)
    text = append("  higgsfeld:fsx: {enabled: true}\n  higgsfield:environment: prod\n", text)
    stack_text(text)
    lines = plan_errors(capsys)
    end = len(DEV.splitlines())
    expected = [
        f"{FILE}:{line_of('higgsfield:vpcCidr:')} higgsfield:vpcCidr: ",
        f"{FILE}:{line_of('    maxSize: 4')} higgsfield:cpuNodes.maxSize: ",
        f"{FILE}:{line_of('expander: least-waste')} higgsfield:autoscaler.expander: ",
        f"{FILE}:{end + 1} higgsfeld:fsx: ",
        f"{FILE}:{end + 2} higgsfield:environment: ",
    ]
    assert [line[: len(want)] for line, want in zip(lines, expected, strict=False)] == expected and len(lines) == 5, (
        lines
    )


def test_stack_name_that_is_not_a_dns_label_is_refused(stack_text, capsys):
    stack_text(DEV, name="Stg_1")
    lines = plan_errors(capsys, "Stg_1")
    assert any(
        re.match(r"stacks/Pulumi.Stg_1.yaml:\d+ stack: 'Stg_1' is not a valid stack name", line) for line in lines
    ), lines


def test_encrypted_values_and_esc_imports_are_accepted_and_noted_offline(stack_text, capsys):
    stack_text(
        append("  aws:secretKey:\n    secure: v1:AAAABBBB\n  higgsfield:trainingImage:\n    secure: v1:CCCCDDDD\n")
        + "environment:\n  - higgsfield/dev\n"
    )
    assert main(["plan", "bad"]) == 0
    out = capsys.readouterr().out
    assert "note: aws:secretKey is encrypted (secure:): unknown offline, shown as [secret]" in out
    assert "note: higgsfield:trainingImage is encrypted (secure:): unknown offline, shown as [secret]" in out
    assert "note: imports Pulumi ESC environment(s) higgsfield/dev" in out


def test_console_script_reports_a_yaml_error_without_a_traceback(stack_text, tmp_path):
    stack_text(replace("  aws:region: us-west-2", "\taws:region: us-west-2"))
    done = subprocess.run(
        [sys.executable, "-m", "infra.cli", "plan", "bad"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"{FILE}:{line_of('aws:region')}: YAML syntax"), done.stderr


def test_yaml_merge_keys_work_with_explicit_keys_winning(tmp_path):
    from infra.offline.stack_file import read

    path = tmp_path / "Pulumi.merge.yaml"
    path.write_text(
        "config:\n  higgsfield:cpuNodes: &cpu {instanceTypes: [m7i.xlarge], minSize: 2, maxSize: 4}\n"
        "  higgsfield:endpoint: {}\n  higgsfield:autoscaler:\n    <<: {expander: random, scaleDownUnneededTime: "
        "5m}\n    expander: priority\n"
    )
    stack = read(path)
    assert stack.problems == []
    assert stack.config["higgsfield:autoscaler"] == {"expander": "priority", "scaleDownUnneededTime": "5m"}


@pytest.mark.parametrize("written", ['"13.5"', "13.5"], ids=["quoted", "unquoted-read-as-written"])
def test_an_unknown_version_yaml_read_as_written_gets_no_advice_to_quote_it(written, stack_text, capsys):
    """Quoting 13.5 changes nothing: the version is unknown, and the line says that alone."""
    stack_text(replace('higgsfield:kubernetesVersion: "1.35"', f"higgsfield:kubernetesVersion: {written}"))
    [line] = plan_errors(capsys)
    assert "higgsfield:kubernetesVersion: '13.5' is not supported; use one of: " in line
    assert "quote" not in line and "if you wrote" not in line
