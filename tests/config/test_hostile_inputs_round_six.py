"""A sixth round of hostile inputs, of classes the earlier rounds did not try: the project file
(Pulumi.yaml) itself hostile, Pulumi's config variables left in the shell, a hand-typed plaintext
under `secure:`, plaintext spelled like an encrypted value's offline stand-in, a stack file's own
mistake reported more than once, and a base stack file of `diff` that is no UTF-8. Each is refused
with one line per mistake naming the file and the key (exit 2), or accepted where it is the stack's
own valid file, never a traceback."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from infra.cli.main import main
from tests.conftest import ROOT

DEV = (ROOT / "stacks" / "Pulumi.dev.yaml").read_text()
APPENDED = len(DEV.splitlines()) + 1  # the line a test appends to the dev stack file
PROJECT = (ROOT / "Pulumi.yaml").read_text()


@pytest.fixture
def project(tmp_path, monkeypatch):
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "Pulumi.h.yaml").write_text(DEV)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _verdict(capsys, *argv: str) -> tuple[int, list[str]]:
    code = main(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err and "rerun with --debug" not in err, err
    return code, err.strip().splitlines()


def _alias_bomb() -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 7)]
    return PROJECT + "\n".join(lines) + "\n"


HOSTILE_PROJECT_FILES = {  # Pulumi.yaml -> what its one line says
    "a_list": ("- name\n- higgsfield\n", "Pulumi.yaml:1: is a list, not a map naming the project"),
    "a_python_tag": (PROJECT + "x: !!python/object:os.system a\n", "python/object:os.system is not plain YAML"),
    "utf16": (PROJECT.encode("utf-16"), "Pulumi.yaml:1: is not UTF-8 text"),
    "a_syntax_error": (PROJECT + "x: [\n", "YAML syntax"),
    "no_name": (PROJECT.replace("name: higgsfield\n", ""), "name: is missing, but the program reads its settings"),
    "another_name": (PROJECT.replace("name: higgsfield", "name: other"), "name: is 'other'"),
    "name_twice": (PROJECT + "name: other\n", "name: is a section written twice"),
    "an_alias_bomb": (_alias_bomb(), "expands to more than 100,000 values"),
    "config_a_list": (PROJECT.replace("config:\n  environment:", "config: [a]\nc:\n  environment:"), "config: must be"),
    "stack_files_elsewhere": (
        PROJECT.replace("stackConfigDir: stacks", "stackConfigDir: ../other"),
        "stackConfigDir: is '../other', but these tools read the stack files in stacks/",
    ),
    "stack_files_beside_it": (PROJECT.replace("stackConfigDir: stacks\n", ""), "stackConfigDir: is missing"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_PROJECT_FILES))
def test_a_hostile_project_file_is_one_line_naming_pulumi_yaml(project, capsys, case):
    text, says = HOSTILE_PROJECT_FILES[case]
    (project / "Pulumi.yaml").write_bytes(text if isinstance(text, bytes) else text.encode())
    code, lines = _verdict(capsys, "bootstrap", "h")
    assert code == 2 and len(lines) == 1 and lines[0].startswith("Pulumi.yaml:") and says in lines[0], lines


def test_a_project_file_that_is_a_link_to_one_is_read(project, capsys):
    (project / "shared.yaml").write_text(PROJECT)
    (project / "Pulumi.yaml").unlink()
    (project / "Pulumi.yaml").symlink_to("shared.yaml")
    assert _verdict(capsys, "bootstrap", "h")[0] == 0


@pytest.mark.parametrize(
    "variables",
    [
        {"PULUMI_CONFIG": "{not json"},
        {"PULUMI_CONFIG": "[1, 2]"},
        {"PULUMI_CONFIG_SECRET_KEYS": "{"},
        {"PULUMI_CONFIG": json.dumps({"higgsfield:bogus": "1", "higgsfield:fsx": "{}"})},
    ],
    ids=["not_json", "a_list", "secret_keys_not_json", "a_key_the_stack_file_lacks"],
)
def test_pulumi_config_left_in_the_shell_does_not_reach_the_offline_plan(project, capsys, monkeypatch, variables):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    code, lines = _verdict(capsys, "bootstrap", "h")
    assert code == 0, lines


@pytest.mark.parametrize(
    "key, plaintext, what",
    [
        ("aws:accessKey", "AKIAIOSFODNN7EXAMPLE", "an AWS access key id"),
        ("higgsfield:webhook", "xoxb-1234567890-abcdef", "a Slack token"),
        ("higgsfield:deployKey", "-----BEGIN OPENSSH PRIVATE KEY-----", "a private key"),
    ],
)
def test_a_plaintext_credential_typed_under_secure_is_refused_naming_the_key(project, capsys, key, plaintext, what):
    (project / "stacks" / "Pulumi.h.yaml").write_text(DEV + f"  {key}: {{secure: '{plaintext}'}}\n")
    code, lines = _verdict(capsys, "bootstrap", "h")
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"stacks/Pulumi.h.yaml:{APPENDED} {key}: secure: holds {what} in plaintext"), lines


def test_a_ciphertext_under_secure_is_still_accepted(project, capsys):
    ciphertext = "v1:6WOV4kPm0kZ4pUZS:WnbXtShpGWCSCuJAnBM8m+ZzV3dBaf1Jn9zOSbGfg0ZV"
    (project / "stacks" / "Pulumi.h.yaml").write_text(DEV + f"  aws:secretKey: {{secure: '{ciphertext}'}}\n")
    assert _verdict(capsys, "bootstrap", "h")[0] == 0


def test_plaintext_spelled_like_the_encrypted_stand_in_is_refused_naming_the_key(project, capsys):
    spoof = '"[secret: encrypted in the stack file, unknown offline; ciphertext 0123456789ab]"'
    (project / "stacks" / "Pulumi.h.yaml").write_text(
        DEV.replace("deploymentType: SCRATCH_2", f"deploymentType: {spoof}")
    )
    code, lines = _verdict(capsys, "bootstrap", "h")
    assert code == 2 and len(lines) == 1, lines
    assert re.match(
        r"stacks/Pulumi\.h\.yaml:\d+ higgsfield:fsx\.deploymentType: is plaintext that reads like", lines[0]
    )


@pytest.mark.parametrize("command", ["bootstrap", "plan"])
def test_a_stack_files_own_mistake_is_one_line_not_two(project, capsys, command):
    (project / "stacks" / "Pulumi.h.yaml").write_text(DEV + "  higgsfield:environment: prod\n")
    code, lines = _verdict(capsys, command, "h")
    assert code == 2 and lines == [
        f"stacks/Pulumi.h.yaml:{APPENDED} higgsfield:environment: is set twice (first at line 4); "
        "YAML would keep one of them silently: remove one"
    ], lines


def test_diff_names_a_base_stack_file_that_is_no_utf8_as_the_refs_file(project, capsys):
    stack = project / "stacks" / "Pulumi.h.yaml"
    stack.write_bytes(DEV.encode("utf-16"))
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "base"]):
        subprocess.run(["git", *args], cwd=project, check=True, capture_output=True)
    stack.write_text(DEV)
    code, lines = _verdict(capsys, "diff", "h", "--base", "HEAD")
    assert code == 2 and lines == [
        "HEAD:stacks/Pulumi.h.yaml:1: is not UTF-8 text, so not a map with a config: section"
    ]


@pytest.mark.parametrize("value", ["aws:ml", "AWS:ml", "Aws:platform"])
def test_a_tag_value_with_the_reserved_aws_prefix_is_refused_naming_the_tag(project, capsys, value):
    (project / "stacks" / "Pulumi.h.yaml").write_text(DEV.replace("    team: ml-platform", f'    team: "{value}"'))
    code, lines = _verdict(capsys, "bootstrap", "h")
    assert code == 2 and len(lines) == 1, lines
    assert (
        lines[0].startswith("stacks/Pulumi.h.yaml:19 higgsfield:tags.team: ") and "aws: prefix is reserved" in lines[0]
    )


@pytest.mark.parametrize(
    "section, where",
    [
        ('environment: ["team/\\e[2Jprod"]\n', "environment[0]"),
        ('environment:\n  imports: ["team/\\e]0;owned\\a"]\n', "environment.imports[0]"),
        ('environment: ["' + "a" * 100_000 + '"]\n', "environment[0]"),
    ],
    ids=["an_escape_code", "an_escape_code_in_an_inline_import", "a_name_of_100000_characters"],
)
def test_an_esc_environment_that_is_no_esc_name_is_refused_not_echoed(project, capsys, section, where):
    (project / "stacks" / "Pulumi.h.yaml").write_text(DEV + section)
    code, lines = _verdict(capsys, "plan", "h")
    assert code == 2 and len(lines) == 1 and len(lines[0]) < 300, lines
    assert (
        re.match(rf"stacks/Pulumi\.h\.yaml:({APPENDED}|{APPENDED + 1}) {re.escape(where)}: ", lines[0])
        and "\x1b" not in lines[0]
    ), lines


@pytest.mark.parametrize("name", ["team/prod", "myorg/team/prod@stable", "prod@3", "a.b_c-d"])
def test_an_esc_environment_name_esc_takes_is_accepted_and_noted(project, capsys, name):
    (project / "stacks" / "Pulumi.h.yaml").write_text(DEV + f"environment: [{name}]\n")
    assert _verdict(capsys, "bootstrap", "h")[0] == 0


def test_a_wrong_default_in_pulumi_yaml_is_named_at_its_line_there_not_in_the_stack_file(project, capsys):
    at = PROJECT.index("    default: []", PROJECT.index("  allowReplace:"))
    (project / "Pulumi.yaml").write_text(PROJECT[:at] + "    default: [1]" + PROJECT[at + len("    default: []") :])
    line = PROJECT[:at].count("\n") + 1
    code, lines = _verdict(capsys, "bootstrap", "h")
    assert code == 2 and lines == [
        f"Pulumi.yaml:{line} higgsfield:allowReplace[0]: must be a string, got 1 (Pulumi.yaml's default: this stack "
        "file does not set it)"
    ], lines
