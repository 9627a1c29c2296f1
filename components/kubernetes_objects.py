"""Kubernetes objects the program builds itself, declared as plain manifests.

`KubernetesObject` registers a manifest under the same type token and with the same inputs as
pulumi_kubernetes' generated class for its kind (`kubernetes:core/v1:Namespace`,
`kubernetes:scheduling.volcano.sh/v1beta1:Queue`, ...), so the Kubernetes provider treats it the
same. Why not the generated classes: importing `pulumi_kubernetes.core.v1` alone costs 0.7 s,
a quarter of `higgsfield plan` (measured with `python -X importtime`), and a manifest is exactly
what `higgsfield plan --manifests` renders and the tests validate against the schema.
"""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi_kubernetes import _utilities


def type_token(api_version: str, kind: str) -> str:
    """`v1` + `Namespace` -> `kubernetes:core/v1:Namespace`; `apps/v1` + `Deployment` ->
    `kubernetes:apps/v1:Deployment` (the core group is spelled `core` in Pulumi tokens)."""
    group_version = api_version if "/" in api_version else f"core/{api_version}"
    return f"kubernetes:{group_version}:{kind}"


class KubernetesObject(pulumi.CustomResource):
    """One Kubernetes object from its manifest (apiVersion, kind, metadata, and the rest)."""

    def __init__(self, name: str, manifest: dict[str, Any], opts: pulumi.ResourceOptions | None = None) -> None:
        # Pin the provider plugin to the SDK's version, as the generated classes do.
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(version=_utilities.get_version()))
        super().__init__(type_token(manifest["apiVersion"], manifest["kind"]), name, dict(manifest), opts)
