"""Signals a tenant cannot forge (issue 34, point 3): every query that drives scheduling (the
elastic room, the HPAs' metrics), the GPU dashboard or an alert names the scrape job of the exporter it
means, so a series a tenant's serving pod exports under the same name is never summed in; the
serving scrape keeps only the serving metric. The injection runs through Prometheus' own engine
with `promtool test rules` where promtool is installed (otherwise that test is skipped: run
`promtool test rules` on the file this test writes, or install promtool and rerun this file)."""

from __future__ import annotations

import re
import shutil
import subprocess

import job_watchdog as watchdog_program  # images/training, on the path as in the image
import pytest
import yaml

from components import job_watchdog, observability, workloads
from tests.promql import held, promtool_test

# The series the platform's queries read: Volcano's, kube-state-metrics', DCGM's, the EFA exporter's, serving's.
SERIES = re.compile(r"\b((?:volcano|kube|DCGM|node_amazonefa|higgsfield)_\w+)(\{[^}]*\})?")


def _queries() -> dict[str, str]:
    adapter = observability.prometheus_adapter_rules()
    out = {"elastic room": workloads.ELASTIC_ROOM_QUERY}
    out.update({p["title"]: p["targets"][0]["expr"] for p in observability.gpu_dashboard()["panels"]})
    for rule in [*adapter["custom"], *adapter["external"]]:
        out[f"adapter {rule['name']['as']} series"] = rule["seriesQuery"]
        series = rule["name"]["matches"].strip("^$")  # the Prometheus series the rule reads
        out[f"adapter {rule['name']['as']} query"] = rule["metricsQuery"].replace("<<.Series>>", series)
    for group in job_watchdog.alert_rules([]):
        out.update({f"alert {r['alert']}": r["expr"] for r in group["rules"]})
    return out


@pytest.mark.parametrize(("name", "query"), sorted(_queries().items()))
def test_every_scheduling_and_dashboard_query_names_the_job_it_reads(name, query):
    selectors = SERIES.findall(query)
    assert selectors, query
    for metric, matchers in selectors:
        assert re.search(r'job="[a-z-]+"', matchers), (name, metric, matchers)


def test_the_serving_scrape_keeps_only_the_serving_metric():
    """A tenant's serving pod is scraped cluster-wide: whatever else it exports never reaches Prometheus."""
    job = workloads.serving_scrape_job()
    assert job["job_name"] == workloads.SERVING_JOB and "honor_labels" not in job
    assert job["metric_relabel_configs"] == [
        {"source_labels": ["__name__"], "regex": workloads.SERVING_METRIC, "action": "keep"}
    ]


def test_a_tenants_scraped_endpoint_cannot_flood_prometheus():
    """Beside the forged names: a serving pod answering with millions of series would exhaust the
    Prometheus every team's HPA and dashboard read."""
    job = workloads.serving_scrape_job()
    assert 0 < job["sample_limit"] <= 1000 and 0 < job["label_limit"] <= 64 and job["body_size_limit"]


def test_a_pod_joining_the_progress_scrape_cannot_flood_prometheus():
    """Any tenant pod joins the training-progress scrape (a port named `progress` and the job-name label are
    its own): at most this much per pod, or its scrape fails, as the serving scrape."""
    job = observability.training_progress_scrape_job()
    assert 0 < job["sample_limit"] <= 1000 and 0 < job["label_limit"] <= 64 and job["body_size_limit"]


def test_the_progress_scrape_keeps_only_the_training_series():
    job = observability.training_progress_scrape_job()
    keep = job["metric_relabel_configs"][0]
    assert keep["source_labels"] == ["__name__"] and keep["action"] == "keep"
    # Prometheus anchors the regex: a tenant's own series never enters, nor one merely prefixed like ours
    for name in ("volcano_queue_request_scalar_resources", "higgsfield_training_step_x", "DCGM_FI_DEV_XID_ERRORS"):
        assert not re.fullmatch(keep["regex"], name), name
    assert re.fullmatch(keep["regex"], "higgsfield_training_step")


def _metric_relabel(labels: dict[str, str], configs: list[dict]) -> dict[str, str] | None:
    """Prometheus' keep and labelkeep as configuration.md#relabel_config gives them (an anchored RE2 regex; an
    absent label is the empty value; source labels joined by `;`), enough for the progress scrape's rules."""
    for rule in configs:
        regex = re.compile(f"^(?:{rule['regex']})$")
        if rule["action"] == "keep":
            if not regex.match(";".join(labels.get(k, "") for k in rule["source_labels"])):
                return None
        elif rule["action"] == "labelkeep":
            labels = {k: v for k, v in labels.items() if regex.match(k)}
    return labels


PROGRESS_TARGET = {"job": "training-progress", "instance": "10.0.0.5:9464", "namespace": "vision", "pod": "j-0"}


def test_a_progress_series_keeps_only_the_targets_and_progress_pys_labels():
    """A label of the pod's choosing on a kept series (a new value each scrape) would mint series the
    sample_limit of one scrape never bounds."""
    job = observability.training_progress_scrape_job()
    own = {"rank": "1023", "node": "ip-10-0-1-7.us-east-2.compute.internal", "recreate": "true"}
    series = {**PROGRESS_TARGET, "__name__": "higgsfield_preflight_suspect", **own}
    assert _metric_relabel({**series, "seed": "81723"}, job["metric_relabel_configs"]) == series


@pytest.mark.parametrize(
    ("label", "value"), [("rank", "r-81723"), ("rank", "123456"), ("node", "Not A Node"), ("recreate", "x1")]
)
def test_a_progress_sample_whose_rank_or_node_is_no_such_thing_is_dropped(label, value):
    job = observability.training_progress_scrape_job()
    series = {**PROGRESS_TARGET, "__name__": "higgsfield_preflight_suspect", label: value}
    assert _metric_relabel(series, job["metric_relabel_configs"]) is None


def test_a_pod_declaring_the_progress_port_in_many_containers_is_scraped_once():
    """Role pod makes a target per declared container port, and a port name need only be unique within a
    container: only the platform's port number is kept and no container label reaches the target, so every
    such target of a pod has one label set and address, which Prometheus scrapes once."""
    from infra.core.names import PROGRESS_PORT

    relabel = observability.training_progress_scrape_job()["relabel_configs"]
    assert {
        "source_labels": ["__meta_kubernetes_pod_container_port_number"],
        "regex": str(PROGRESS_PORT),
        "action": "keep",
    } in relabel
    assert not any(
        r.get("target_label") and any(s.startswith("__meta_kubernetes_pod_container") for s in r["source_labels"])
        for r in relabel
    )


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed here")
def test_the_rendered_progress_scrape_is_a_valid_prometheus_scrape_config(tmp_path):
    """Its limits and keep as Prometheus parses them. Debian's promtool is built without Kubernetes service
    discovery, so the pod discovery is swapped for a static target (what is checked is the rest)."""
    job = observability.training_progress_scrape_job()
    assert job.pop("kubernetes_sd_configs") == [{"role": "pod"}]
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"scrape_configs": [{**job, "static_configs": [{"targets": ["pod:9000"]}]}]}))
    result = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def _room(queue: str, pool: str) -> str:
    """The elastic room as prometheus-adapter sends it for an HPA selecting {queue_name, pool}."""
    return workloads.ELASTIC_ROOM_QUERY.replace('<<index .LabelValuesByName "queue_name">>', queue).replace(
        '<<index .LabelValuesByName "pool">>', pool
    )


GPU = 'resource="nvidia.com/gpu"'
SCHED, KSM = 'job="volcano-scheduler"', 'job="kube-state-metrics"'
TENANT = 'job="serving",namespace="vision",pod="forger"'  # what a tenant's serving pod's series carry
CLEAN = [
    # queue `research` holds 16 GPUs and waits for none; queue `vision` holds its capability, 16 GPUs elsewhere, and
    # has 16 more Pending it can never be given (its deserved share is its capability: components/demand.py); pool
    # h100 has 4 nodes of 8 GPUs, 16 of them used. Volcano exports a deserved share beside each queue's request.
    (f'volcano_queue_allocated_scalar_resources{{{SCHED},{GPU},queue_name="research"}}', "16000"),
    (f'volcano_queue_request_scalar_resources{{{SCHED},{GPU},queue_name="research"}}', "16000"),
    (f'volcano_queue_deserved_scalar_resources{{{SCHED},{GPU},queue_name="research"}}', "16000"),
    (f'volcano_queue_allocated_scalar_resources{{{SCHED},{GPU},queue_name="vision"}}', "16000"),
    (f'volcano_queue_request_scalar_resources{{{SCHED},{GPU},queue_name="vision"}}', "32000"),
    (f'volcano_queue_deserved_scalar_resources{{{SCHED},{GPU},queue_name="vision"}}', "16000"),
    *((f'kube_node_status_allocatable{{{KSM},resource="nvidia_com_gpu",node="n{i}"}}', "8") for i in range(4)),
    *((f'kube_node_labels{{{KSM},node="n{i}",label_higgsfield_io_pool="h100"}}', "1") for i in range(4)),
    *(
        (f'kube_pod_container_resource_requests{{{KSM},resource="nvidia_com_gpu",node="n{i}",pod="p{i}"}}', "8")
        for i in range(2)
    ),
    ('DCGM_FI_DEV_XID_ERRORS{job="dcgm-exporter",Hostname="n0",gpu="0"}', "0"),
    ('volcano_queue_pod_group_pending_count{job="volcano-controller",queue_name="research"}', "0"),
]
FORGED = [
    # freeze every team's growth: a huge waiting request; or grow one team: a huge allocation elsewhere
    (f'volcano_queue_request_scalar_resources{{{TENANT},{GPU},queue_name="production"}}', "1000000000"),
    (f'volcano_queue_allocated_scalar_resources{{{TENANT},{GPU},queue_name="research"}}', "1"),
    # or freeze it by raising a queue's deserved share over the work it can never be given
    (f'volcano_queue_deserved_scalar_resources{{{TENANT},{GPU},queue_name="vision"}}', "1000000000"),
    (f'kube_node_status_allocatable{{{TENANT},resource="nvidia_com_gpu",node="n9"}}', "1000"),
    (f'kube_node_labels{{{TENANT},node="n9",label_higgsfield_io_pool="h100"}}', "1"),
    # XID errors on a healthy node, pending gangs that are not there
    (f'DCGM_FI_DEV_XID_ERRORS{{{TENANT},Hostname="n0",gpu="0"}}', "79"),
    (f'volcano_queue_pod_group_pending_count{{{TENANT},queue_name="research"}}', "50"),
]


def _cases() -> list[dict]:
    """The elastic room and the dashboard's XID and pending-gang panels, each as over the clean series."""
    panels = {p["title"]: p["targets"][0]["expr"] for p in observability.gpu_dashboard()["panels"]}
    return [
        # (16 held + 32 - 16 free) / 16 held
        {"expr": _room("research", "h100"), "eval_time": "2m", "exp_samples": [{"labels": "{}", "value": 2}]},
        {
            "expr": panels["XID errors (last code, 0 = none)"],
            "eval_time": "2m",
            "exp_samples": [{"labels": '{Hostname="n0", gpu="0"}', "value": 0}],
        },
        {
            "expr": panels["Pending gangs per queue"],
            "eval_time": "2m",
            "exp_samples": [{"labels": '{queue_name="research"}', "value": 0}],
        },
    ]


def test_progress_pys_own_series_pass_the_progress_scrape_whole():
    job = observability.training_progress_scrape_job()
    for extra in (
        {"rank": "0"},
        {"rank": "1023"},
        {"node": "ip-10-0-1-7.us-east-2.compute.internal", "recreate": "true"},
    ):
        series = {**PROGRESS_TARGET, "__name__": "higgsfield_training_step", **extra}
        assert _metric_relabel(series, job["metric_relabel_configs"]) == series


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed here")
@pytest.mark.parametrize("forged", [False, True], ids=["clean", "with-tenant-series"])
def test_injected_tenant_series_change_neither_the_elastic_room_nor_the_dashboard(tmp_path, forged):
    result = promtool_test(tmp_path, held(CLEAN + (FORGED if forged else [])), _cases())
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_job_watchdog_reads_only_the_progress_scrapes_series():
    """The watchdog restarts gangs and sends nodes back to the gate on what it reads: the same names
    from another scrape job (a serving pod's, say) are never among them."""
    for query in [*watchdog_program.QUERIES.values(), watchdog_program.SUSPECTS]:
        for _, matchers in SERIES.findall(query):
            assert f'job="{workloads.TRAINING_PROGRESS_JOB}"' in matchers, query
