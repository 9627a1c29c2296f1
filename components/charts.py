"""Helm releases of pinned charts, the one way the platform installs upstream software."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from infra.core.versions import Chart


def helm_release(name: str, chart: Chart, namespace: str, values: dict, opts: pulumi.ResourceOptions, create_namespace: bool = False) -> k8s.helm.v3.Release:
    """A release of `chart` at its pinned version from its official repository. The release is
    named after the chart, so the services it creates have predictable names."""
    return k8s.helm.v3.Release(
        name,
        name=chart.name,
        chart=chart.name,
        version=chart.version,
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=chart.repo),
        namespace=namespace,
        create_namespace=create_namespace,
        values=values,
        opts=opts,
    )
