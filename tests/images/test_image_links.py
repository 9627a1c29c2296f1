"""Every binary the training image's runtime stage copies from its build stage finds every library it
links, in the runtime image, by the loader's rules (tests/elf_links.py): ldd, as far as it can be done
without the base image and without building.

What stands for the runtime image here, and where each piece comes from:
- PyTorch's CUDA runtime: the real libcudart from the nvidia-cuda-runtime-cu12 wheel on PyPI (the wheel
  PyTorch's CUDA 12 builds depend on), at its place under the image's Python tree. Its SONAME is what a
  `-lcudart` link records; its own DT_NEEDED are followed.
- PyTorch's NCCL (nvidia-nccl-cu12, ~300 MB) by name only: libnccl.so.2 in nvidia/nccl/lib (the name the
  Dockerfile's `ln -sf libnccl.so.2 libnccl.so` relies on).
- The base image (assumed, not read here): PyTorch's -runtime image is Ubuntu 22.04 with conda's Python
  in /opt/conda and no CUDA toolkit; it sets LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64
  (pytorch/pytorch:Dockerfile@01343dcd, stage `official`; docker.Makefile: BASE_RUNTIME is plain Ubuntu,
  only the -devel image starts from nvidia/cuda). glibc and libstdc++ live in /usr/lib/x86_64-linux-gnu.
- The EFA installer's user space (assumed): libfabric in /opt/amazon/efa/lib, Open MPI 4 in
  /opt/amazon/openmpi/lib (docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start-nccl.html: "Libfabric
  is installed in /opt/amazon/efa", "Open MPI is installed in /opt/amazon/openmpi").
- What the binaries link, from their link lines at the pinned refs: nccl-tests `-l$(CUDARTLIB)` (cudart),
  `-lnccl`, `-lmpi` with MPI=1, `-lrt` (NVIDIA/nccl-tests:src/Makefile, src/common.mk@v2.19.6); aws-ofi-nccl
  links cudart statically unless --enable-cudart-dynamic (aws/aws-ofi-nccl:m4/check_pkg_cuda.m4@v1.21.1),
  libfabric and hwloc.
- The loader's configuration: what the runtime stage writes to /etc/ld.so.conf.d and its LD_LIBRARY_PATH,
  read from the Dockerfile.
The real ldd runs inside the image build: the runtime stage stops when any copied binary has a library
`not found` (the Dockerfile's last RUN before the ENV block).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.dockerfile_scope import expanded
from tests.elf_links import Dynamic, Image, dynamic

DOCKERFILE = ROOT / "images" / "training" / "Dockerfile"
UNSCOPED = ROOT / "tests" / "fixtures" / "Dockerfile.unscoped-xgboost"
SITE = "/opt/conda/lib/python3.11/site-packages"
MULTIARCH = "/usr/lib/x86_64-linux-gnu"
# The CUDA runtime wheel of PyTorch's CUDA 12.8 builds (12.8.x; the SONAME is the same for every 12.x).
CUDA_RUNTIME_WHEEL = "nvidia-cuda-runtime-cu12==12.8.90"
BASE_LIBRARIES = (
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "libpthread.so.0",
    "librt.so.1",
    "libgcc_s.so.1",
    "libstdc++.so.6",
    "ld-linux-x86-64.so.2",
)
EFA_LIBRARIES = {"/opt/amazon/efa/lib": ("libfabric.so.1",), "/opt/amazon/openmpi/lib": ("libmpi.so.40",)}
NCCL_TESTS = ("all_reduce_perf", "all_gather_perf", "alltoall_perf", "sendrecv_perf")


@pytest.fixture(scope="module")
def cuda_runtime(tmp_path_factory) -> bytes:
    """libcudart.so.12 from the PyPI wheel (about 1 MB), or a skip when PyPI is unreachable outside CI."""
    try:
        socket.create_connection(("pypi.org", 443), timeout=3).close()
    except OSError:
        if os.environ.get("CI"):
            pytest.fail("pypi.org is unreachable from CI: the CUDA runtime wheel cannot be read")
        pytest.skip("pypi.org:443 is unreachable (offline): the link check reads the CUDA runtime wheel in CI")
    into = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--isolated",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--platform",
            "manylinux_2_28_x86_64",
            "--platform",
            "manylinux2014_x86_64",
            "--python-version",
            "3.11",
            "-d",
            str(into),
            CUDA_RUNTIME_WHEEL,
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (wheel,) = into.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return archive.read("nvidia/cuda_runtime/lib/libcudart.so.12")


_LD_SO_CONF_WRITE = r"""(?:echo|printf '[^']*')((?:\s+"[^"]+")+)\s*>>?\s*/etc/ld\.so\.conf\.d/"""


def _runtime_stage(text: str):
    instructions = expanded(text)
    last = max(i.stage for i in instructions)
    return [i for i in instructions if i.stage == last]


def loader_configuration(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(ld.so.conf directories, LD_LIBRARY_PATH) the runtime stage leaves, read from the Dockerfile."""
    conf: list[str] = []
    path: tuple[str, ...] = ()
    for i in _runtime_stage(text):
        if i.cmd == "RUN":
            command = " ".join(i.value)
            homes = {
                var: f"{SITE}/nvidia/{module}"
                for var, module in re.findall(r"""(\w+)="\$\(python -c 'import nvidia\.(\w+);""", command)
            }
            for written in re.findall(_LD_SO_CONF_WRITE, command):
                for var, rest in re.findall(r'"\$\{(\w+)\}([^"]*)"', written):
                    conf.append(homes[var] + rest)
        if i.cmd == "ENV":
            pairs = dict(zip(i.value[::2], i.value[1::2], strict=True))
            if "LD_LIBRARY_PATH" in pairs:
                path = tuple(p for p in pairs["LD_LIBRARY_PATH"].split(":") if p)
    return tuple(conf), path


def copied_from_build(text: str) -> list[tuple[str, str]]:
    return [
        (i.value[0], i.value[-1])
        for i in _runtime_stage(text)
        if i.cmd == "COPY" and any(f == "--from=build" for f in i.flags)
    ]


def runtime_image(root: Path, text: str, cudart: bytes) -> tuple[Image, dict[str, Dynamic]]:
    """The runtime image's libraries under `root`, and the copied binaries with what they link."""

    def put(at: str, data: bytes = b"") -> None:
        file = root / at.lstrip("/")
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(data)

    for name in BASE_LIBRARIES:
        put(f"{MULTIARCH}/{name}")
    runs = [" ".join(i.value) for i in _runtime_stage(text) if i.cmd == "RUN"]
    apt = " ".join(r for r in runs if "apt-get install" in r)
    if re.search(r"\blibhwloc15\b", apt):
        put(f"{MULTIARCH}/libhwloc.so.15")
    for directory, names in EFA_LIBRARIES.items():
        for name in names:
            put(f"{directory}/{name}")
    put(f"{SITE}/nvidia/cuda_runtime/lib/libcudart.so.12", cudart)
    put(f"{SITE}/nvidia/nccl/lib/libnccl.so.2")
    conf, ld_library_path = loader_configuration(text)
    cudart_soname = dynamic(cudart).soname
    assert cudart_soname
    binaries: dict[str, Dynamic] = {}
    for source, target in copied_from_build(text):
        if source.endswith("nccl-tests/build"):
            for name in NCCL_TESTS:
                needed = (
                    cudart_soname,
                    "libnccl.so.2",
                    "libmpi.so.40",
                    "librt.so.1",
                    "libstdc++.so.6",
                    "libm.so.6",
                    "libgcc_s.so.1",
                    "libc.so.6",
                )
                binaries[f"{target}/{name}"] = Dynamic(None, needed, (), ())
        elif source.endswith("aws-ofi-nccl"):
            for name in ("libnccl-net.so", "libnccl-tuner-ofi.so"):
                binaries[f"{target}/lib/{name}"] = Dynamic(
                    name,
                    ("libfabric.so.1", "libhwloc.so.15", "libstdc++.so.6", "libm.so.6", "libgcc_s.so.1", "libc.so.6"),
                    (),
                    (),
                )
    for at in binaries:
        put(at)
    return Image(root, ld_library_path, conf), binaries


def _not_found(image: Image, binaries: dict[str, Dynamic]) -> list[str]:
    missing = []
    for at, dyn in binaries.items():
        for name in dyn.needed:
            found = image.find(name, at, dyn)
            if found is None:
                missing.append(f"{at}: {name} => not found")
            else:
                missing.extend(image.unresolved(found))
    return sorted(set(missing))


def test_the_runtime_stage_copies_nccl_tests_and_the_plugin_from_the_build_stage():
    assert copied_from_build(DOCKERFILE.read_text()) == [
        ("/opt/aws-ofi-nccl", "/opt/aws-ofi-nccl"),
        ("/opt/nccl-tests/build", "/opt/nccl-tests/build"),
    ]


def test_every_copied_binary_finds_every_library_it_links_in_the_runtime_image(tmp_path, cuda_runtime):
    image, binaries = runtime_image(tmp_path, DOCKERFILE.read_text(), cuda_runtime)
    assert len(binaries) == len(NCCL_TESTS) + 2
    assert _not_found(image, binaries) == []


def test_the_runtime_stage_that_left_the_cuda_runtime_off_the_loader_path_is_refused(tmp_path, cuda_runtime):
    image, binaries = runtime_image(tmp_path, UNSCOPED.read_text(), cuda_runtime)
    missing = _not_found(image, binaries)
    assert missing and all(m.endswith("libcudart.so.12 => not found") for m in missing)
    assert {m.split(":")[0] for m in missing} == {f"/opt/nccl-tests/build/{n}" for n in NCCL_TESTS}


def test_the_cuda_runtime_wheel_links_only_the_c_library_the_base_image_has(cuda_runtime):
    dyn = dynamic(cuda_runtime)
    assert dyn.soname == "libcudart.so.12"
    assert set(dyn.needed) <= set(BASE_LIBRARIES)


def test_the_image_build_runs_ldd_on_every_copied_binary_and_stops_on_a_missing_library():
    runs = [" ".join(i.value) for i in _runtime_stage(DOCKERFILE.read_text()) if i.cmd == "RUN"]
    (check,) = [r for r in runs if "ldd " in r]
    assert 'ldd /opt/nccl-tests/build/*_perf "/opt/aws-ofi-nccl"/lib/*.so' in check
    assert "if grep 'not found' /tmp/ldd.txt | grep -v" in check and "then exit 1; fi" in check
    # only the driver's libraries, which the NVIDIA container runtime mounts on a GPU node, may be missing
    allowed = re.findall(r"-e '\^\\s\*([\w\\.-]+) '", check)
    assert [a.replace("\\", "") for a in allowed] == ["libcuda.so.1", "libnvidia-ml.so.1"]
