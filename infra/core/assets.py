"""Project files the CLI reads at run time (the example jobs, the node check, the image sources,
the stack templates `init` starts a project from), wherever it runs.

From a checkout (or an editable install) they are read where they live, `examples/`,
`images/training/`, `stacks/`, `policies/config/`, `Pulumi.yaml`; a wheel or `pip install .`
carries them inside the package as `infra/shipped/...` (pyproject.toml maps those package names to
the same folders, so the repo holds one copy). Every command works either way
(tests/cli/test_fresh_install.py runs them from a wheel of a copy without git, in a project that
`init` made in an empty folder).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[2]
_PACKAGED = Path(__file__).resolve().parents[1] / "shipped"

IMAGE_SOURCES = "images/training"


def shipped(relative: str) -> Path:
    """The project file `relative` (e.g. `examples/pytorch-ddp.yaml`): the checkout's, else the packaged copy."""
    if (_CHECKOUT / "Pulumi.yaml").is_file():
        return _CHECKOUT / relative
    return _PACKAGED / relative


def shipped_workflow(name: str) -> Path:
    """This repository's GitHub workflow `name` (`deploy.yml`): `.github/workflows/` of the checkout,
    `infra/shipped/workflows/` of a wheel (a package cannot be called `.github`); `init --ci` adapts them."""
    if (_CHECKOUT / "Pulumi.yaml").is_file():
        return _CHECKOUT / ".github" / "workflows" / name
    return _PACKAGED / "workflows" / name


def image_sources(project: Path) -> Path:
    """The folder the training image is built from: the project's own images/training when it has
    one (a checkout, or a project that copied them to change them), else the installed package's."""
    own = project / IMAGE_SOURCES
    return own if (own / "Dockerfile").is_file() else shipped(IMAGE_SOURCES)


def source_files(sources: Path) -> list[Path]:
    """What the image is made of: the Dockerfile and the programs it copies (`COPY *.py`), in the
    order `LC_ALL=C` sorts a shell's glob (byte order), which is also what a wheel ships."""
    names = ["Dockerfile", *sorted((p.name for p in sources.glob("*.py")), key=lambda n: n.encode())]
    return [sources / name for name in names if (sources / name).is_file()]


def source_manifest(sources: Path) -> str:
    """`sha256sum Dockerfile *.py` of the sources, byte for byte (`<hex>  <name>` lines): the
    files that make the tag, and what the image workflow hashes in a shell."""
    return "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n" for p in source_files(sources))


TAG_LENGTH = 32  # hex digits of the manifest's sha256 in the tag (128 bits; ECR allows 300 characters)


def source_tag(sources: Path) -> str:
    """`src-<sha256 of the manifest, first 32 hex>`: a content hash, the same from a checkout, a
    copy without git, a wheel or CI; an uncommitted change gives another tag."""
    return "src-" + hashlib.sha256(source_manifest(sources).encode()).hexdigest()[:TAG_LENGTH]
