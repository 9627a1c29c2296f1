"""What `verify` talks to: boto3 clients for the stack's region and a Kubernetes client from the
user's kubeconfig (the maintained `kubernetes` package, which runs the kubeconfig's exec plugin,
`aws eks get-token` on EKS). Without either, the run refuses in one line before any check.

The Kubernetes calls go through the typed APIs with `_preload_content=False` and return the JSON
the API server sent (dicts, the same shapes as `kubectl get -o json`), so the checks read fields
by their documented names; failures are `ApiException`s carrying the server's `Status` object."""

from __future__ import annotations

import datetime
import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
import yaml
from botocore import exceptions as aws_errors

from infra.cli.preflight import DENIED_CODES
from infra.cli.verify import Outcome, Spec, failed

REQUEST_TIMEOUT_S = 15  # one Kubernetes request (connect + read); each check's own timeout bounds the rest


# A create's fieldValidation: a field the object's schema does not declare (a CRD's, or the built-in kind's) refuses the
# request (400 BadRequest, naming it). The API server's default is Warn (since v1.23): it drops the field from what it
# stores and says so in a Warning header this client does not show, so a trial job or a dry run would go on without it
# (fieldValidation in CreateOptions: kubernetes-client/python:kubernetes/client/api/custom_objects_api.py@v37.0.3,
# create_namespaced_custom_object; kubernetes.io/docs/reference/using-api/api-concepts/#field-validation).
STRICT = {"field_validation": "Strict"}


class Refused(Exception):
    """Nothing can be checked (no credentials, no kubeconfig): said in one line."""


class Kube:
    """The Kubernetes calls the checks make, each returning the server's JSON."""

    def __init__(self, api_client: Any, cluster: str = "") -> None:
        from kubernetes import client

        self.api_client = api_client
        self.host: str = api_client.configuration.host
        self.cluster = cluster  # the kubeconfig's name of the context's cluster (an ARN, as update-kubeconfig writes)
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.admission = client.AdmissionregistrationV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.authorization = client.AuthorizationV1Api(api_client)
        self.version_api = client.VersionApi(api_client)

    @staticmethod
    def _json(answer: Any) -> Any:
        return json.loads(answer.data)

    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self._json(method(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S, **kwargs))

    def version(self) -> dict:
        return self._call(self.version_api.get_code)

    def lease(self, namespace: str, name: str) -> dict:
        return self._call(self.coordination.read_namespaced_lease, name, namespace)

    def leases(self, namespace: str) -> list[dict]:
        return self._call(self.coordination.list_namespaced_lease, namespace)["items"]

    def namespace(self, name: str) -> dict:
        return self._call(self.core.read_namespace, name)

    def namespaces(self) -> list[str]:
        return [n["metadata"]["name"] for n in self._call(self.core.list_namespace)["items"]]

    def service_account(self, namespace: str, name: str) -> dict:
        return self._call(self.core.read_namespaced_service_account, name, namespace)

    def nodes(self, label_selector: str = "") -> list[dict]:
        return self._call(self.core.list_node, label_selector=label_selector)["items"]

    def pods(self, namespace: str, label_selector: str = "") -> list[dict]:
        return self._call(self.core.list_namespaced_pod, namespace, label_selector=label_selector)["items"]

    def resource_quotas(self, namespace: str) -> list[dict]:
        return self._call(self.core.list_namespaced_resource_quota, namespace)["items"]

    def node(self, name: str) -> dict:
        return self._call(self.core.read_node, name)

    def pods_on(self, node: str) -> list[dict]:
        """Every pod bound to `node`, in any namespace."""
        return self._call(self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}")["items"]

    def events(self, namespace: str) -> list[dict]:
        return self._call(self.core.list_namespaced_event, namespace)["items"]

    def daemon_set(self, namespace: str, name: str) -> dict:
        return self._call(self.apps.read_namespaced_daemon_set, name, namespace)

    def config_map(self, namespace: str, name: str) -> dict:
        return self._call(self.core.read_namespaced_config_map, name, namespace)

    def mutating_webhook(self, name: str) -> dict:
        return self._call(self.admission.read_mutating_webhook_configuration, name)

    def admission_policies(self) -> list[dict]:
        return self._call(self.admission.list_validating_admission_policy)["items"]

    def admission_policy_bindings(self) -> list[dict]:
        return self._call(self.admission.list_validating_admission_policy_binding)["items"]

    def cluster_object(self, group: str, version: str, plural: str, name: str) -> dict:
        return self._call(self.custom.get_cluster_custom_object, group, version, plural, name)

    def cluster_objects(self, group: str, version: str, plural: str) -> list[dict]:
        return self._call(self.custom.list_cluster_custom_object, group, version, plural)["items"]

    def namespaced_objects(self, group: str, version: str, namespace: str, plural: str) -> list[dict]:
        return self._call(self.custom.list_namespaced_custom_object, group, version, namespace, plural)["items"]

    def create_namespaced(
        self, group: str, version: str, namespace: str, plural: str, body: dict, dry_run: bool
    ) -> dict:
        extra = {"dry_run": "All"} if dry_run else {}
        return self._call(
            self.custom.create_namespaced_custom_object, group, version, namespace, plural, body, **STRICT, **extra
        )

    def create_namespace(self, body: dict) -> dict:
        return self._call(self.core.create_namespace, body)

    def delete_namespace(self, name: str) -> dict:
        return self._call(self.core.delete_namespace, name)

    def create(self, obj: dict) -> dict:
        """Create a rendered object: a ConfigMap, a batch Job or a custom resource (kubeflow.org, ...)."""
        obj = _quantities_as_text(obj)
        namespace, kind = obj["metadata"]["namespace"], obj["kind"]
        if kind == "ConfigMap":
            return self._call(self.core.create_namespaced_config_map, namespace, obj, **STRICT)
        if kind == "Job":
            return self._call(self.batch.create_namespaced_job, namespace, obj, **STRICT)
        group, version = obj["apiVersion"].split("/")
        return self.create_namespaced(group, version, namespace, kind.lower() + "s", obj, dry_run=False)

    def delete(self, obj: dict) -> None:
        """Delete what `create` made, its dependents in the background (a Job's pods)."""
        namespace, name, kind = obj["metadata"]["namespace"], obj["metadata"]["name"], obj["kind"]
        if kind == "ConfigMap":
            self._call(self.core.delete_namespaced_config_map, name, namespace)
        elif kind == "Job":
            self._call(self.batch.delete_namespaced_job, name, namespace, propagation_policy="Background")
        else:
            group, version = obj["apiVersion"].split("/")
            self._call(self.custom.delete_namespaced_custom_object, group, version, namespace, kind.lower() + "s", name)

    def may(
        self, user: str, group_of_users: str, verb: str, group: str, resource: str, namespace: str, name: str = ""
    ) -> bool:
        """Whether the API server's authorizer lets `user`, of `group_of_users`, `verb` group/resource (a
        SubjectAccessReview: `kubectl auth can-i --as --as-group`; "" namespace: every namespace). The user is in
        `system:authenticated` too, as every authenticated request is (AuthenticatedGroupAdder, kubernetes/kubernetes:
        staging/src/k8s.io/apiserver/pkg/authentication/group/authenticated_group_adder.go@2e0908106e44), so what is
        bound to every user counts."""
        attributes = {"verb": verb, "group": group, "resource": resource, "namespace": namespace, "name": name}
        if "/" in resource:
            attributes["resource"], attributes["subresource"] = resource.split("/", 1)
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": [group_of_users, "system:authenticated"],
                "resourceAttributes": attributes,
            },
        }
        return bool(self._call(self.authorization.create_subject_access_review, body)["status"].get("allowed"))

    def role_bindings(self) -> list[dict]:
        """Every ClusterRoleBinding and RoleBinding of the cluster, each with its kind."""
        from kubernetes import client

        rbac = client.RbacAuthorizationV1Api(self.api_client)
        return [
            {**binding, "kind": kind}
            for kind, method in (
                ("ClusterRoleBinding", rbac.list_cluster_role_binding),
                ("RoleBinding", rbac.list_role_binding_for_all_namespaces),
            )
            for binding in self._call(method)["items"]
        ]

    def create_pod(self, namespace: str, body: dict) -> dict:
        return self._call(self.core.create_namespaced_pod, namespace, body)

    def pod_log(self, namespace: str, name: str) -> str:
        answer = self.core.read_namespaced_pod_log(
            name, namespace, timestamps=True, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S
        )
        data: bytes = answer.data  # type: ignore[attr-defined]  # _preload_content=False: the urllib3 response
        return data.decode()


def _quantities_as_text(value: Any, key: str = "") -> Any:
    """Resource quantities written as numbers (`nvidia.com/gpu: 8` in rendered YAML, which the API
    server takes) as the strings the client's typed models require ("8": the same quantity)."""
    if isinstance(value, dict):
        if key in ("limits", "requests"):
            return {
                k: str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v for k, v in value.items()
            }
        return {k: _quantities_as_text(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_quantities_as_text(v) for v in value]
    return value


@dataclass
class Context:
    """The stack's plan and config, the clients, and what earlier checks found for later ones."""

    stack: str
    plan: Any
    aws: Any  # a boto3.Session for the stack's region
    kube: Kube | None
    now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC)
    found: dict[str, Any] = field(default_factory=dict)
    clients: dict[str, Any] = field(default_factory=dict)  # made once per service (tests put stubs here)
    poll_s: float = 10.0  # the trial's polling period (tests shorten it)
    cancel: threading.Event = field(default_factory=threading.Event)  # set: the trial stops and cleans up
    trial_timeout_s: float = 3600.0

    @property
    def config(self) -> Any:
        return self.plan.config

    def client(self, service: str, region: str | None = None) -> Any:
        """A client of the stack's region (or `region`: the state key's, the connection's), made once."""
        from botocore.config import Config

        key = service if region is None else f"{service}@{region}"
        if key not in self.clients:
            # standard retries (throttling, connection errors), bounded so a check ends within its timeout
            config = Config(retries={"mode": "standard", "max_attempts": 4}, connect_timeout=5, read_timeout=20)
            self.clients[key] = self.aws.client(service, config=config, **({"region_name": region} if region else {}))
        return self.clients[key]


GET_CREDENTIALS = "set AWS_PROFILE (or run `aws configure` / `aws sso login`) for the stack's account, then rerun"


def aws_session(region: str) -> Any:
    """A boto3 session for the region whose credentials resolve, else Refused (one line)."""
    import boto3

    from infra.cli.preflight import NO_CREDENTIALS

    try:
        session = boto3.Session(region_name=region)
        credentials = session.get_credentials()
    except NO_CREDENTIALS as exc:
        raise Refused(f"no AWS credentials ({type(exc).__name__}: {exc}): {GET_CREDENTIALS}") from exc
    if credentials is None:
        raise Refused(f"no AWS credentials (NoCredentialsError): {GET_CREDENTIALS}")
    return session


def caller(session: Any) -> str:
    """Who the credentials are (sts:GetCallerIdentity, allowed to every identity); Refused when AWS
    rejects them (expired, unknown), since every check would fail alike."""
    from botocore.config import Config

    from infra.cli.preflight import NO_CREDENTIALS, REJECTED

    config = Config(retries={"mode": "standard", "max_attempts": 2}, connect_timeout=5, read_timeout=10)
    try:
        return str(session.client("sts", config=config).get_caller_identity()["Arn"])
    except (aws_errors.ConnectionError, aws_errors.HTTPClientError):
        return "an identity STS could not be asked about"  # the checks say what the network does
    except NO_CREDENTIALS as exc:  # an SSO session whose token is gone or expired
        raise Refused(f"no AWS credentials ({type(exc).__name__}: {exc}): {GET_CREDENTIALS}") from exc
    except aws_errors.ClientError as exc:
        error = exc.response.get("Error", {})
        if error.get("Code") in REJECTED:
            raise Refused(
                f"AWS rejected the credentials ({error.get('Code')}: {error.get('Message')}): refresh them "
                "(`aws sso login`, or new keys) and rerun"
            ) from exc
        raise


def kube_client(context: str | None, update: str = "aws eks update-kubeconfig --name CLUSTER --region REGION") -> Kube:
    """A client from the user's kubeconfig ($KUBECONFIG, else ~/.kube/config), else Refused, saying to run `update`
    (the stack's own `aws eks update-kubeconfig`)."""
    from kubernetes import config

    path = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or str(Path.home() / ".kube" / "config")
    if not Path(path).expanduser().exists():
        raise Refused(f"no kubeconfig at {path}: run `{update}`, then rerun")
    try:
        api_client = config.new_client_from_config(config_file=path, context=context)
        contexts, current = config.list_kube_config_contexts(config_file=path)
    except config.ConfigException as exc:
        raise Refused(f"kubeconfig {path} cannot be used: {' '.join(str(exc).split())}") from exc
    except yaml.YAMLError as exc:
        raise Refused(f"kubeconfig {path} cannot be used: not YAML ({' '.join(str(exc).split())})") from exc
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else current
    return Kube(api_client, str(((chosen or {}).get("context") or {}).get("cluster") or ""))


def describe_error(spec: Spec, exc: Exception, region: str = "") -> Outcome:
    """A check's call that failed, as its line: what the server said and the right it needs (`region`: the stack's,
    which the clients ask whatever the profile's is)."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, aws_errors.ClientError):
        error = exc.response.get("Error", {})
        code, message = error.get("Code", "?"), error.get("Message", "")
        if code in DENIED_CODES:
            return failed(f"AWS refused {exc.operation_name} ({code})", f"allow the caller: {spec.rights}")
        if code.endswith("NotFoundException") or code.endswith(".NotFound"):
            asked = f"the stack's region ({region})" if region else "the stack's region"
            return failed(
                f"{exc.operation_name} failed: {code}: {message}",
                f"are the credentials the stack's account's? verify asks {asked}, not the profile's; "
                "else the stack is not deployed: `pulumi up`",
            )
        return failed(f"{exc.operation_name} failed: {code}: {message}", "")
    if isinstance(exc, ApiException):
        try:
            status = json.loads(exc.body or "{}")
        except ValueError:
            status = {}
        reason, message = status.get("reason") or exc.reason, status.get("message") or ""
        if exc.status in (401, 403):
            return failed(f"the API server refused ({exc.status} {reason}): {message}", f"grant: {spec.rights}")
        return failed(f"the API server answered {exc.status} {reason}: {message}", "")
    if isinstance(exc, (aws_errors.ConnectionError, aws_errors.HTTPClientError, OSError, urllib3.exceptions.HTTPError)):
        return failed(f"network failure: {exc}", "check the network path (VPN, endpoint access), then rerun")
    return failed(f"{type(exc).__name__}: {exc}", "rerun with --debug and report it")
