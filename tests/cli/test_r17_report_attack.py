"""Round 17, attacked: where a report goes when --json names a file and -o names a format (infra/cli/output.py
emit, which verify's JSON and YAML reports go through too)."""

from __future__ import annotations

import json

import pytest
import yaml

from infra.cli.main import main


@pytest.mark.parametrize(("fmt", "load"), [("json", json.loads), ("yaml", yaml.safe_load)])
def test_a_report_asked_for_in_a_file_by_json_path_is_written_beside_dash_o_on_stdout(fmt, load, tmp_path, capsys):
    """`--json PATH` writes the JSON to PATH whatever else is asked; with `-o json` or `-o yaml` the report was
    printed and PATH never written, the file a CI step then uploads missing."""
    target = tmp_path / "cost.json"
    assert main(["cost", "dev", "--json", str(target), "-o", fmt]) == 0
    assert load(capsys.readouterr().out)["stack"] == "dev"
    assert json.loads(target.read_text())["stack"] == "dev"
