"""Where the training image lives: the stack's ECR repository."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pulumi
import pulumi_aws as aws

# How many images tagged with a commit the repository keeps (every push to main adds one; a job
# pins the tag it was rendered with, so old tags must outlive the jobs that use them).
KEEP_IMAGES = 200
UNTAGGED_DAYS = 7


UNKNOWN_TAG = "<tag>"  # what image_tag() says when no image sources are found at all


def image_tag() -> str:
    """The tag the training image built from the project's image sources carries: `src-<content
    hash of images/training>` (infra/core/assets.py source_tag), of the project being deployed (the
    folder holding Pulumi.yaml: a checkout, or a project of one's own, whose sources are its own
    images/training or the installed package's). The image workflow hashes the same files in a
    shell, so CI, a build by hand and `higgsfield jobs render` name the same tag without git."""
    from infra.core.assets import image_sources, source_tag
    from infra.core.project import project_root

    sources = image_sources(project_root())
    return source_tag(sources) if (sources / "Dockerfile").is_file() else UNKNOWN_TAG


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
    Outputs: `repository_url` (what jobs run), `source_image` (its image built from the project's
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
