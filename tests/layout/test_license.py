"""The project says under which licence others may build on it: Apache-2.0, the habit of the
infrastructure-as-code ecosystem it builds on (Pulumi, its providers, Kubernetes), in the repository
and in the package's metadata."""

from __future__ import annotations

import tomllib

from tests.conftest import ROOT


def test_the_repository_holds_the_apache_2_licence_text():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_the_package_metadata_names_the_same_licence():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
