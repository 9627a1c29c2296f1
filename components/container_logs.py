"""Container logs a person can use: every line of a job's containers carries the job, the replica
type and index, and the node.

The CloudWatch Observability add-on ships Fluent Bit with one config file per log group, given as
`containerLogs.fluentBit.config.extraFiles` (each key a file of the `fluent-bit-config` ConfigMap,
and an `@INCLUDE` of it in fluent-bit.conf: templates/linux/fluent-bit-configmap.yaml); its
`application-log.conf` runs the kubernetes filter with `Labels Off`
(aws-observability/helm-charts:charts/amazon-cloudwatch-observability/values.yaml@71a298ff, chart
6.4.0, the source of the add-on), so container lines carry no pod labels. We give our own
`application-log.conf` under the same key, as add-on configuration values: Helm merges maps key by
key, so only that file changes; dataplane-log.conf and host-log.conf stay the chart's.

Ours: the containers' logs (tail of /var/log/containers/*.log with the docker and cri multiline
parsers, the agents' own logs left out as the chart leaves them out), the kubernetes filter with
`Labels On` (the pod's labels under kubernetes.labels; fluent/fluent-bit documentation, filter
"Kubernetes", key Labels, default On), and the cloudwatch_logs output to the application log group
(/aws/containerinsights/CLUSTER/application, which components/observability.py creates with our
retention), one stream per node and container file. The Training Operator labels each replica's pod
with its job, replica type (lowercase) and index (infra/core/names.py JOB_NAME_LABEL and the others); the
kubernetes filter adds the pod's node as kubernetes.host. docs/logs.md has the query.
Per team: each team namespace's containers go to a log group of their own,
/aws/containerinsights/CLUSTER/teams/TEAM (team_log_group), which components/observability.py creates
with a managed policy that reads it and nothing else; the application group keeps the platform's
namespaces only. An output picks its lines by tag with `Match_Regex` (fluent/fluent-bit documentation,
"Configuration File", Match_Regex: any output; Onigmo syntax). The tag ends in the file's name,
POD_NAMESPACE_CONTAINER-ID.log (kubelet's /var/log/containers naming); pod, namespace and
container names are DNS names without `_`, so `_TEAM_` in it is the namespace and nothing a pod
can set - not its labels, which any team writes.
Unverified here: that the add-on's configuration schema takes extraFiles (EKS validates it; the
command is in infra/core/versions.py PROVENANCE["CLOUDWATCH_LOGS_LABELS_ON"]).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from infra.core.names import KUBE_SYSTEM

APPLICATION_LOG_FILE = "application-log.conf"  # the chart's extraFiles key for container logs
# Fluent Bit's variables, set in the add-on's DaemonSet environment (the chart's own config uses them).
_TAG_PREFIX = "application.var.log.containers."
# The agents whose own lines stay out (the chart's Exclude_Path names them by pod-name prefix): each by its
# pod-name prefix and its namespace (the add-on's, amazon-cloudwatch, and kube-system's), for a file is
# POD_NAMESPACE_CONTAINER-ID.log and a pod name has no `_`: a team's pod named fluent-bit-* ships its lines.
CLOUDWATCH_NAMESPACE = "amazon-cloudwatch"
AGENT_PODS = (
    ("cloudwatch-agent", CLOUDWATCH_NAMESPACE),
    ("fluent-bit", CLOUDWATCH_NAMESPACE),
    ("aws-node", KUBE_SYSTEM),
    ("kube-proxy", KUBE_SYSTEM),
)


def _section(name: str, settings: list[tuple[str, str]]) -> str:
    return "\n".join([f"[{name}]", *(f"    {key:<20}{value}" for key, value in settings)])


def team_log_group(cluster: str, team: str) -> str:
    """The log group of one team's container lines (`cluster` may be Fluent Bit's ${CLUSTER_NAME})."""
    return f"/aws/containerinsights/{cluster}/teams/{team}"


# What reading a log group takes (service authorization reference, Amazon CloudWatch Logs: these
# actions take a log-group resource; GetQueryResults and DescribeLogGroups take none, and name no
# group's contents: a query's results need its random id, DescribeLogGroups lists names and settings).
LOG_READ_ACTIONS = (
    "logs:DescribeLogStreams",
    "logs:FilterLogEvents",
    "logs:GetLogEvents",
    "logs:GetLogGroupFields",
    "logs:StartQuery",
)


def team_log_reader_policy(group_arn: str) -> str:
    """An IAM policy document that reads one log group (its streams and events) and nothing else."""
    arn = group_arn.removesuffix(":*")
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "ReadTheTeamsLogs",
                    "Effect": "Allow",
                    "Action": list(LOG_READ_ACTIONS),
                    "Resource": [arn, f"{arn}:*"],
                },
                {
                    "Sid": "QueryResultsAndGroupNames",
                    "Effect": "Allow",
                    "Action": ["logs:GetQueryResults", "logs:DescribeLogGroups"],
                    "Resource": "*",
                },
            ],
        }
    )


def _namespace_tags(namespaces: Sequence[str]) -> str:
    """The part of a container file's tag after the prefix: a pod, one of `namespaces`, a container."""
    return "[^_]+_(" + "|".join(re.escape(n) for n in namespaces) + ")_[^_]+"


def _output(match: tuple[str, str], group: str, create: bool) -> str:
    return _section(
        "OUTPUT",
        [
            ("Name", "cloudwatch_logs"),
            match,
            ("region", "${AWS_REGION}"),
            ("log_group_name", group),
            ("log_stream_prefix", "${HOST_NAME}-"),
            # the chart's is true; components/observability.py creates every group first, with our retention
            ("auto_create_group", "true" if create else "false"),
            ("extra_user_agent", "container-insights"),
        ],
    )


def application_log_conf(teams: Sequence[str] = ()) -> str:
    """The Fluent Bit config for container logs, with the pods' labels on every line: each team
    namespace's lines to its own log group, the rest (the platform's) to the application group."""
    prefix, log = "^" + re.escape(_TAG_PREFIX), r"\.log$"
    outputs = [
        _output(("Match_Regex", f"{prefix}{_namespace_tags([t])}{log}"), team_log_group("${CLUSTER_NAME}", t), False)
        for t in teams
    ]
    rest = ("Match_Regex", f"{prefix}(?!{_namespace_tags(teams)}{log}).+$") if teams else ("Match", "application.*")
    outputs.append(_output(rest, "/aws/containerinsights/${CLUSTER_NAME}/application", True))
    return (
        "\n\n".join(
            [
                _section(
                    "INPUT",
                    [
                        ("Name", "tail"),
                        ("Tag", "application.*"),
                        (
                            "Exclude_Path",
                            ", ".join(f"/var/log/containers/{pod}*_{namespace}_*" for pod, namespace in AGENT_PODS),
                        ),
                        ("Path", "/var/log/containers/*.log"),
                        ("multiline.parser", "docker, cri"),
                        ("DB", "/var/fluent-bit/state/flb_container.db"),
                        ("Mem_Buf_Limit", "50MB"),
                        ("Skip_Long_Lines", "On"),
                        ("Refresh_Interval", "10"),
                        ("Rotate_Wait", "30"),
                        ("storage.type", "filesystem"),
                        ("Read_from_Head", "${READ_FROM_HEAD}"),
                    ],
                ),
                _section(
                    "FILTER",
                    [
                        ("Name", "kubernetes"),
                        ("Match", "application.*"),
                        ("Kube_URL", "https://kubernetes.default.svc:443"),
                        ("Kube_Tag_Prefix", _TAG_PREFIX),
                        ("Merge_Log", "On"),
                        ("Merge_Log_Key", "log_processed"),
                        ("K8S-Logging.Parser", "On"),
                        ("K8S-Logging.Exclude", "Off"),
                        ("Labels", "On"),  # job name, replica type and index on every line
                        ("Annotations", "Off"),
                        ("Use_Kubelet", "On"),
                        ("Kubelet_Port", "10250"),
                        ("Buffer_Size", "0"),
                    ],
                ),
                *outputs,
            ]
        )
        + "\n"
    )


def addon_configuration(base: dict, teams: Sequence[str] = ()) -> dict:
    """The add-on's configuration values: `base` plus our container-log config."""
    conf = application_log_conf(teams)
    return {**base, "containerLogs": {"fluentBit": {"config": {"extraFiles": {APPLICATION_LOG_FILE: conf}}}}}


def parse(conf: str) -> list[tuple[str, dict[str, str]]]:
    """A classic-mode Fluent Bit config as (section, {key: value}) in order (keys case-insensitive
    in Fluent Bit; kept as written here)."""
    sections: list[tuple[str, dict[str, str]]] = []
    for raw in conf.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            sections.append((line[1:-1], {}))
            continue
        key, _, value = line.partition(" ")
        sections[-1][1][key] = value.strip()
    return sections
