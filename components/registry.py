"""Where the training image lives: the stack's ECR repository."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pulumi
import pulumi_aws as aws

# How many images tagged with a commit the repository keeps (every push to main adds one; a job
# pins the tag it was rendered with, so old tags must outlive the jobs that use them).
KEEP_IMAGES = 200
UNTAGGED_DAYS = 7


IMAGE_SOURCES = "images/training"
UNKNOWN_TAG = "<tag>"  # what image_tag() says without a git tree of the image sources


def image_tag() -> str:
    """The tag the image workflow gives the image built from the project's image sources:
    `src-<git tree of images/training at HEAD>` of the project being deployed (the folder holding
    Pulumi.yaml: a checkout, or a project of one's own beside an installed wheel), besides the
    commit that built it, which need not be HEAD: the workflow runs only when the sources change."""
    from infra.core.project import project_root

    root = project_root()
    if not (
        root / IMAGE_SOURCES
    ).is_dir():  # a project with stack files only: the sources of the checkout this code is in
        root = Path(__file__).resolve().parents[1]
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", f"HEAD:{IMAGE_SOURCES}"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return UNKNOWN_TAG
    return f"src-{done.stdout.strip()}" if done.returncode == 0 else UNKNOWN_TAG


def repository_name(cluster_name: str) -> str:
    """`higgsfield-prod/training`: the image workflow derives the same name from the stack."""
    return f"{cluster_name}/training"


def lifecycle_policy() -> str:
    """Expire untagged layers after a week; keep the newest KEEP_IMAGES images (ECR lifecycle
    policy rules: docs.aws.amazon.com/AmazonECR/latest/userguide/LifecyclePolicies.html; the rule
    with tagStatus `any` must have the highest priority number)."""
    return json.dumps(
        {
            "rules": [
                {
                    "rulePriority": 1,
                    "description": f"untagged images after {UNTAGGED_DAYS} days",
                    "selection": {
                        "tagStatus": "untagged",
                        "countType": "sinceImagePushed",
                        "countUnit": "days",
                        "countNumber": UNTAGGED_DAYS,
                    },
                    "action": {"type": "expire"},
                },
                {
                    "rulePriority": 2,
                    "description": f"all but the newest {KEEP_IMAGES} images",
                    "selection": {"tagStatus": "any", "countType": "imageCountMoreThan", "countNumber": KEEP_IMAGES},
                    "action": {"type": "expire"},
                },
            ]
        }
    )


class TrainingImageRepository(pulumi.ComponentResource):
    """The ECR repository the image workflow pushes the training image to (tagged with the commit).

    Creates: an ECR repository (immutable tags, scan on push, KMS encryption with the AWS managed
    key, protected and never force-deleted in production) and its lifecycle policy.
    Outputs: `repository_url` (what jobs run), `source_image` (its image built from this checkout's
    images/training) and `repository_arn` (what the image workflow's push role is allowed to write). Replaced when: the
    name or the encryption settings change.
    """

    def __init__(
        self,
        name: str,
        cluster_name: str,
        protect: bool,
        tags: Mapping[str, str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("higgsfield:registry:TrainingImage", name, None, opts)
        repository = aws.ecr.Repository(
            name,
            name=repository_name(cluster_name),
            image_tag_mutability="IMMUTABLE",
            image_scanning_configuration=aws.ecr.RepositoryImageScanningConfigurationArgs(scan_on_push=True),
            encryption_configurations=[aws.ecr.RepositoryEncryptionConfigurationArgs(encryption_type="KMS")],
            force_delete=not protect,
            tags=dict(tags),
            opts=pulumi.ResourceOptions(parent=self, protect=protect, retain_on_delete=protect),
        )
        aws.ecr.LifecyclePolicy(
            f"{name}-lifecycle",
            repository=repository.name,
            policy=lifecycle_policy(),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.repository_url = repository.repository_url
        self.repository_arn = repository.arn
        self.source_image = repository.repository_url.apply(
            lambda url: f"{url}:{image_tag()}"
        )  # what the health gate runs
        self.register_outputs({"repository_url": self.repository_url, "repository_arn": self.repository_arn})
