"""Helm releases of pinned charts, the one way the platform installs upstream software."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from infra.core.versions import Chart


def is_oci(chart: Chart) -> bool:
    return chart.repo.startswith("oci://")


def chart_reference(chart: Chart) -> str:
    """What the release's `chart` input holds: the chart's name in its repository, or for a chart in
    an OCI registry the full `oci://REGISTRY/PATH/NAME`. The provider takes an OCI reference only
    in `chart`: it resolves `chart` with `repositoryOpts.repo` unless `chart` is itself OCI
    (resolveChartName), and with a repository URL set it downloads that repository's index.yaml
    (locateChart: repo.FindChartInAuthAndTLSAndPassRepoURL), which an OCI registry does not serve
    (pulumi/pulumi-kubernetes:provider/pkg/provider/helm_release.go@v4.32.0; the same at the
    newest mirrored commit, and the SDK installed here is 4.34.2)."""
    return f"{chart.repo.rstrip('/')}/{chart.name}" if is_oci(chart) else chart.name


def helm_release(
    name: str,
    chart: Chart,
    namespace: str,
    values: dict,
    opts: pulumi.ResourceOptions,
    create_namespace: bool = False,
    skip_crds: bool = False,
) -> k8s.helm.v3.Release:
    """A release of `chart` at its pinned version from its official repository (an OCI chart by its
    reference, with no repository: chart_reference). The release is named after the chart, so the
    services it creates have predictable names. `skip_crds`: the chart's crds/ directory is left
    out (another release of the CRDs' own chart manages them)."""
    return k8s.helm.v3.Release(
        name,
        name=chart.name,
        chart=chart_reference(chart),
        version=chart.version,
        repository_opts=None if is_oci(chart) else k8s.helm.v3.RepositoryOptsArgs(repo=chart.repo),
        namespace=namespace,
        create_namespace=create_namespace,
        skip_crds=skip_crds or None,
        values=values,
        opts=opts,
    )
