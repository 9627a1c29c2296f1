"""A team's own job file: the issue's example renders for prod as written, on its H100/H200 EFA pools,
with node affinity on the driver label and every platform rule the examples follow; what no pool
can give is refused naming the job file's key."""

from __future__ import annotations

import copy

import pytest
import yaml

from components.gpu_pools import autoscaler_template_tags
from components.teams import rules_of
from components.tenancy import OPERATOR_USER
from infra.config import ConfigError, load_job
from infra.config.job import FRAMEWORKS
from infra.core import versions
from infra.core.names import AUTOSCALER_TEMPLATE, DO_NOT_DISRUPT, DRIVER_MAJOR_LABEL, JOB_NAME_PREFIXES
from infra.offline import jobs, kubernetes_schema, team_job
from tests.conftest import ROOT, config_of
from tests.security.test_tenancy import _operator_pod, denied_by, is_denied

EXAMPLE = yaml.safe_load((ROOT / "examples" / "llama-ft.job.yaml").read_text())


def _render(stack: str = "prod", **changes):
    data = copy.deepcopy(EXAMPLE)
    if "framework" in changes and "name" not in changes:  # a Kubeflow job's name starts with its kind's prefix
        data["name"] = JOB_NAME_PREFIXES.get(FRAMEWORKS[changes["framework"]][0], "") + data["name"]
    for key, value in changes.items():
        if "." in key:
            outer, inner = key.split(".")
            data[outer] = {**data[outer], inner: value}
            if value is None:
                del data[outer][inner]
        elif value is None:
            data.pop(key, None)
        else:
            data[key] = value
    job = load_job(data)
    objects, placed = team_job.render(job, config_of(stack))
    return job, objects, placed


def _refused(key: str, stack: str = "prod", **changes) -> str:
    with pytest.raises(ConfigError) as refused:
        _render(stack, **changes)
    assert refused.value.key == key, refused.value
    return refused.value.problems[0].message


def _templates(objects):
    return list(jobs.pod_templates(objects[-1], named=True))


def _env(template) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in template["spec"]["containers"][0]["env"]}  # valueFrom: None


def test_the_issues_example_is_the_shipped_job_file_as_written():
    assert EXAMPLE == {
        "name": "llama-ft",
        "team": "llm",
        "command": ["python", "train.py", "--epochs", "3"],
        "resources": {
            "gpus": 16,
            "gpuType": ["H100", "H200"],
            "gpuMemoryGiB": 80,
            "interconnect": "efa",
            "cudaDriver": ">=570",
        },
        "checkpoints": "shared",
    }


def test_the_example_renders_for_prod_on_two_whole_h100_efa_nodes():
    _, objects, placed = _render()
    assert (placed.pool.name, placed.pods, placed.gpus_per_pod) == ("h100", 2, 8)
    assert placed.pool.efa and placed.others == ("h200-block",)  # on-demand first; the block fits too
    job = objects[-1]
    assert job["kind"] == "PyTorchJob" and job["spec"]["nprocPerNode"] == "8"
    assert {r: s["replicas"] for r, s in job["spec"]["pytorchReplicaSpecs"].items()} == {"Master": 1, "Worker": 1}
    assert job["spec"]["runPolicy"]["schedulingPolicy"] == {
        "queue": "research",
        "priorityClass": "batch-low",
        "minAvailable": 2,
    }


def test_the_driver_requirement_is_node_affinity_on_the_label_gpu_feature_discovery_publishes():
    _, objects, _ = _render()
    for _, template in _templates(objects):
        terms = template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"] == [
            {"matchExpressions": [{"key": "nvidia.com/cuda.driver-version.major", "operator": "Gt", "values": ["569"]}]}
        ]


def test_an_exact_driver_branch_is_an_in_requirement():
    _, objects, _ = _render(**{"resources.cudaDriver": "580"})
    (_, template), *_ = _templates(objects)
    expression = template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert expression["nodeSelectorTerms"][0]["matchExpressions"][0] == {
        "key": DRIVER_MAJOR_LABEL,
        "operator": "In",
        "values": ["580"],
    }


def test_a_pool_scaled_to_zero_still_offers_the_driver_label_to_the_autoscaler():
    """Without it the Cluster Autoscaler's template node would not fit the job's affinity: no scale-up."""
    pool = next(p for p in config_of("prod").gpu_pools if p.name == "h100")
    tags = autoscaler_template_tags(pool)
    assert tags[f"{AUTOSCALER_TEMPLATE}/label/{DRIVER_MAJOR_LABEL}"] == str(versions.EKS_NVIDIA_DRIVER_BRANCH)


def test_a_karpenter_pool_defines_the_driver_label_so_karpenter_launches_for_the_jobs_affinity():
    from components.karpenter import node_pool

    pool = next(p for p in config_of("prod").gpu_pools if p.name == "h100").model_copy(
        update={"provisioner": "karpenter"}
    )
    labels = node_pool(pool)["spec"]["template"]["metadata"]["labels"]
    assert labels[DRIVER_MAJOR_LABEL] == str(versions.EKS_NVIDIA_DRIVER_BRANCH)


def test_every_platform_rule_applies_without_the_team_writing_it():
    cfg = config_of("prod")
    _, objects, placed = _render()
    team = next(t for t in cfg.scheduler.teams if t.name == "llm")
    for _, template in _templates(objects):
        spec, main = template["spec"], template["spec"]["containers"][0]
        limits = main["resources"]["limits"]
        assert spec["nodeSelector"] == {"higgsfield.io/pool": "h100", "topology.kubernetes.io/zone": "us-east-2b"}
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
        assert limits["nvidia.com/gpu"] == 8 and limits["vpc.amazonaws.com/efa"] == 32 and "hugepages-2Mi" in limits
        assert _env(template)["FI_PROVIDER"] == "efa"
        assert {"name": "shm", "mountPath": "/dev/shm"} in main["volumeMounts"] and "memory" in limits
        assert _env(template)["CHECKPOINT_SHARED_DIR"] == "/fsx/checkpoints/llama-ft"
        assert spec["terminationGracePeriodSeconds"] == cfg.checkpoints.grace_seconds
        assert {"name": "shared", "mountPath": "/fsx"} in main["volumeMounts"]
        assert {"name": "dataset-train", "mountPath": "/datasets/train", "readOnly": True} in main["volumeMounts"]
        assert template["metadata"]["annotations"][DO_NOT_DISRUPT] == "true"
        assert spec["securityContext"]["runAsUser"] == spec["securityContext"]["fsGroup"] == team.uid
        assert spec["priorityClassName"] == "batch-low"
    assert placed.pool.name == "h100"


@pytest.mark.parametrize("kind", ["training", "evaluation"])
def test_the_rendered_job_passes_its_teams_admission_policy_and_no_other_teams(kind):
    cfg = config_of("prod")
    _, objects, _ = _render(**{"class": kind})
    rules = {t.name: rules_of(t, cfg.scheduler.priority_classes, pools=cfg.gpu_pools) for t in cfg.scheduler.teams}
    assert denied_by(objects[-1], rules["llm"]) == []
    for _, template in _templates(objects):
        assert denied_by(_operator_pod(template, "llm"), rules["llm"], user=OPERATOR_USER) == []
    assert is_denied(objects[-1], rules["vision"])


def test_the_pods_and_the_configmap_validate_against_the_kubernetes_schema():
    version = config_of("prod").kubernetes_version
    _, objects, _ = _render()
    kubernetes_schema.validate(objects[0], version)
    for _, template in _templates(objects):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", **template["metadata"]}}
        kubernetes_schema.validate({**pod, "spec": template["spec"]}, version)


def test_the_teams_python_command_runs_under_torchrun_behind_the_launcher_and_its_rank_prefixer():
    _, objects, _ = _render()
    (_, template), *_ = _templates(objects)
    assert template["spec"]["containers"][0]["command"][3:] == [  # behind the pre-flight (python preflight.py --)
        "python",
        "/code/checkpointing.py",
        "torchrun",
        "--no-python",
        "python",
        "/code/checkpointing.py",
        "--rank-prefix",
        "python",
        "train.py",
        "--epochs",
        "3",
    ]
    assert "def prefix_ranks" in objects[0]["data"]["checkpointing.py"]


@pytest.mark.parametrize(
    ("key", "changes", "said"),
    [
        ("resources.gpuType", {"resources.gpuType": ["A100"]}, "A100: no GPU pool of stack prod has it"),
        ("resources.gpuMemoryGiB", {"resources.gpuMemoryGiB": 300}, "300 GiB per GPU"),
        ("resources.cudaDriver", {"resources.cudaDriver": ">=590"}, "branch 580"),
        ("resources.gpus", {"resources.gpus": 12}, "neither one node's share nor whole nodes"),
        ("resources.gpus", {"resources.gpus": 128}, "quota of 96 GPUs"),
        ("team", {"team": "nlp"}, "no team 'nlp'"),
        ("priority", {"priority": "production-critical"}, "not one of team llm's training classes"),
        ("data[0].dataset", {"data": [{"dataset": "medical"}]}, "no dataset 'medical'"),
        ("env.FI_PROVIDER", {"env": {"FI_PROVIDER": "tcp"}}, "set by the platform"),
        ("image", {"image": "docker.io/pytorch/pytorch:2.7.0"}, "not an EFA-ready image"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_what_no_pool_or_rule_allows_is_refused_naming_the_key(key, changes, said):
    assert said in _refused(key, **changes)


def test_efa_is_refused_on_a_stack_whose_pools_have_none():
    message = _refused(
        "resources.interconnect",
        "dev",
        team=config_of("dev").scheduler.teams[0].name,
        **{"resources.gpuType": None, "resources.gpuMemoryGiB": None, "resources.gpus": 1},
    )
    assert "l40s" in message


def test_a_job_smaller_than_a_node_takes_a_share_of_it_without_efa():
    _, objects, placed = _render(**{"resources.gpus": 2})
    (_, template), *rest = _templates(objects)
    limits = template["spec"]["containers"][0]["resources"]["limits"]
    assert not rest and (placed.pods, placed.gpus_per_pod) == (1, 2)
    assert limits["nvidia.com/gpu"] == 2 and "vpc.amazonaws.com/efa" not in limits
    assert limits["memory"] == f"{int(placed.pool.instance.memory_mib * 0.75 * 2 / 8 // 1024)}Gi"


def test_an_mpi_job_runs_the_teams_mpirun_on_its_launcher_which_alone_keeps_its_api_token():
    cfg = config_of("prod")
    command = ["mpirun", "-np", "16", "python", "train.py"]
    _, objects, _ = _render(framework="mpi", command=command)
    job, rules = (
        objects[-1],
        rules_of(
            next(t for t in cfg.scheduler.teams if t.name == "llm"), cfg.scheduler.priority_classes, pools=cfg.gpu_pools
        ),
    )
    launcher, worker = (job["spec"]["mpiReplicaSpecs"][r]["template"]["spec"] for r in ("Launcher", "Worker"))
    assert launcher["containers"][0]["command"] == [*jobs.MPI_PREFLIGHT, *command]  # its workers checked first
    assert "automountServiceAccountToken" not in launcher
    assert "command" not in worker["containers"][0] and worker["automountServiceAccountToken"] is False
    assert job["spec"]["slotsPerWorker"] == 8 and denied_by(job, rules) == []


def test_an_mpi_jobs_launcher_runs_on_the_teams_cpu_nodes_and_its_workers_on_the_pool():
    """A pod without GPUs on a GPU node is refused (components/tenancy.py): the launcher goes to the teams' CPU nodes,
    keeping a lost node's short tolerations; its workers stay on the pool the job was placed on."""
    from components.cpu_nodes import ON_TEAM_CPU_NODES

    _, objects, _ = _render(framework="mpi", command=["mpirun", "python", "train.py"])
    launcher, worker = (objects[-1]["spec"]["mpiReplicaSpecs"][r]["template"]["spec"] for r in ("Launcher", "Worker"))
    assert launcher["nodeSelector"] == ON_TEAM_CPU_NODES["nodeSelector"]
    keys = [t["key"] for t in launcher["tolerations"]]
    assert keys[0] == ON_TEAM_CPU_NODES["tolerations"][0]["key"] and "nvidia.com/gpu" not in keys
    assert "node.kubernetes.io/unreachable" in keys
    assert "higgsfield.io/pool" in worker["nodeSelector"]


def test_an_evaluation_job_is_preemptable_and_never_holds_its_nodes():
    _, objects, _ = _render(**{"class": "evaluation"})
    for _, template in _templates(objects):
        annotations = template["metadata"]["annotations"]
        assert annotations["volcano.sh/preemptable"] == "true" and DO_NOT_DISRUPT not in annotations
        assert template["spec"]["priorityClassName"] == "evaluation"


def test_an_elastic_job_starts_at_its_minimum_and_grows_to_its_gpus():
    _, objects, placed = _render(elastic={"minGpus": 8}, **{"resources.gpus": 32})
    job = objects[-1]
    assert job["spec"]["elasticPolicy"]["minReplicas"] == 1 and job["spec"]["elasticPolicy"]["maxReplicas"] == 4
    assert list(job["spec"]["pytorchReplicaSpecs"]) == ["Worker"]
    assert job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 1
    assert placed.pods == 4
    (metric,) = job["spec"]["elasticPolicy"]["metrics"]  # grows by the room of its queue on its pool, as the example
    example = jobs.render("pytorch-elastic", config_of("prod"), pool="h100", team="llm")[-1]
    assert metric == example["spec"]["elasticPolicy"]["metrics"][0]
    templates = _templates(objects)
    assert {t["metadata"]["annotations"]["volcano.sh/preemptable"] for _, t in templates} == {"true"}


@pytest.mark.parametrize(
    ("framework", "kind", "replicas"),
    [
        ("mpi", "MPIJob", {"Launcher": 1, "Worker": 2}),
        ("tensorflow", "TFJob", {"Chief": 1, "Worker": 1}),
        ("xgboost", "XGBoostJob", {"Master": 1, "Worker": 1}),
        ("jax", "JAXJob", {"Worker": 2}),
        ("paddle", "PaddleJob", {"Master": 1, "Worker": 1}),
    ],
)
def test_every_framework_the_pinned_operator_runs_renders_with_its_container_name(framework, kind, replicas):
    _, objects, _ = _render(framework=framework)
    job = objects[-1]
    key = next(k for k in job["spec"] if k.endswith("ReplicaSpecs"))
    assert job["kind"] == kind and {r: s["replicas"] for r, s in job["spec"][key].items()} == replicas
    containers = {s["template"]["spec"]["containers"][0]["name"] for s in job["spec"][key].values()}
    assert containers == {framework}


def test_shared_checkpoints_on_several_nodes_without_fsx_are_refused():
    with pytest.raises(ConfigError) as refused:
        cfg = config_of("prod").model_copy(update={"fsx": config_of("prod").fsx.model_copy(update={"enabled": False})})
        team_job.render(load_job(EXAMPLE), cfg)
    assert refused.value.key == "checkpoints"


def _prod_without_fsx_beside_one_gpu_nodes(first: bool):
    """prod without FSx, with a pool of one-GPU nodes (dev's L40S, four of them) before or after its pools."""
    prod, l40s = config_of("prod"), next(p for p in config_of("dev").gpu_pools if p.name == "l40s")
    small = l40s.model_copy(update={"max_size": 4, "capacity": prod.gpu_pools[0].capacity})
    pools = [small, *prod.gpu_pools] if first else [*prod.gpu_pools, small]
    return prod.model_copy(update={"fsx": prod.fsx.model_copy(update={"enabled": False}), "gpu_pools": pools})


def _any_gpu(gpus: int):
    return load_job({**EXAMPLE, "resources": {"gpus": gpus, "interconnect": "any"}})


def test_a_pool_where_shared_checkpoints_could_not_resume_is_not_named_as_also_fitting():
    _, placed = team_job.render(_any_gpu(4), _prod_without_fsx_beside_one_gpu_nodes(first=False))
    assert (placed.pool.name, placed.pods) == ("h100", 1) and "l40s" not in placed.others


def test_a_job_one_node_of_a_later_pool_holds_goes_there_not_refused_for_an_earlier_pools_several_nodes():
    _, placed = team_job.render(_any_gpu(4), _prod_without_fsx_beside_one_gpu_nodes(first=True))
    assert (placed.pool.name, placed.pods, placed.gpus_per_pod) == ("h100", 1, 4)


def test_the_default_shared_checkpoints_refusal_says_it_is_the_default_and_names_the_missing_fsx_and_the_fixes():
    data = {k: v for k, v in EXAMPLE.items() if k != "checkpoints"}  # not written: shared, the default
    cfg = config_of("prod").model_copy(update={"fsx": config_of("prod").fsx.model_copy(update={"enabled": False})})
    with pytest.raises(ConfigError) as refused:
        team_job.render(load_job(data), cfg)
    message = refused.value.problems[0].message
    assert message.startswith("shared (the default) needs shared storage, and stack prod has no FSx")
    assert "write checkpoints: off" in message and "resources.gpus: 8" in message and "enable higgsfield:fsx" in message


def test_the_cli_renders_a_job_file_with_its_placement_on_top(capsys):
    from infra.cli.main import main

    assert main(["jobs", "render", "prod", "-f", str(ROOT / "examples" / "llama-ft.job.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# llama-ft (PyTorchJob) for stack prod")
    assert "# Placed on pool h100 (8 x H100 80 GiB, EFA): 2 node(s) x 8 GPUs" in out
    assert [d["kind"] for d in yaml.safe_load_all(out)] == ["ConfigMap", "PyTorchJob"]


def test_the_cli_refuses_a_job_file_in_one_line_naming_file_and_key(tmp_path, capsys):
    from infra.cli.main import main

    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({**EXAMPLE, "resources": {**EXAMPLE["resources"], "gpuType": "B100"}}))
    assert main(["jobs", "render", "prod", "-f", str(path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {path}: resources.gpuType: B100: no GPU pool of stack prod has it")


@pytest.mark.parametrize("framework", ["pytorch", "mpi", "tensorflow", "xgboost"])
@pytest.mark.parametrize("elastic", [False, True])
def test_the_job_uses_only_what_the_pinned_crds_and_webhooks_accept(framework, elastic):
    from tests.offline.test_workload_examples import CRD, ELASTIC_POLICY, RUN_POLICY, SCHEDULING_POLICY

    if elastic and framework != "pytorch":
        pytest.skip("only PyTorch jobs are elastic")
    _, objects, _ = _render(framework=framework, **({"elastic": {"minGpus": 8}} if elastic else {}))
    job = objects[-1]
    key, spec_fields, replica_types, container = CRD[job["kind"]]
    assert set(job["spec"]) <= spec_fields and set(job["spec"].get("elasticPolicy", {})) <= ELASTIC_POLICY
    assert set(job["spec"]["runPolicy"]) <= RUN_POLICY
    assert set(job["spec"]["runPolicy"]["schedulingPolicy"]) <= SCHEDULING_POLICY
    for replica, spec in job["spec"][key].items():
        assert replica in replica_types and set(spec) <= {"replicas", "restartPolicy", "template"}
        assert container is None or spec["template"]["spec"]["containers"][0]["name"] == container


def test_a_teams_pytorch_job_runs_the_gang_preflight_before_its_own_command():
    _, objects, _ = _render()
    for _, template in _templates(objects):
        command = template["spec"]["containers"][0]["command"]
        assert command[:3] == ["python", "/code/preflight.py", "--"] and command[-4:] == [
            "python",
            "train.py",
            "--epochs",
            "3",
        ]
        assert _env(template)["HIGGSFIELD_PREFLIGHT"] == "run" and _env(template)["PREFLIGHT_NCCL_NETWORK"] == "efa"
    assert set(jobs.PREFLIGHT_FILES) <= set(objects[0]["data"])  # shipped beside the launcher in /code


def test_a_teams_pytorch_job_publishes_its_ranks_progress_for_the_watchdog():
    _, objects, _ = _render()
    for _, template in _templates(objects):
        ports = template["spec"]["containers"][0]["ports"]
        assert {"name": "progress", "containerPort": jobs.PROGRESS_PORT, "protocol": "TCP"} in ports


def test_the_image_comment_names_the_installed_packages_sources_in_a_project_without_them(tmp_path, monkeypatch):
    """A project `init` made has no images/training: the rendered job said 'of this checkout'."""
    (tmp_path / "Pulumi.yaml").write_text("name: higgsfield\nruntime: python\n")
    monkeypatch.chdir(tmp_path)
    cfg = config_of("dev")
    said = jobs.image_comment(cfg, jobs.stack_image(cfg))
    assert "built from the installed package's images/training" in said and "checkout" not in said


@pytest.mark.parametrize("gpus", [16, 2], ids=["whole-nodes", "share-of-a-node"])
@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_each_container_of_a_rendered_job_requests_the_cpu_and_memory_its_pod_is_given(framework, gpus):
    """The operator sizes the gang its queue admits from its containers' requests: each names the CPU the team's
    LimitRange gives a container naming none (so the pods are scheduled as before), no CPU limit (it would throttle
    the ranks), and its memory limit (else the LimitRange's memory); the team policy admits the job."""
    cfg = config_of("prod")
    team = next(t for t in cfg.scheduler.teams if t.name == "llm")
    _, objects, _ = _render(framework=framework, **{"resources.gpus": gpus})
    for _, template in _templates(objects):
        for container in template["spec"]["containers"]:
            requests, limits = container["resources"]["requests"], container["resources"].get("limits", {})
            assert requests["cpu"] == f"{team.default_cpu_request_millicores}m" and "cpu" not in limits
            assert requests["memory"] == limits.get("memory", f"{team.default_memory_request_mib}Mi")
    assert denied_by(objects[-1], rules_of(team, cfg.scheduler.priority_classes, pools=cfg.gpu_pools)) == []


def test_a_job_file_deep_in_a_folder_is_named_whole_in_its_refusal(tmp_path, capsys):
    """The file is where the user looks, not a key: a path past a key's length limit is not cut."""
    from infra.cli.main import main

    path = tmp_path / ("nested-" * 20) / "job.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump({**EXAMPLE, "resources": {**EXAMPLE["resources"], "gpuType": "B100"}}))
    assert main(["jobs", "render", "prod", "-f", str(path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {path}: resources.gpuType: B100: no GPU pool of stack prod has it")


@pytest.mark.parametrize("job_class", ["training", "serving"])
def test_a_dataset_asked_of_a_stack_without_shared_storage_is_refused_naming_it(job_class):
    """dev has no FSx: the job rendered without the mount, and the job failed on the cluster reading /datasets/NAME."""
    serving = {"checkpoints": None, "port": 8000} if job_class == "serving" else {}
    message = _refused(
        "data[0].dataset",
        "dev",
        team=config_of("dev").scheduler.teams[0].name,
        data=[{"dataset": "imagenet"}],
        **{"class": job_class, "resources.gpuType": None, "resources.gpuMemoryGiB": None, "resources.gpus": 1},
        **{"resources.interconnect": None},
        **serving,
    )
    assert "imagenet" in message and "higgsfield:fsx" in message


@pytest.mark.parametrize("framework", ["pytorch", "mpi", "tensorflow"])
def test_a_job_file_skips_its_preflight_with_the_documented_switch(framework):
    """docs/concepts/training-jobs.md: HIGGSFIELD_PREFLIGHT=skip skips it for one job; a job file's env was refused
    (PyTorch) or silently replaced by run (MPI's launcher and workers)."""
    _, objects, _ = _render(framework=framework, env={"HIGGSFIELD_PREFLIGHT": "skip"})
    switches = {_env(t).get("HIGGSFIELD_PREFLIGHT") for _, t in _templates(objects)}
    assert switches == {"skip"}


def test_a_preflight_setting_of_the_platform_in_an_mpi_job_files_env_is_refused_not_replaced():
    message = _refused("env.PREFLIGHT_TIMEOUT_SECONDS", framework="mpi", env={"PREFLIGHT_TIMEOUT_SECONDS": "30"})
    assert "set by the platform" in message


def test_a_key_written_twice_in_a_job_file_is_refused_naming_it_not_silently_the_last(tmp_path, capsys):
    """YAML readers keep the last of two `gpus:` lines without a word: a job of 16 GPUs edited to 8 ran on 16."""
    from infra.cli.main import main

    path = tmp_path / "job.yaml"
    path.write_text(
        "name: llama-ft\nteam: llm\ncommand: [python, train.py]\nresources:\n  gpus: 8\n  gpuType: H100\n  gpus: 16\n"
    )
    assert main(["jobs", "render", "prod", "-f", str(path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"error: {path}: resources.gpus: is set twice (line 7, first at line 5); remove one"


@pytest.mark.parametrize("comment", ["", "  # at least"])
def test_a_driver_requirement_written_unquoted_is_told_to_be_quoted(tmp_path, capsys, comment):
    """`cudaDriver: >=570` without quotes is YAML's folded-text marker: the error named neither the key nor the fix."""
    from infra.cli.main import main

    path = tmp_path / "job.yaml"
    path.write_text(
        f"name: a\nteam: llm\ncommand: [python, t.py]\nresources:\n  gpus: 8\n  cudaDriver: >=570{comment}\n"
    )
    assert main(["jobs", "render", "prod", "-f", str(path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {path}: is not YAML (line 6)") and line.endswith('quote it: cudaDriver: ">=570"')


def test_a_yaml_mistake_without_a_quoting_fix_is_one_line_naming_its_line(tmp_path, capsys):
    from infra.cli.main import main

    path = tmp_path / "job.yaml"
    path.write_text("name: [a\nteam: llm\n")
    assert main(["jobs", "render", "prod", "-f", str(path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"error: {path}: is not YAML (line 2): expected ',' or ']', but got ':'"


def test_an_exact_driver_branch_the_ami_lacks_is_told_the_requirements_that_fit():
    """cudaDriver "570" on the 580 AMI was told 'ask for >=580 or less', which reads as an exact 580 or below."""
    message = _refused("resources.cudaDriver", **{"resources.cudaDriver": "570"})
    assert message.endswith('ask for ">=570" (that branch or newer) or "580" (exactly)')


@pytest.mark.parametrize(
    ("flag", "said"),
    [
        (["--image", "registry.example/x:1"], "--image is for examples; in a job file: image:"),
        (["--no-checkpoints"], "--no-checkpoints is for examples; in a job file: checkpoints: off"),
        (["--checkpoints"], "--checkpoints is for examples; in a job file: checkpoints: shared"),
        (["--workers", "2"], "--workers is for examples; in a job file: resources.gpus"),
        (["--team", "llm"], "--team is for examples; in a job file: team:"),
        (["--pool", "h100"], "--pool is for examples; in a job file: resources.gpuType"),
    ],
)
def test_an_example_flag_with_a_job_file_names_the_job_file_key_that_does_it(flag, said, capsys):
    """`--image is for examples; a job file says what it needs` named no key, yet a job file has image."""
    from infra.cli.main import main

    assert main(["jobs", "render", "prod", "-f", str(ROOT / "examples" / "llama-ft.job.yaml"), *flag]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {said}")


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"\xff\xfe\x00\x00name: a\n", "is not UTF-8 text"),
        (b"name: \x01\n", "is not YAML: unacceptable character #x0001"),
    ],
    ids=["utf-16", "control-character"],
)
def test_a_job_file_that_is_not_text_yaml_reads_is_one_line_not_an_internal_error(tmp_path, capsys, content, said):
    from infra.cli.main import main

    path = tmp_path / "job.yaml"
    path.write_bytes(content)
    assert main(["jobs", "render", "prod", "-f", str(path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {path}: {said}")


def test_standard_input_that_is_not_utf8_is_refused_as_a_file_is(monkeypatch, capsys):
    """Outside a UTF-8 locale Python decodes standard input with surrogateescape: a bad byte became `#xdcff` in
    YAML's words, not what the file's refusal says."""
    import io

    from infra.cli.main import main

    stdin = io.TextIOWrapper(io.BytesIO(b"name: a\xff\n"), encoding="utf-8", errors="surrogateescape")
    monkeypatch.setattr("sys.stdin", stdin)
    assert main(["jobs", "render", "prod", "-f", "-"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == "error: <stdin>: is not UTF-8 text, so not a job file (save it as UTF-8)"


def test_a_job_whose_env_renders_a_job_too_large_for_etcd_is_refused_naming_env(tmp_path):
    """Each pod template holds the job's env: 200 values of 4,000 characters (0.8 MB of job file, under its own limit)
    make a PyTorchJob of about 1.6 MiB, which etcd would not store and the API server would refuse at submission."""
    data = copy.deepcopy(EXAMPLE) | {"env": {f"V{i}": "x" * 4000 for i in range(200)}}
    path = tmp_path / "big.job.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as refused:
        team_job.render_file(str(path), config_of("prod"))
    assert refused.value.key == f"{path}: env" and "etcd" in refused.value.problems[0].message
