"""A fifth round of hostile stack files, of classes the earlier rounds did not try: encodings and
line ends (BOM, CRLF, UTF-16), a section written twice, keys that differ by case or by spaces, YAML 1.1
scalars, non-finite and huge numbers, control and bidirectional characters in text, merge keys of
the wrong kind, explicit tags (`!!binary`, local tags, `!!set`), empty and null documents, YAML
directives, null for a required setting, and a file of many small keys. Each goes through
`higgsfield plan` (a few through `check` and `diff`): accepted where it means what a plain file
means, else exit 2 with `file:line key: message` lines, never a traceback."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from infra.cli.main import main
from tests.conftest import ROOT

DEV = (ROOT / "stacks" / "Pulumi.dev.yaml").read_text()
LINE = re.compile(r"^stacks/Pulumi\.h\.yaml:\d+(: | .+?: )\S")


def rep(old: str, new: str, base: str = DEV) -> str:
    assert old in base, old
    return base.replace(old, new, 1)


HOSTILE = {  # name -> (file, "ok" or "refuse")
    "bom": ("\ufeff" + DEV, "ok"),
    "crlf": (DEV.replace("\n", "\r\n"), "ok"),
    "utf16": (DEV.encode("utf-16"), "refuse"),
    "root_config_twice": (DEV + "config:\n  aws:region: us-east-1\n", "refuse"),
    "keys_differ_by_case": (DEV + "  higgsfield:Environment: prod\n", "refuse"),
    "namespace_case": (rep("  aws:region: us-west-2", "  AWS:region: us-west-2"), "refuse"),
    "yaml11_no_environment": (rep("higgsfield:environment: dev", "higgsfield:environment: no"), "refuse"),
    "octal_0755_size": (rep("    maxSize: 4\n", "    maxSize: 0755\n"), "refuse"),
    "huge_float_size": (rep("    maxSize: 4\n", "    maxSize: 1.0e+400\n"), "refuse"),
    "nan_percentage": (
        DEV + "  higgsfield:autoscaler:\n    maxTotalUnreadyPercentage: .nan\n"
        if "higgsfield:autoscaler:" not in DEV
        else rep("  higgsfield:autoscaler:\n", "  higgsfield:autoscaler:\n    maxTotalUnreadyPercentage: .nan\n"),
        "refuse",
    ),
    "inf_percentage": (
        rep("  higgsfield:autoscaler:\n", "  higgsfield:autoscaler:\n    maxTotalUnreadyPercentage: -.inf\n"),
        "refuse",
    ),
    "tab_in_tag_value": (rep("    team: ml-platform", '    team: "ml\\tplatform"'), "refuse"),
    "nul_in_tag_value": (rep("    team: ml-platform", '    team: "ml\\0platform"'), "refuse"),
    "nul_in_allow_replace": (DEV + '  higgsfield:allowReplace: ["lus\\0tre"]\n', "refuse"),
    "bidi_override_in_allow_replace": (DEV + '  higgsfield:allowReplace: ["lustre\\u202e"]\n', "refuse"),
    "lone_surrogate_in_tag": (rep("    team: ml-platform", '    team: "ml\\ud800"'), "refuse"),
    "merge_of_undefined_alias": (
        rep("  higgsfield:autoscaler:\n", "  higgsfield:autoscaler:\n    <<: *nothing\n"),
        "refuse",
    ),
    "merge_of_a_scalar": (rep("  higgsfield:autoscaler:\n", "  higgsfield:autoscaler:\n    <<: 3\n"), "refuse"),
    "binary_tag_value": (rep("    team: ml-platform", "    team: !!binary aGk="), "refuse"),
    "timestamp_tag_value": (
        rep("    team: ml-platform", "    team: !!timestamp 2027-01-01"),
        "ok",
    ),  # its text, as Pulumi reads it
    "custom_local_tag": (rep("    team: ml-platform", "    team: !vault ml-platform"), "refuse"),
    "set_tag_map": (rep("  higgsfield:tags:\n", "  higgsfield:tags: !!set\n"), "refuse"),
    "empty_document_marker": ("---\n", "refuse"),
    "config_null": ("config:\n", "refuse"),
    "required_key_null": (rep("higgsfield:environment: dev", "higgsfield:environment: ~"), "refuse"),
    "whitespace_key": (DEV + '  " ": x\n', "refuse"),
    "empty_key": (DEV + '  "": x\n', "refuse"),
    "complex_key": (DEV + "  ? [a, b]\n  : x\n", "refuse"),
    "trailing_space_in_key": (DEV + '  "higgsfield:cudaVersion ": "12.8"\n', "refuse"),
    "bool_for_size": (rep("    maxSize: 4\n", "    maxSize: true\n"), "refuse"),
    "float_for_size": (rep("    maxSize: 4\n", "    maxSize: 4.0\n"), "refuse"),
    "scientific_for_size": (rep("    maxSize: 4\n", "    maxSize: 4e0\n"), "refuse"),
    "line_separator_in_tag": (rep("    team: ml-platform", '    team: "ml\\u2028platform"'), "ok"),
    "nbsp_indentation": (rep("    team: ml-platform", "\u00a0   team: ml-platform"), "refuse"),
    "yaml_12_directive": ("%YAML 1.2\n---\n" + DEV, "ok"),
    "yaml_2_directive": ("%YAML 2.0\n---\n" + DEV, "refuse"),
    "many_small_keys": ("config:\n" + "".join(f"  k{i}: 1\n" for i in range(120000)), "refuse"),
}


@pytest.fixture
def project(tmp_path, monkeypatch):
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    (tmp_path / "stacks").mkdir()
    (tmp_path / "policies" / "config").mkdir(parents=True)
    shutil.copy(ROOT / "policies" / "config" / "dev.json", tmp_path / "policies" / "config" / "h.json")
    monkeypatch.chdir(tmp_path)

    def write(text: str | bytes) -> None:
        data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
        (tmp_path / "stacks" / "Pulumi.h.yaml").write_bytes(data)

    write.root = tmp_path  # type: ignore[attr-defined]
    return write


def _verdict(capsys, command: str) -> tuple[int, list[str]]:
    code = main([command, "h"])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "rerun with --debug" not in err, err
    return code, err.strip().splitlines()


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_stack_file_is_accepted_as_meant_or_refused_in_lines(project, capsys, case):
    text, want = HOSTILE[case]
    project(text)
    # an accepted file whose settings differ from dev's goes through the reader and the model only
    # (`bootstrap`): evaluating the program for it would test nothing more about the input
    same_as_dev = case in ("bom", "crlf", "yaml_12_directive")
    code, lines = _verdict(capsys, "plan" if want == "refuse" or same_as_dev else "bootstrap")
    if want == "ok":
        assert code == 0, lines
    else:
        assert code == 2 and lines and all(LINE.match(line) for line in lines), lines


@pytest.mark.parametrize("case", ["nul_in_allow_replace", "binary_tag_value", "root_config_twice", "required_key_null"])
def test_check_refuses_them_alike(project, capsys, case):
    project(HOSTILE[case][0])
    code, lines = _verdict(capsys, "check")
    assert code == 2 and lines and all(LINE.match(line) for line in lines), lines


def test_diff_sees_no_change_when_a_stack_file_only_gains_a_bom_and_crlf(project, capsys):
    root = project.root
    project(DEV)
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "base"]):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    project("\ufeff" + DEV.replace("\n", "\r\n"))
    code = main(["diff", "h", "--base", "HEAD"])
    out, err = capsys.readouterr()
    assert code == 0 and "0 to add, 0 to change (0 replaced), 0 to delete" in out, (out, err)
