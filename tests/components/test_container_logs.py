"""Every line of a job's containers is findable by job name, replica type and index, and node: the
CloudWatch add-on's Fluent Bit gets our application-log.conf with the kubernetes filter's Labels On
(the chart's has Labels Off: aws-observability/helm-charts:charts/amazon-cloudwatch-observability/
values.yaml@71a298ff), through the add-on's configuration values."""

from __future__ import annotations

import fnmatch
import json
import re

import pytest

from components import container_logs
from components.observability import CONTAINER_INSIGHTS_LOGS
from infra.core import names
from tests.conftest import STACKS, config_of, plan_of

ADDON = "aws:eks/addon:Addon"


def _configuration(stack: str) -> dict:
    (addon,) = [r for r in plan_of(stack).of_type(ADDON) if r.inputs["addonName"] == "amazon-cloudwatch-observability"]
    return json.loads(addon.inputs["configurationValues"])


def _sections(conf: str, name: str) -> list[dict]:
    return [settings for section, settings in container_logs.parse(conf) if section == name]


@pytest.mark.parametrize("stack", [s for s in STACKS if config_of(s).observability.enabled])
def test_the_addon_gets_our_container_log_config_under_the_charts_file_name(stack):
    config = _configuration(stack)
    files = config["containerLogs"]["fluentBit"]["config"]["extraFiles"]
    assert list(files) == ["application-log.conf"]  # only that file is replaced; Helm merges the other keys
    teams = [t.name for t in config_of(stack).scheduler.teams]
    assert files["application-log.conf"] == container_logs.application_log_conf(teams)
    assert config["dcgmExporter"] == {"enabled": False}  # the earlier setting kept


def test_the_kubernetes_filter_puts_the_pods_labels_on_every_container_line():
    (kubernetes,) = [f for f in _sections(container_logs.application_log_conf(), "FILTER") if f["Name"] == "kubernetes"]
    assert kubernetes["Labels"] == "On" and kubernetes["Match"] == "application.*"


def test_the_filter_finds_the_pod_of_every_line_the_input_tags():
    """Kube_Tag_Prefix is the tag prefix plus the tailed path (dots for slashes): what the filter
    strips to read pod, namespace and container from the file name."""
    conf = container_logs.application_log_conf()
    (tail,) = _sections(conf, "INPUT")
    (kubernetes,) = _sections(conf, "FILTER")
    assert tail["Tag"] == "application.*" and tail["Path"] == "/var/log/containers/*.log"
    assert kubernetes["Kube_Tag_Prefix"] == "application." + "/var/log/containers/".strip("/").replace("/", ".") + "."


def test_container_lines_go_to_the_application_log_group_we_create_with_our_retention():
    *_, output = _sections(container_logs.application_log_conf(["llm"]), "OUTPUT")
    assert output["Name"] == "cloudwatch_logs"
    assert (
        output["log_group_name"] == "/aws/containerinsights/${CLUSTER_NAME}/application"
        and "application" in CONTAINER_INSIGHTS_LOGS
    )
    assert output["log_stream_prefix"] == "${HOST_NAME}-"  # the node in the stream's name too


def _excluded(path: str) -> bool:
    """Whether the tail input skips the file (Exclude_Path: comma-separated glob patterns)."""
    (tail,) = _sections(container_logs.application_log_conf(), "INPUT")
    return any(fnmatch.fnmatchcase(path, p.strip()) for p in tail["Exclude_Path"].split(","))


@pytest.mark.parametrize(
    ("pod", "namespace"),
    [
        ("fluent-bit-x7k2p", "amazon-cloudwatch"),
        ("cloudwatch-agent-9fz", "amazon-cloudwatch"),
        ("aws-node-4", "kube-system"),
        ("kube-proxy-2", "kube-system"),
    ],
)
def test_the_agents_own_logs_stay_out_of_the_application_group(pod, namespace):
    assert _excluded(f"/var/log/containers/{pod}_{namespace}_main-{CONTAINER_ID}.log")


@pytest.mark.parametrize("pod", ["fluent-bit-train", "aws-node-exporter", "kube-proxy", "cloudwatch-agent-0"])
def test_a_team_pod_named_like_an_agent_still_ships_its_lines(pod):
    """The exclusion is the agents' namespaces', not a name prefix any team may take."""
    assert not _excluded(f"/var/log/containers/{pod}_llm_main-{CONTAINER_ID}.log")


def test_the_config_survives_the_charts_tpl():
    """The chart renders each extraFiles value with `tpl` (templates/linux/fluent-bit-configmap.yaml):
    no Go template delimiters in ours."""
    assert "{{" not in container_logs.application_log_conf()


def test_the_label_keys_queried_are_the_ones_the_training_operator_sets():
    """kubeflow/trainer:pkg/apis/kubeflow.org/v1/common_types.go@v1.9.4."""
    assert (names.JOB_NAME_LABEL, names.REPLICA_TYPE_LABEL, names.REPLICA_INDEX_LABEL) == (
        "training.kubeflow.org/job-name",
        "training.kubeflow.org/replica-type",
        "training.kubeflow.org/replica-index",
    )


TEAMS = ["foundation", "llm", "vision"]
CONTAINER_ID = "0" * 64


def _tag(pod: str, namespace: str, container: str = "main") -> str:
    """The tail input's tag of a container's log file (kubelet names it POD_NAMESPACE_CONTAINER-ID.log)."""
    return f"application.var.log.containers.{pod}_{namespace}_{container}-{CONTAINER_ID}.log"


def _groups_of(tag: str) -> list[str]:
    """The log groups a line of `tag` goes to: each output whose Match_Regex (Onigmo; these use only
    what Python's re reads alike) or Match takes it."""
    groups = []
    for output in _sections(container_logs.application_log_conf(TEAMS), "OUTPUT"):
        if "Match_Regex" in output:
            taken = re.search(output["Match_Regex"], tag) is not None
        else:
            taken = fnmatch.fnmatchcase(tag, output["Match"])
        if taken:
            groups.append(output["log_group_name"])
    return groups


@pytest.mark.parametrize("team", TEAMS)
def test_a_teams_container_lines_go_to_its_own_log_group_only(team):
    """Chosen by the namespace in the file's name, not by pod labels (which any team sets): reading
    one team's logs is no longer reading all (issue 34)."""
    for pod in ("train-worker-0", f"evil-{TEAMS[0]}", "vision"):
        assert _groups_of(_tag(pod, team)) == [container_logs.team_log_group("${CLUSTER_NAME}", team)]


@pytest.mark.parametrize("namespace", ["kube-system", "monitoring", "llm-tools", "visionx", "kubeflow"])
def test_the_platforms_and_unknown_namespaces_lines_go_to_the_application_group_only(namespace):
    assert _groups_of(_tag("p", namespace)) == ["/aws/containerinsights/${CLUSTER_NAME}/application"]


def test_each_team_gets_a_log_group_with_the_stacks_retention_and_key_and_a_policy_that_reads_it_alone():
    plan = plan_of("prod")
    cfg = plan.config
    groups = {g.inputs["name"]: g for g in plan.of_type("aws:cloudwatch/logGroup:LogGroup")}
    policies = {p.inputs["name"]: p for p in plan.of_type("aws:iam/policy:Policy")}
    cluster = f"higgsfield-{plan.stack}"
    for team in cfg.scheduler.teams:
        group = groups[container_logs.team_log_group(cluster, team.name)]
        assert group.inputs["retentionInDays"] == cfg.observability.log_retention_days and group.inputs.get("kmsKeyId")
        assert f"{cluster}-logs-{team.name}" in policies


def test_a_teams_log_reader_policy_names_its_group_and_no_other():
    arn = "arn:aws:logs:us-east-2:111122223333:log-group:/aws/containerinsights/higgsfield-prod/teams/llm"
    document = json.loads(container_logs.team_log_reader_policy(arn + ":*"))
    read, rest = document["Statement"]
    assert read["Resource"] == [arn, f"{arn}:*"] and set(read["Action"]) == set(container_logs.LOG_READ_ACTIONS)
    assert rest["Resource"] == "*" and set(rest["Action"]) == {"logs:GetQueryResults", "logs:DescribeLogGroups"}
