"""Run a pool's rendered health check on the GPU machine this runs on, as the pod would run it.

    higgsfield healthcheck render prod h200-block > hc.yaml        # where the project is installed
    sudo python3 tests/gpu/node_check_here.py hc.yaml EXPECTED_GPUS=1 EXPECTED_EFA_DEVICES=0

It takes the code from the rendered ConfigMap (not the checkout), writes it to the ConfigMap's mount
path, makes the shared-volume mount path owned by the pod's fsGroup, and runs the Job's command and
then the PyTorchJob's command (torchrun, one process per local GPU) with the containers' env, under
the pods' runAsUser/runAsGroup with no supplementary groups and no passwd entry, as the kubelet does.
KEY=VALUE arguments override the env for this machine (its GPU count, no EFA). Env taken from the
downward API (NODE_NAME) is set to this host's name. Standard library, PyYAML and PyTorch only: it
runs on a bare GPU box with no Kubernetes. Prints each command's output and exit code; exits 0 when
both commands ran to a verdict (healthy or not), so the verdicts can be read, not assumed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import yaml


def _pod(doc: dict) -> dict:
    if doc["kind"] == "Job":
        return doc["spec"]["template"]["spec"]
    return doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]


def _env(container: dict, overrides: dict[str, str]) -> dict[str, str]:
    env = {"PATH": os.environ["PATH"], "HOME": "/"}  # the kubelet's HOME for a UID without a passwd entry
    for item in container.get("env", []):
        env[item["name"]] = item["value"] if "value" in item else socket.gethostname()
    return {**env, **overrides}


def _as_pod_user(security: dict):
    def switch() -> None:
        os.setgroups([])
        os.setgid(security["runAsGroup"])
        os.setuid(security["runAsUser"])

    return switch


def _mounts(pod: dict, container: dict, code: str) -> None:
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in container["volumeMounts"]:
        path = Path(mount["mountPath"])
        path.mkdir(parents=True, exist_ok=True)
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            (path / "node_check.py").write_text(code)
        else:  # the shared volume and /dev/shm: writable by the pod's fsGroup, as the kubelet makes them
            os.chown(path, 0, pod["securityContext"]["fsGroup"])
            path.chmod(0o2775 if "persistentVolumeClaim" in volume else 0o1777)


def main(argv: list[str]) -> int:
    docs = [d for d in yaml.safe_load_all(Path(argv[0]).read_text()) if d]
    overrides = dict(arg.split("=", 1) for arg in argv[1:])
    code = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["node_check.py"]
    gpus = int(overrides.get("EXPECTED_GPUS", "1"))
    for doc in (d for d in docs if d["kind"] in ("Job", "PyTorchJob")):
        pod = _pod(doc)
        container = pod["containers"][0]
        _mounts(pod, container, code)
        program, *args = container["command"]
        if program == "torchrun":  # the operator passes nprocPerNode; here, one process per GPU of this machine
            command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={gpus}", "--standalone", *args]
        else:
            command = [sys.executable if program.startswith("python") else shutil.which(program) or program, *args]
        user = pod["securityContext"]["runAsUser"]
        print(f"### {doc['kind']} {doc['metadata']['name']}: {' '.join(command)} as {user}", flush=True)
        done = subprocess.run(
            command, env=_env(container, overrides), preexec_fn=_as_pod_user(pod["securityContext"]), cwd="/"
        )
        print(f"### exit {done.returncode}", flush=True)
        if done.returncode not in (0, 1):  # 1 is an unhealthy verdict; anything else is a crash
            return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
