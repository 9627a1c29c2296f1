"""`higgsfield charts STACK --out DIR`: every Helm release of the offline plan as the program
passes it (chart, repository, version, namespace, values), for rendering with the real charts
where there is a network (.github/workflows/contracts.yml: `helm template` + kubeconform).

Writes DIR/releases.tsv (release, chart, version, repository, namespace; one line per release),
DIR/<release>.values.yaml and DIR/kubernetes-version. Values known only at deploy (role ARNs)
are the plan's `<computed>` placeholder strings.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from infra.core.names import HELM_RELEASE
from infra.offline.evaluate import Plan
from infra.offline.option_files import replace_file


def export(plan: Plan, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    rows, written = [], []
    for release in plan.of_type(HELM_RELEASE):
        i = release.inputs
        values = out / f"{release.name}.values.yaml"
        replace_file(values, yaml.safe_dump(i.get("values") or {}, sort_keys=True))
        # an OCI chart has its whole reference in `chart` and no repository ("-": components/charts.py)
        repo = (i.get("repositoryOpts") or {}).get("repo") or "-"
        rows.append("\t".join([release.name, i["chart"], i["version"], repo, i.get("namespace", "default")]))
        written.append(values)
    replace_file(out / "releases.tsv", "\n".join(rows) + "\n")
    replace_file(out / "kubernetes-version", plan.config.kubernetes_version + "\n")
    return [*written, out / "releases.tsv", out / "kubernetes-version"]
