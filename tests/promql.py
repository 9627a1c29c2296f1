"""PromQL through Prometheus' own engine: promtool's rule-test runner (`promtool test rules`) on a document of
input series and expected samples, written where the test keeps its files."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml


def held(series: list[tuple[str, Any]]) -> list[dict]:
    """Each (series, value) held at its value for five samples (promtool's `VALUExN` notation)."""
    return [{"series": s, "values": f"{v}x5"} for s, v in series]


def promtool_test(
    tmp_path: Path, series: list[dict], cases: list[dict], *, interval: str = "1m"
) -> subprocess.CompletedProcess:
    """promtool's verdict on `cases` (each a promql_expr_test: expr, eval_time, exp_samples) over `series` (its
    input_series, sampled every `interval`): return code 0 when every case holds."""
    document = {
        "evaluation_interval": "1m",
        "tests": [{"interval": interval, "input_series": series, "promql_expr_test": cases}],
    }
    path = tmp_path / "promql_test.yaml"
    path.write_text(yaml.safe_dump(document))
    return subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, check=False)
