"""An encrypted (`secure:`) value hides its value, never its neighbours or the shape of the setting:
`plan` and `check` validate every plaintext neighbour, and `diff` compares both the neighbours and
the encrypted value by what it can know (a changed ciphertext is a changed value, named as such)."""

from __future__ import annotations

import pytest
import yaml

from infra.cli.main import main
from infra.core.stack_values import is_secret, secret_placeholder, without_secrets
from infra.offline.diff import compare, render_diff
from infra.offline.evaluate import record
from tests.conftest import ROOT, assert_plan_rejects, set_field

OPEN = "0.0.0.0/0"


def test_prod_endpoint_open_to_the_world_beside_an_encrypted_entry_is_refused(project_copy, capsys):
    endpoint = {"private": True, "publicAccessCidrs": [OPEN, {"secure": "v1:AAAA"}]}
    assert_plan_rejects(
        project_copy,
        capsys,
        "prod",
        set_field("higgsfield:endpoint", "publicAccessCidrs", endpoint["publicAccessCidrs"]),
        "higgsfield:endpoint.publicAccessCidrs[0]",
        "opens the API server to the internet",
    )


def test_a_neighbour_after_an_encrypted_list_item_is_named_at_its_written_index(project_copy, capsys):
    cidrs = [{"secure": "v1:AAAA"}, OPEN]
    assert_plan_rejects(
        project_copy,
        capsys,
        "prod",
        set_field("higgsfield:endpoint", "publicAccessCidrs", cidrs),
        "higgsfield:endpoint.publicAccessCidrs[1]",
        "opens the API server to the internet",
    )


def test_check_fails_prod_with_an_open_endpoint_beside_an_encrypted_entry(project_copy, capsys):
    project_copy("prod", set_field("higgsfield:endpoint", "publicAccessCidrs", [OPEN, {"secure": "v1:AAAA"}]))
    assert main(["check", "bad"]) == 2
    assert "publicAccessCidrs[0]: 0.0.0.0/0 opens the API server" in capsys.readouterr().err


def test_a_required_setting_left_out_as_encrypted_says_so(project_copy, capsys):
    assert_plan_rejects(
        project_copy,
        capsys,
        "dev",
        set_field("higgsfield:cpuNodes", "maxSize", {"secure": "v1:AAAA"}),
        "higgsfield:cpuNodes.maxSize",
        "encrypted value at higgsfield:cpuNodes.maxSize left out",
    )


def test_an_encrypted_value_whose_key_names_a_password_is_not_a_plaintext_credential():
    from infra.config.loading import credential_problems

    assert credential_problems({"higgsfield:x": {"password": secret_placeholder("v1:AAAA"), "user": "me"}}) == []


def test_the_placeholder_is_the_same_for_the_same_ciphertext_and_differs_for_another():
    assert secret_placeholder("v1:A") == secret_placeholder("v1:A") != secret_placeholder("v1:B")
    assert is_secret(secret_placeholder("v1:A")) and not is_secret("[secret]")


def test_leaving_secrets_out_keeps_where_each_neighbour_was_written():
    value = {"a": [secret_placeholder("x"), "keep", {"b": secret_placeholder("y"), "c": 1}]}
    stripped, moved = without_secrets(value, ("k",))
    assert stripped == {"a": ["keep", {"c": 1}]}
    assert moved[("k", "a", 0)] == ("k", "a", 1) and moved[("k", "a", 1)] == ("k", "a", 2)


def _prod_with(tmp_path, name: str, change) -> dict:
    root = tmp_path / name
    (root / "stacks").mkdir(parents=True)
    (root / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    document = yaml.safe_load((ROOT / "stacks" / "Pulumi.prod.yaml").read_text())
    change(document["config"])
    (root / "stacks" / "Pulumi.prod.yaml").write_text(yaml.safe_dump(document))
    return record("prod", root=root).as_dict()


@pytest.fixture(scope="module")
def secret_beside_fsx_change(tmp_path_factory):
    """prod's file system with one encrypted setting, before and after a plaintext change of its
    deployment type (PERSISTENT_2 -> SCRATCH_2) and a new ciphertext."""
    tmp = tmp_path_factory.mktemp("secret-diff")

    def base(config: dict) -> None:
        config["higgsfield:fsx"]["compression"] = {"secure": "v1:OLDCIPHERTEXT"}

    def head(config: dict) -> None:
        base(config)
        config["higgsfield:fsx"].update(
            deploymentType="SCRATCH_2", compression={"secure": "v1:NEWCIPHERTEXT"}, backupRetentionDays=0
        )
        config["higgsfield:fsx"].pop("throughputPerTiB")

    return compare(_prod_with(tmp, "base", base), _prod_with(tmp, "head", head), set())


def test_diff_refuses_replacing_prods_file_system_beside_an_encrypted_value(secret_beside_fsx_change):
    assert any(
        r.startswith("replace of FSx file system lustre is refused") for r in secret_beside_fsx_change.refused
    ), secret_beside_fsx_change.refused


def test_diff_names_a_changed_ciphertext_as_a_changed_encrypted_value(secret_beside_fsx_change):
    assert list(secret_beside_fsx_change.secrets) == ["higgsfield:fsx.compression"]
    assert "~ secret higgsfield:fsx.compression: encrypted value changed: its ciphertext differs" in render_diff(
        "prod", "base", secret_beside_fsx_change
    )
