"""Hostile and careless stack settings that AWS, the kubelet or the API server would refuse halfway
through a deploy (or that would quietly break the platform) are refused by `higgsfield plan` first:
exit 2, one line naming the key, no traceback. Also: the bounds are declared on the
models, the credential scan is linear in a value's length, and the derived-name rules follow the
names the components really give."""

from __future__ import annotations

import time
from typing import Any

import pytest

from infra.config import StackConfig
from infra.config.limits import PROGRAM_TAGS, STARTUP_TAINT_KEY, kubelet_refuses
from infra.config.loading import credential_problems
from tests.conftest import assert_plan_rejects, plan_of, set_field, set_key, set_pool


def _team(name: str, uid: int, queue: str = "ml", classes: tuple[str, ...] = ("batch-low",)) -> dict:
    return {"name": name, "queue": queue, "gpuQuota": 1, "priorityClasses": list(classes), "uid": uid}


def add_team(base_team: dict) -> Any:
    """Add a team with a queue of its own (each team's queue is its GPU quota)."""

    def change(config: dict) -> None:
        scheduler = config["higgsfield:scheduler"]
        queue = f"q-{base_team['name']}"[:30]
        scheduler["queues"].append({"name": queue, "weight": 1, "gpuCapability": base_team["gpuQuota"]})
        scheduler["teams"].append({**base_team, "queue": queue})

    return change


def add_dataset_and_team(config: dict) -> None:
    config["higgsfield:fsx"]["datasets"].append({"name": "b", "owner": "llm"})
    add_team(_team("llm-ds-b", 20999))(config)


def both(*changes: Any) -> Any:
    def change(config: dict) -> None:
        for c in changes:
            c(config)

    return change


LONG_KEY = "a" * 40 + ".example.com/" + "b" * 20
SESSION = "arn:aws:sts::111122223333:assumed-role/PlatformAdmin/alice@example.com"
CASES = {
    # --- reserved labels and taints (the platform's, the kubelet's, the API server's) ---
    "label_overrides_pool_label": (
        "dev",
        set_pool(0, labels={"higgsfield.io/pool": "other"}),
        "higgsfield:gpuPools[0].labels.higgsfield.io/pool",
        "platform's own node label",
    ),
    "label_overrides_gpu_present": (
        "dev",
        set_pool(0, labels={"nvidia.com/gpu.present": "false"}),
        "higgsfield:gpuPools[0].labels.nvidia.com/gpu.present",
        "platform's own node label",
    ),
    "label_overrides_efa_present": (
        "dev",
        set_pool(0, labels={"vpc.amazonaws.com/efa.present": "true"}),
        "higgsfield:gpuPools[0].labels.vpc.amazonaws.com/efa.present",
        "platform's own node label",
    ),
    "label_kubernetes_io_role": (
        "dev",
        set_pool(0, labels={"kubernetes.io/role": "gpu"}),
        "higgsfield:gpuPools[0].labels.kubernetes.io/role",
        "kubelet refuses",
    ),
    "label_node_role": (
        "dev",
        set_pool(0, labels={"node-role.kubernetes.io/gpu": "x"}),
        "higgsfield:gpuPools[0].labels.node-role.kubernetes.io/gpu",
        "kubelet refuses",
    ),
    "label_k8s_io": (
        "dev",
        set_pool(0, labels={"example.k8s.io/x": "y"}),
        "higgsfield:gpuPools[0].labels.example.k8s.io/x",
        "kubelet refuses",
    ),
    "label_key_over_eks_limit": (
        "dev",
        set_pool(0, labels={LONG_KEY: "x"}),
        f"higgsfield:gpuPools[0].labels.{LONG_KEY}",
        "at most 63",
    ),
    "label_value_empty_eks_refuses": (
        "dev",
        set_pool(0, labels={"team": ""}),
        "higgsfield:gpuPools[0].labels.team",
        "must not be empty",
    ),
    "taint_replaces_gpu_taint": (
        "dev",
        set_pool(0, taints=[{"key": "nvidia.com/gpu", "value": "false", "effect": "PreferNoSchedule"}]),
        "higgsfield:gpuPools[0].taints[0].key",
        "taint the platform sets",
    ),
    "taint_duplicates_startup_taint": (
        "dev",
        set_pool(0, taints=[{"key": STARTUP_TAINT_KEY, "value": "x"}]),
        "higgsfield:gpuPools[0].taints[0].key",
        "taint the platform sets",
    ),
    "taint_system_key": (
        "dev",
        set_pool(0, taints=[{"key": "higgsfield.io/system", "value": "true"}]),
        "higgsfield:gpuPools[0].taints[0].key",
        "taint the platform sets",
    ),
    "taint_autoscaler_prefix": (
        "dev",
        set_pool(0, taints=[{"key": "ignore-taint.cluster-autoscaler.kubernetes.io/x"}]),
        "higgsfield:gpuPools[0].taints[0].key",
        "Cluster Autoscaler",
    ),
    "taint_duplicate_key_and_effect": (
        "dev",
        set_pool(0, taints=[{"key": "dedicated", "value": "a"}, {"key": "dedicated", "value": "b"}]),
        "higgsfield:gpuPools[0].taints[1]",
        "duplicates taints[0]",
    ),
    "taint_key_over_eks_limit": (
        "dev",
        set_pool(0, taints=[{"key": "a" * 50 + ".io/" + "b" * 20}]),
        "higgsfield:gpuPools[0].taints[0].key",
        "at most 63",
    ),
    "labels_and_taints_beyond_the_asgs_50_tags": (
        "dev",
        set_pool(0, labels={f"l{i}": "x" for i in range(20)}, taints=[{"key": f"t{i}"} for i in range(14)]),
        "higgsfield:gpuPools[0].labels",
        "at most 50 tags",
    ),
    "too_many_taints": (
        "dev",
        set_pool(0, taints=[{"key": f"t{i}"} for i in range(51)]),
        "higgsfield:gpuPools[0].taints",
        "at most 50",
    ),
    # --- names that collide after derivation ---
    "team_named_like_another_teams_policy_binding": (
        "dev",
        add_team(_team("ml-admission-binding", 20002)),
        "higgsfield:scheduler.teams[1].name",
        "teams-ml-admission-binding",
    ),
    "team_named_like_another_teams_policy": (
        "dev",
        add_team(_team("ml-admission", 20002)),
        "higgsfield:scheduler.teams[1].name",
        "teams-ml-admission",
    ),
    "team_named_health_collides_with_the_health_volume": (
        "staging",
        add_team(_team("health", 20999)),
        "higgsfield:scheduler.teams[2].name",
        "lustre-pv-health",
    ),
    "team_and_dataset_derive_one_volume": (
        "staging",
        add_dataset_and_team,
        "higgsfield:scheduler.teams[2].name",
        "lustre-pv-llm-ds-b",
    ),
    "duplicated_admin": (
        "dev",
        set_key("higgsfield:admins", ["arn:aws:iam::111122223333:role/PlatformAdmin"] * 2),
        "higgsfield:admins[1]",
        "one per principal",
    ),
    "admin_is_the_ci_deploy_role": (
        "dev",
        set_key("higgsfield:admins", ["arn:aws:iam::111122223333:role/higgsfield-bad-deploy"]),
        "higgsfield:admins[0]",
        "one per principal",
    ),
    "pool_labels_that_derive_one_autoscaler_tag": (
        "dev",
        set_pool(0, labels={"example.com/x": "1", "example.com-x": "2"}),
        "higgsfield:gpuPools[0]",
        "twice",
    ),
    # --- AWS's limits and formats ---
    "tag_value_with_characters_aws_refuses": (
        "dev",
        set_field("higgsfield:tags", "team", "ml<platform>"),
        "higgsfield:tags.team",
        "not a valid AWS tag value",
    ),
    "tag_key_with_characters_aws_refuses": (
        "dev",
        set_field("higgsfield:tags", "team#1", "x"),
        "higgsfield:tags.team#1",
        "not a valid AWS tag key",
    ),
    "tag_key_the_program_sets": (
        "dev",
        set_field("higgsfield:tags", "Name", "x"),
        "higgsfield:tags.Name",
        "program sets itself",
    ),
    "too_many_tags_counting_ours": (
        "dev",
        set_key("higgsfield:tags", {f"k{i}": "v" for i in range(45)}),
        "higgsfield:tags",
        "at most 44",
    ),
    "bucket_with_adjacent_periods": (
        "staging",
        set_field("higgsfield:fsx", "s3", {"bucket": "my..bucket", "dataset": "train"}),
        "higgsfield:fsx.s3.bucket",
        "adjacent periods",
    ),
    "bucket_formatted_as_ip": (
        "staging",
        set_field("higgsfield:fsx", "s3", {"bucket": "192.168.5.4", "dataset": "train"}),
        "higgsfield:fsx.s3.bucket",
        "IP address",
    ),
    "bucket_with_reserved_prefix": (
        "staging",
        set_field("higgsfield:fsx", "s3", {"bucket": "xn--data", "dataset": "train"}),
        "higgsfield:fsx.s3.bucket",
        "reserves the prefixes",
    ),
    "repository_named_dot_dot": (
        "dev",
        set_field("higgsfield:delivery", "repository", "acme/.."),
        "higgsfield:delivery.repository",
        "not . or ..",
    ),
    "repository_owner_with_a_leading_hyphen": (
        "dev",
        set_field("higgsfield:delivery", "repository", "-acme/ml"),
        "higgsfield:delivery.repository",
        "single inner hyphens",
    ),
    "environment_named_dot_dot": (
        "dev",
        set_field("higgsfield:delivery", "deployEnvironment", ".."),
        "higgsfield:delivery.deployEnvironment",
        "not . or ..",
    ),
    "state_bucket_with_reserved_suffix": (
        "dev",
        set_field("higgsfield:delivery", "stateBucket", "state-s3alias"),
        "higgsfield:delivery.stateBucket",
        "suffixes",
    ),
    "zone_that_does_not_exist": (
        "dev",
        set_key("higgsfield:availabilityZones", ["us-west-2a", "us-west-2z"]),
        "higgsfield:availabilityZones[1]",
        "does not exist in us-west-2",
    ),
    "pool_zone_that_does_not_exist_is_the_zone_not_the_type": (
        "dev",
        set_pool(0, availabilityZone="us-west-2z"),
        "higgsfield:gpuPools[0].availabilityZone",
        "'us-west-2z' does not exist in us-west-2: its zones are us-west-2a, us-west-2b",
    ),
    "sts_session_as_admin": (
        "dev",
        set_key("higgsfield:admins", [SESSION]),
        "higgsfield:admins[0]",
        "arn:aws:iam::111122223333:role/PlatformAdmin",
    ),
    "private_range_as_public_cidr": (
        "dev",
        set_field("higgsfield:endpoint", "publicAccessCidrs", ["10.0.0.0/8"]),
        "higgsfield:endpoint.publicAccessCidrs[0]",
        "private (RFC 1918)",
    ),
    "loopback_as_public_cidr": (
        "dev",
        set_field("higgsfield:endpoint", "publicAccessCidrs", ["127.0.0.1/32"]),
        "higgsfield:endpoint.publicAccessCidrs[0]",
        "loopback",
    ),
    "too_many_public_cidrs": (
        "dev",
        set_field("higgsfield:endpoint", "publicAccessCidrs", [f"198.{i}.0.0/16" for i in range(41)]),
        "higgsfield:endpoint.publicAccessCidrs",
        "at most 40",
    ),
    "system_nodes_on_gpu_instances": (
        "dev",
        set_field("higgsfield:cpuNodes", "instanceTypes", ["g6e.xlarge"]),
        "higgsfield:cpuNodes.instanceTypes[0]",
        "GPUs",
    ),
    "capacity_block_in_the_past": (
        "prod",
        set_pool(
            1,
            capacity={
                "type": "capacity-block",
                "reservationId": "cr-0a1b2c3d4e5f60718",
                "start": "2020-01-04T11:30:00Z",
                "end": "2020-01-18T11:30:00Z",
                "drainBefore": "1h",
            },
        ),
        "higgsfield:gpuPools[1].capacity.end",
        "in the past",
    ),
    "health_gate_timeout_zero": (
        "dev",
        set_pool(0, healthGate={"timeout": "0m"}),
        "higgsfield:gpuPools[0].healthGate.timeout",
        "above zero",
    ),
    "flush_time_zero": (
        "dev",
        set_key("higgsfield:checkpoints", {"flushTime": "0s"}),
        "higgsfield:checkpoints.flushTime",
        "above zero",
    ),
    "duration_that_overflows": (
        "dev",
        set_pool(0, scaleDownUnneededTime="99999999999999h"),
        "higgsfield:gpuPools[0].scaleDownUnneededTime",
        "is not a duration",
    ),
    "infinite_threshold": (
        "dev",
        set_key("higgsfield:observability", {"healthcheck": {"minLustreMBps": float("inf")}}),
        "higgsfield:observability.healthcheck.minLustreMBps",
        "positive number below",
    ),
    # --- bounds on size ---
    "megabyte_reason": (
        "dev",
        set_pool(0, healthGate={"enabled": False, "reason": "x" * 1_000_000}),
        "higgsfield:gpuPools[0].healthGate.reason",
        "at most 1024 characters",
    ),
    "huge_weight": (
        "dev",
        set_field("higgsfield:scheduler", "queues", [{"name": "ml", "weight": 10**30, "gpuCapability": 2}]),
        "higgsfield:scheduler.queues[0].weight",
        "at most",
    ),
    "too_many_pools": (
        "dev",
        lambda c: c.update({"higgsfield:gpuPools": c["higgsfield:gpuPools"] * 101}),
        "higgsfield:gpuPools",
        "at most 100",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_setting_exits_2_and_names_the_key(case, project_copy, capsys):
    assert_plan_rejects(project_copy, capsys, *CASES[case])


def test_a_megabyte_value_is_reported_without_echoing_it(project_copy, capsys):
    from infra.cli.main import main

    project_copy("dev", set_field("higgsfield:cpuNodes", "instanceTypes", ["m" * 1_000_000]))
    assert main(["plan", "bad"]) == 2
    err = capsys.readouterr().err
    assert "higgsfield:cpuNodes.instanceTypes[0]" in err and len(err) < 2_000, len(err)


def test_credential_scan_is_linear_in_the_length_of_a_value():
    """The AWS-secret-key pattern used to rescan the rest of the value from every position: on a
    1 MB run of base64 characters that was quadratic (tens of seconds). Now each pattern is one
    pass; doubling the value about doubles the time, and 1 MB takes well under a second."""
    timings = []
    for size in (250_000, 1_000_000):
        for value in ("Ab0/" * (size // 4), "a/" * (size // 2)):  # with and without a digit (the old worst case)
            start = time.process_time()  # this process's CPU time: not the machine's load
            assert credential_problems({"higgsfield:trainingImage": value}) == []
            timings.append(time.process_time() - start)
    small, large = timings[0] + timings[1], timings[2] + timings[3]
    assert large < 1.0, timings
    assert large < 10 * small + 0.05, timings  # 4x the size: about 4x the time (quadratic would be 16x)


def test_credential_scan_still_finds_a_whole_secret_key():
    (problem,) = credential_problems({"higgsfield:trainingImage": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"})
    assert "an AWS secret access key" in problem.message


def _bounded(schema: dict, where: str, defs: dict) -> list[str]:
    """Paths in a JSON Schema whose strings, arrays or maps have no size bound."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return (
            []
            if name in defs.setdefault("_seen", set())
            else (defs["_seen"].add(name) or _bounded(defs[name], where, defs))
        )
    missing = []
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key, []):
            missing += _bounded(sub, where, defs)
    kind = schema.get("type")
    if kind == "string" and not ({"maxLength", "enum", "const"} & set(schema)):
        missing.append(where)
    if kind == "array":
        if "maxItems" not in schema and "prefixItems" not in schema:
            missing.append(where)
        missing += _bounded(schema.get("items", {}), f"{where}[]", defs)
    if kind == "object":
        if "additionalProperties" in schema and isinstance(schema["additionalProperties"], dict):
            if "maxProperties" not in schema:
                missing.append(where)
            missing += _bounded(schema["additionalProperties"], f"{where}.*", defs)
            if "propertyNames" in schema:
                missing += _bounded({"type": "string", **schema["propertyNames"]}, f"{where}.<key>", defs)
        for name, sub in schema.get("properties", {}).items():
            missing += _bounded(sub, f"{where}.{name}", defs)
    return missing


def test_every_string_list_and_map_of_a_stack_file_has_a_declared_bound():
    schema = StackConfig.model_json_schema(by_alias=True)
    defs = dict(schema.get("$defs", {}))
    assert _bounded(schema, "config", defs) == []


@pytest.mark.parametrize(
    "key, refused",
    [
        ("kubernetes.io/role", True),
        ("node-role.kubernetes.io/worker", True),
        ("app.kubernetes.io/name", True),
        ("k8s.io/x", True),
        ("node.kubernetes.io/instance-type", False),
        ("kubelet.kubernetes.io/x", False),
        ("topology.kubernetes.io/zone", False),
        ("example.com/x", False),
        ("team", False),
    ],
)
def test_kubelet_label_rule_matches_the_kubelets(key, refused):
    assert kubelet_refuses(key) is refused


def test_the_platforms_own_taints_fit_eks_taint_key_limit(stack, plan):
    """EKS refuses a node group taint key over 63 characters (API_Taint); the health gate's was 64."""
    for group in plan.of_type("aws:eks/nodeGroup:NodeGroup"):
        for taint in group.inputs.get("taints") or []:
            assert len(taint["key"]) <= 63, (group.name, taint["key"])


def test_the_program_adds_no_more_tags_than_the_config_leaves_room_for(stack, plan):
    own = set(plan.config.tags)
    for r in plan.resources:
        tags = r.inputs.get("tags")
        if isinstance(tags, dict):
            assert len(set(tags) - own) <= PROGRAM_TAGS, (r.type, r.name, sorted(set(tags) - own))


def test_derived_team_and_volume_names_are_the_components_names():
    """infra/config/names.py derives what components/teams.py and components/storage.py name."""
    from infra.config.names import team_resource_names, volume_names

    plan = plan_of("prod")
    names = {r.name for r in plan.resources}
    for i in range(len(plan.config.scheduler.teams)):
        assert set(team_resource_names(plan.config, i)) <= names
    assert {resource for _, resource, _ in volume_names(plan.config)} <= names
    pvs = {
        r.inputs["metadata"]["name"]
        for r in plan.resources
        if isinstance(r.inputs.get("metadata"), dict) and r.inputs.get("kind") == "PersistentVolume"
    }
    assert {pv for _, _, pv in volume_names(plan.config)} <= pvs


def test_derived_autoscaler_tag_names_are_the_components_names():
    from components.gpu_pools import autoscaler_template_tags
    from infra.config.names import pool_tag_resource_names

    plan = plan_of("prod")
    names = {r.name for r in plan.of_type("aws:autoscaling/tag:Tag")}
    for pool in plan.config.gpu_pools:
        assert set(pool_tag_resource_names(f"gpu-{pool.name}", list(autoscaler_template_tags(pool)))) <= names


def test_derived_pool_tag_names_are_the_components_names():
    from infra.config.names import _pool_names

    for stack in ("dev", "prod"):
        plan = plan_of(stack)
        names = {r.name for r in plan.of_type("aws:autoscaling/tag:Tag")}
        assert {name for _, name in _pool_names(plan.config)} <= names
