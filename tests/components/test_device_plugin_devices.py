"""GPU pods get only the devices they asked for: the NVIDIA device plugin does not hand them every
EFA device (NVIDIA/k8s-device-plugin#1692: 0.19.0 enabled MOFED by default and mounted every
/dev/infiniband/uverbs*; fixed in 0.19.3 by reverting the defaults, commit 2ffedc34b)."""

from __future__ import annotations

import pytest

from infra.core import versions
from tests.conftest import STACKS, plan_of

RELEASE = "kubernetes:helm.sh/v3:Release"
# The releases whose mofed-enabled flag defaulted to true (#1550 in v0.19.0; reverted in v0.19.3).
MOFED_ON_BY_DEFAULT = ("0.19.0", "0.19.1", "0.19.2")


def _nvidia_values(stack: str) -> dict:
    (release,) = [r for r in plan_of(stack).of_type(RELEASE) if r.inputs["chart"] == "nvidia-device-plugin"]
    return release.inputs


def test_the_pinned_nvidia_device_plugin_does_not_inject_infiniband_devices_by_default():
    assert versions.NVIDIA_DEVICE_PLUGIN.version not in MOFED_ON_BY_DEFAULT
    assert versions.NVIDIA_DEVICE_PLUGIN.version == "0.19.3"
    assert "@v0.19.3" in versions.NVIDIA_DEVICE_PLUGIN.source.where


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_installs_the_fixed_chart_with_mofed_gdrcopy_and_gds_off(stack):
    """values.yaml@v0.19.3 keeps mofedEnabled/gdrcopyEnabled/gdsEnabled (null); the device-plugin
    template sets MOFED_ENABLED etc. only when the value is a bool, so false is explicit."""
    inputs = _nvidia_values(stack)
    assert inputs["version"] == versions.NVIDIA_DEVICE_PLUGIN.version
    assert {k: inputs["values"][k] for k in ("mofedEnabled", "gdrcopyEnabled", "gdsEnabled")} == {
        "mofedEnabled": False,
        "gdrcopyEnabled": False,
        "gdsEnabled": False,
    }
