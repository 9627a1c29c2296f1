"""Lustre per-team data that no other UID reads, root squash on every node, and the FSx CSI node
plugin's node rights narrowed.

The file system squashes root on every client to 65534:65534; the one client exempted is the
layout client, at an address held by an explicit subnet CIDR reservation. The attacks: another
team's UID, and root on a node, reading a team's directory. They are refused by the mode bits the
layout script sets and by root squash, evaluated with POSIX permission rules on the layout the
script produces (a small interpreter of its mkdir/chown/chmod lines)."""

from __future__ import annotations

import copy
import ipaddress
import re
import shlex
from dataclasses import dataclass

import pytest

from components import storage
from tests.conftest import STACKS, config_of, plan_of
from tests.node_admission import node_update_denials

FS = "aws:fsx/lustreFileSystem:LustreFileSystem"
WITH_FSX = [s for s in STACKS if config_of(s).fsx.enabled]
# botocore/data/fsx/2018-03-01/service-2.json@0e6e2404b shapes LustreRootSquash, LustreNoSquashNid
ROOT_SQUASH_PATTERN = r"^([0-9]{1,10}):([0-9]{1,10})$"
NID_PATTERN = r"^([0-9\[\]\-]*\.){3}([0-9\[\]\-]*)@tcp$"


@pytest.fixture(params=WITH_FSX)
def fsx_plan(request):
    return plan_of(request.param)


# --- root squash and its one exemption --------------------------------------------------------


def test_root_is_squashed_to_nobody_on_every_client_but_the_layout_client(fsx_plan):
    (fs,) = fsx_plan.of_type(FS)
    squash = fs.inputs["rootSquashConfiguration"]
    assert squash["rootSquash"] == "65534:65534" and re.fullmatch(ROOT_SQUASH_PATTERN, squash["rootSquash"])
    (instance,) = fsx_plan.of_type("aws:ec2/instance:Instance")
    assert squash["noSquashNids"] == [f"{instance.inputs['privateIp']}@tcp"]
    assert all(re.fullmatch(NID_PATTERN, nid) for nid in squash["noSquashNids"])


def test_the_exempt_address_is_reserved_so_no_node_or_pod_can_hold_it(fsx_plan):
    (instance,) = fsx_plan.of_type("aws:ec2/instance:Instance")
    (reservation,) = fsx_plan.of_type("aws:ec2/subnetCidrReservation:SubnetCidrReservation")
    assert reservation.inputs["reservationType"] == "explicit"
    assert reservation.inputs["cidrBlock"] == f"{instance.inputs['privateIp']}/32"
    assert reservation.urn in instance.dependencies
    (fs,) = fsx_plan.of_type(FS)
    subnets = {s.urn: s for s in fsx_plan.of_type("aws:ec2/subnet:Subnet")}
    (fs_subnet,) = [u for u in fs.dependencies if u in subnets]
    assert fs_subnet in reservation.dependencies and fs_subnet in instance.dependencies
    assert ipaddress.ip_address(instance.inputs["privateIp"]) in ipaddress.ip_network(
        subnets[fs_subnet].inputs["cidrBlock"]
    )


def test_the_reservation_does_not_wait_for_the_cluster(fsx_plan):
    """Reserved before any node asks its subnet for addresses."""
    (reservation,) = fsx_plan.of_type("aws:ec2/subnetCidrReservation:SubnetCidrReservation")
    seen, todo = set(), list(reservation.dependencies)
    while todo:
        urn = todo.pop()
        if urn not in seen:
            seen.add(urn)
            todo.extend(fsx_plan.by_urn(urn).dependencies)
    assert not any(fsx_plan.by_urn(u).type in ("eks:index:Cluster", "aws:eks/nodeGroup:NodeGroup") for u in seen)


def test_layout_client_has_no_aws_identity_imdsv2_only_and_stops_when_done(fsx_plan):
    (instance,) = fsx_plan.of_type("aws:ec2/instance:Instance")
    (template,) = [
        t for t in fsx_plan.of_type("aws:ec2/launchTemplate:LaunchTemplate") if t.urn in instance.dependencies
    ]
    assert "iamInstanceProfile" not in instance.inputs and "iamInstanceProfile" not in template.inputs
    assert template.inputs["metadataOptions"]["httpTokens"] == "required"
    assert template.inputs["blockDeviceMappings"][0]["ebs"]["encrypted"] == "true"
    assert template.inputs["imageId"].startswith("resolve:ssm:/aws/service/ami-amazon-linux-latest/al2023-")
    assert instance.inputs["instanceInitiatedShutdownBehavior"] == "stop"


def test_layout_user_data_mounts_lays_out_and_powers_off():
    data = storage.layout_user_data(
        storage.layout_script({"llm": 20002}, []), "fs-0abc.fsx.us-east-2.amazonaws.com", "abcdefgh"
    )
    lines = data.splitlines()
    assert lines[0] == "#!/bin/bash" and "dnf install -y lustre-client" in lines
    assert "mount -t lustre -o relatime,flock fs-0abc.fsx.us-east-2.amazonaws.com@tcp:/abcdefgh /fsx" in lines
    assert lines.index("umount /fsx") > next(i for i, text in enumerate(lines) if text.startswith("sh -c "))
    assert "trap 'shutdown -h now' EXIT" in lines[:3]  # it stops even when a step fails
    assert lines[-1].startswith("echo higgsfield-lustre-layout-done ")


def test_a_new_layout_client_replaces_the_old_one_first(fsx_plan):
    """Both would hold the one reserved address (InvalidIPAddress.InUse otherwise)."""
    (instance,) = fsx_plan.of_type("aws:ec2/instance:Instance")
    assert instance.delete_before_replace and instance.inputs["userDataReplaceOnChange"] is True


def test_kubelet_never_chowns_a_lustre_volume_as_root(fsx_plan):
    """Root squash would refuse it: the driver's fsGroupPolicy ReadWriteOnceWithFSType
    (charts/aws-fsx-csi-driver/values.yaml@v1.8.0) applies fsGroup only to RWO volumes with an fsType."""
    for volume in fsx_plan.of_type("kubernetes:core/v1:PersistentVolume"):
        spec = volume.inputs["spec"]
        if spec["csi"]["driver"] == storage.CSI_DRIVER:
            assert "ReadWriteOnce" not in spec["accessModes"] and "fsType" not in spec["csi"], volume.name


# --- who can read what: POSIX permissions on the layout the script makes ----------------------


@dataclass(frozen=True)
class Inode:
    uid: int
    gid: int
    mode: int


def laid_out(script: str) -> dict[str, Inode]:
    """What the layout script leaves on a fresh file system (root-owned 0755 directories by
    mkdir, then its chown/chmod), for the commands it uses."""
    tree: dict[str, Inode] = {"/fsx": Inode(0, 0, 0o755)}
    for line in script.splitlines():
        for command in line.split(" && "):
            argv = shlex.split(command)
            if not argv or argv[0] == "set":
                continue
            verb, args = argv[0], [a for a in argv[1:] if not a.startswith("-")]
            if verb == "mkdir":
                for path in args:
                    tree.setdefault(path, Inode(0, 0, 0o755))
            elif verb == "chown":
                owner, *paths = args
                uid, gid = (int(x) for x in owner.split(":"))
                for path in paths:
                    tree[path] = Inode(uid, gid, tree[path].mode)
            elif verb == "chmod":
                mode, *paths = args
                for path in paths:
                    tree[path] = Inode(tree[path].uid, tree[path].gid, int(mode, 8) & 0o777)
            else:
                raise AssertionError(f"the layout script uses {verb!r}: teach laid_out() what it does")
    return tree


def may(tree: dict[str, Inode], path: str, want: str, uid: int, gids: tuple[int, ...], squash: bool = True) -> bool:
    """POSIX access (r, w or x on `path`, with x on every parent) for a client's uid/gids, as the
    Lustre server checks it after root squash maps uid 0 to 65534:65534."""
    if squash and uid == 0:
        uid, gids = storage.NOBODY, (storage.NOBODY,)
    parts = path.strip("/").split("/")
    chain = ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    for i, p in enumerate(chain):
        node = tree[p]
        bits = {"r": 4, "w": 2, "x": 1}[want] if i == len(chain) - 1 else 1
        if uid == 0:
            continue  # unsquashed root passes every permission check on directories
        shift = 6 if uid == node.uid else (3 if node.gid in gids else 0)
        if not (node.mode >> shift) & bits:
            return False
    return True


def _tree(plan):
    cfg = plan.config
    uids = {t.name: t.uid for t in cfg.scheduler.teams}
    return laid_out(storage.layout_script(uids, [(d.name, uids[d.owner]) for d in cfg.fsx.datasets])), uids


def test_a_team_reads_and_writes_its_own_directory(fsx_plan):
    tree, uids = _tree(fsx_plan)
    for team, uid in uids.items():
        for want in "rwx":
            assert may(tree, f"/fsx/teams/{team}", want, uid, (uid,)), (team, want)


def test_another_teams_uid_cannot_read_or_list_a_teams_directory_even_from_a_node(fsx_plan):
    """A node-level client (root on a node, or a process there running as team B) presents team
    B's UID and GIDs: mode 2770 with the team's own GID leaves it nothing."""
    tree, uids = _tree(fsx_plan)
    for team in uids:
        for other, other_uid in uids.items():
            if other != team:
                for want in "rwx":
                    assert not may(tree, f"/fsx/teams/{team}", want, other_uid, (other_uid,)), (other, team, want)


def test_root_on_a_node_is_nobody_and_reads_no_team_directory(fsx_plan):
    tree, uids = _tree(fsx_plan)
    for team in uids:
        assert not may(tree, f"/fsx/teams/{team}", "r", 0, (0,))
        assert not may(tree, f"/fsx/teams/{team}", "x", 0, (0,))
    assert not may(tree, "/fsx/teams", "r", 0, (0,))  # team names are not listed either (0711)


def test_without_root_squash_root_on_a_node_would_read_every_team(fsx_plan):
    """The mechanism the previous test names: turn squash off and root reads everything."""
    tree, uids = _tree(fsx_plan)
    assert all(may(tree, f"/fsx/teams/{team}", "r", 0, (0,), squash=False) for team in uids)


def test_the_health_gate_squashed_to_nobody_still_writes_its_scratch_directory(fsx_plan):
    tree, uids = _tree(fsx_plan)
    assert may(tree, storage.MOUNT_PATH + storage.HEALTH_DIR, "w", 0, (0,))
    assert not any(may(tree, storage.MOUNT_PATH + storage.HEALTH_DIR, "r", uid, (uid,)) for uid in uids.values())


def test_datasets_are_readable_by_every_uid_and_writable_by_their_owner_only():
    """The documented exception: a shared dataset (2755) is readable by any UID on any client, and
    writable by its owner's UID alone; its checkpoints directory by nobody else at all, whatever groups a
    reader's image gives its UID (tests/security/test_r15_attack.py)."""
    tree = laid_out(storage.layout_script({"llm": 20002, "vision": 20003}, [("corpus", 20002)]))
    assert may(tree, "/fsx/datasets/corpus", "w", 20002, (20002,))
    assert may(tree, "/fsx/datasets/corpus", "r", 20003, (20003,)) and not may(
        tree, "/fsx/datasets/corpus", "w", 20003, (20003,)
    )


# --- the FSx CSI node plugin patches only its own node's startup taint ---------------------------


def _node(taints=None) -> dict:
    return {
        "metadata": {"name": "ip-10-40-1-5.ec2.internal", "labels": {"higgsfield.io/pool": "h100"}},
        "spec": {
            "taints": taints
            if taints is not None
            else [
                {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
                {"key": storage.CSI_NOT_READY_TAINT, "effect": "NoExecute"},
            ]
        },
    }


def csi_denied(
    old: dict, new: dict, node_of_token: str | None = "ip-10-40-1-5.ec2.internal", user: str = storage.CSI_NODE_USER
) -> list[str]:
    return node_update_denials(storage.csi_node_policy(), old, new, user, storage.NODE_NAME_EXTRA, node_of_token)


def _ready(node: dict) -> dict:
    new = copy.deepcopy(node)
    new["spec"]["taints"] = [t for t in new["spec"]["taints"] if t["key"] != storage.CSI_NOT_READY_TAINT]
    return new


def test_csi_node_plugin_may_remove_its_startup_taint_from_its_own_node():
    """What removeNotReadyTaint does (pkg/driver/node.go@v1.8.0)."""
    assert csi_denied(_node(), _ready(_node())) == []


def test_csi_node_plugin_may_not_patch_another_node():
    assert csi_denied(_node(), _ready(_node()), node_of_token="ip-10-40-9-9.ec2.internal") == [
        "the FSx CSI node plugin may change only the node its pod runs on"
    ]


@pytest.mark.parametrize("attack", ["remove the GPU taint", "add a taint", "relabel", "cordon"])
def test_csi_node_plugin_may_not_change_anything_else_on_its_node(attack):
    old, new = _node(), _ready(_node())
    if attack == "remove the GPU taint":
        new["spec"]["taints"] = []
    elif attack == "add a taint":
        new["spec"]["taints"].append({"key": "example.com/evict", "effect": "NoExecute"})
    elif attack == "relabel":
        new["metadata"]["labels"]["higgsfield.io/pool"] = "b200"
    else:
        new["spec"]["unschedulable"] = True
    assert csi_denied(old, new)


def test_csi_node_policy_applies_to_the_csi_node_account_only():
    new = _node(taints=[])
    assert csi_denied(_node(), new, user="system:node:ip-10-40-1-5.ec2.internal") == []


def test_csi_node_policy_and_binding_are_in_the_plan_before_the_add_on(fsx_plan):
    policies = {
        p.inputs["metadata"]["name"]: p
        for p in fsx_plan.of_type("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy")
    }
    (binding,) = [
        b
        for b in fsx_plan.of_type("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding")
        if b.inputs["spec"]["policyName"] == "higgsfield-fsx-csi-node-own-node"
    ]
    assert "higgsfield-fsx-csi-node-own-node" in policies and binding.inputs["spec"]["validationActions"] == ["Deny"]
    (addon,) = [a for a in fsx_plan.of_type("aws:eks/addon:Addon") if a.inputs["addonName"] == "aws-fsx-csi-driver"]
    assert binding.urn in addon.dependencies
