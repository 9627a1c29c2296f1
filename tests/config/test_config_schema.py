"""The stack-file JSON Schema, the settings table and the CLI reference are generated from the code
models, and are current; the schema accepts every shipped stack and rejects typos."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from infra.cli import schema
from infra.cli.main import parser
from tests.conftest import ROOT, STACKS


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    document = json.loads((ROOT / schema.SCHEMA_PATH).read_text())
    jsonschema.Draft202012Validator.check_schema(document)
    return jsonschema.Draft202012Validator(document)


def test_committed_schema_is_generated_from_the_models():
    assert (ROOT / schema.SCHEMA_PATH).read_text() == schema.schema_text(), (
        f"schemas/stack.schema.json is stale: run `{schema.REGENERATE}`"
    )


def test_a_change_to_the_field_docs_one_caller_got_is_not_what_the_next_caller_gets():
    # field_docs reads each model once a process: every caller gets its own copy of what was read
    docs = schema.field_docs(schema.config.StackConfig)
    first = dict(docs)
    docs.clear()
    assert schema.field_docs(schema.config.StackConfig) == first != {}


def test_settings_reference_table_is_generated_from_the_models():
    page = (ROOT / schema.SETTINGS_PATH).read_text()
    assert schema.with_table(page) == page, f"the settings table is stale: run `{schema.REGENERATE}`"


def test_cli_reference_is_generated_from_the_command_line():
    assert (ROOT / schema.CLI_PATH).read_text() == schema.cli_reference(parser), (
        f"docs/reference/cli.md is stale: run `{schema.REGENERATE}`"
    )


def test_schema_check_command_names_the_stale_file_and_the_fix(tmp_path, monkeypatch, capsys):
    from infra.cli.main import main

    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "docs" / "reference").mkdir(parents=True)
    (tmp_path / schema.SETTINGS_PATH).write_text((ROOT / schema.SETTINGS_PATH).read_text())
    (tmp_path / "schemas").mkdir()
    (tmp_path / schema.SCHEMA_PATH).write_text("{}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["schema", "--check"]) == 1
    assert f"schemas/stack.schema.json is stale: run `{schema.REGENERATE}`" in capsys.readouterr().err
    assert main(["schema", "--write"]) == 0
    assert main(["schema", "--check"]) == 0


@pytest.mark.parametrize("stack", STACKS)
def test_schema_accepts_every_shipped_stack(stack, validator):
    document = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    assert list(validator.iter_errors(document)) == []


@pytest.mark.parametrize("typo", ["higgsfield:vpcCIDR", "higgsfeld:fsx", "gpuPools", "aws:regoin"])
def test_schema_rejects_a_typo_in_a_top_level_key(typo, validator):
    document = yaml.safe_load((ROOT / "stacks" / "Pulumi.prod.yaml").read_text())
    document["config"][typo] = document["config"].get("higgsfield:vpcCidr")
    errors = list(validator.iter_errors(document))
    assert errors and typo in errors[0].message


def test_schema_rejects_a_typo_inside_a_gpu_pool(validator):
    document = yaml.safe_load((ROOT / "stacks" / "Pulumi.prod.yaml").read_text())
    document["config"]["higgsfield:gpuPools"][0]["maxSzie"] = 3
    (error,) = validator.iter_errors(document)
    assert list(error.absolute_path) == ["config", "higgsfield:gpuPools", 0] and "maxSzie" in error.message


def test_schema_rejects_a_wrong_type_and_an_out_of_range_size(validator):
    document = yaml.safe_load((ROOT / "stacks" / "Pulumi.prod.yaml").read_text())
    document["config"]["higgsfield:cpuNodes"]["maxSize"] = 10**30
    document["config"]["higgsfield:fsx"]["enabled"] = "yes"
    paths = sorted(tuple(map(str, e.absolute_path)) for e in validator.iter_errors(document))
    assert paths == [("config", "higgsfield:cpuNodes", "maxSize"), ("config", "higgsfield:fsx", "enabled")]


def test_schema_accepts_encrypted_credentials_and_esc_imports(validator):
    document = yaml.safe_load((ROOT / "stacks" / "Pulumi.dev.yaml").read_text())
    document["config"]["aws:secretKey"] = {"secure": "v1:AAAA"}
    document["environment"] = ["my-org/dev"]
    assert list(validator.iter_errors(document)) == []
    document["config"]["aws:secretKey"] = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    assert list(validator.iter_errors(document))
