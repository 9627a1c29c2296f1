"""Project files the CLI reads at run time (the example jobs, the node check), wherever it runs.

From a checkout (or an editable install) they are read where they live, `examples/` and
`images/training/`; a wheel or `pip install .` carries them inside the package as
`infra/shipped/...` (pyproject.toml maps those package names to the same folders, so the repo
holds one copy). `higgsfield jobs render`, `healthcheck render` and `check` work either way
(tests/cli/test_fresh_install.py runs every command from a wheel, outside any checkout).
"""

from __future__ import annotations

from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[2]
_PACKAGED = Path(__file__).resolve().parents[1] / "shipped"


def shipped(relative: str) -> Path:
    """The project file `relative` (e.g. `examples/pytorch-ddp.yaml`): the checkout's, else the packaged copy."""
    if (_CHECKOUT / "Pulumi.yaml").is_file():
        return _CHECKOUT / relative
    return _PACKAGED / relative
