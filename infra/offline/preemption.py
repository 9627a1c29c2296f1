"""The proof `higgsfield check` makes: nothing can preempt a training gang's minimum.

Read from what a stack renders - the Volcano scheduler configuration (actions, tiers, plugins and
their arguments), the Queues and the PriorityClasses - against what Volcano v1.15.1 does with them
(every rule below names the upstream code, volcano-sh/volcano@v1.15.1 unless said otherwise):

1. Only pods whose preemptionPolicy is not Never can evict in Volcano: `preempt` skips such a
   preemptor (pkg/scheduler/actions/preempt/preempt.go taskEligibleToPreempt), `reclaim` too
   (actions/reclaim/reclaim.go Execute). A pod's policy is its PriorityClass's; a pod naming none
   gets the globalDefault class's, else PreemptLowerPriority (kubernetes/kubernetes:plugin/pkg/
   admission/priority/admission.go admitPod). So: every class with PreemptLowerPriority is a serving
   class, and a globalDefault class with Never exists (the Training Operator names no class on its
   pods: components/training.py priority_classes cites the code).
2. Actions that evict: `preempt` (within the preemptor's queue: preempt.go Execute), `reclaim`
   (across queues, from queues whose spec.reclaimable is unset or true: reclaim.go reclaimForTask,
   api/queue_info.go Reclaimable), `gangpreempt` and `gangreclaim` (whole-gang eviction, where gang's
   UnifiedEvictableFn permits every candidate: plugins/gang/gang.go), `shuffle` (evicts what the
   plugins' victim functions pick: actions/shuffle/shuffle.go). Only `preempt` is allowed, and only
   with rule 3; the others, and a reclaimable queue, fail the proof.
3. `preempt`'s victims are those of the first tier whose plugins decide (framework/
   session_plugins.go Preemptable): a plugin whose preemptable function is enabled (enablePreemptable,
   default true: plugins/defaults.go ApplyPluginConfDefaults) returns candidates; an empty answer
   ends the tier with no victims and passes the decision to the next tier; answers are intersected,
   but an empty intersection leaves the list nil and the next plugin's answer starts it again. The
   gang plugin offers only pods of a job whose ready pods exceed its minAvailable (gang.go
   preemptableFn, api/job_info.go ReadyTaskNum). So victims stay within what gang offers only if
   gang is preemptable, every other preemptable plugin is in gang's tier, and gang is the last of
   them there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from infra.core import versions
from infra.core.names import WORKLOAD_LABEL

# Actions Volcano v1.15.1 registers (pkg/scheduler/actions/factory.go).
ACTIONS = ("enqueue", "allocate", "backfill", "preempt", "reclaim", "gangpreempt", "gangreclaim", "shuffle")
EVICTING = {
    "reclaim": "evicts across queues for a starving job of another queue (actions/reclaim/reclaim.go)",
    "gangpreempt": "evicts whole gangs; gang permits every candidate there "
    "(plugins/gang/gang.go AddUnifiedEvictableFn)",
    "gangreclaim": "evicts whole gangs across queues; gang permits every candidate there (plugins/gang/gang.go "
    "AddUnifiedEvictableFn)",
    "shuffle": "evicts what the plugins' victim functions pick (actions/shuffle/shuffle.go)",
}
# Plugins Volcano v1.15.1 registers (pkg/scheduler/plugins/factory.go), and those of them that
# register a preemptable function (AddPreemptableFn in plugins/*/*.go).
PLUGINS = (
    "drf",
    "gang",
    "deviceshare",
    "predicates",
    "priority",
    "nodeorder",
    "conformance",
    "binpack",
    "resource-strategy-fit",
    "tdm",
    "overcommit",
    "sla",
    "task-topology",
    "numa-aware",
    "cdp",
    "rescheduling",
    "usage",
    "pdb",
    "nodegroup",
    "network-topology-aware",
    "proportion",
    "capacity",
    "extender",
    "resourcequota",
)
PREEMPTABLE_PLUGINS = ("priority", "gang", "conformance", "drf", "extender", "pdb", "tdm", "cdp")


@dataclass(frozen=True)
class Hole:
    """A setting through which something could preempt a training gang's minimum."""

    setting: str
    message: str


def _enabled(plugin: Mapping[str, Any], key: str) -> bool:
    """Volcano defaults every enable* flag to true (plugins/defaults.go setDefaultIfNil)."""
    value = plugin.get(key, True)
    return value is True or (isinstance(value, str) and value.lower() == "true")


def scheduler_holes(config: Mapping[str, Any]) -> list[Hole]:
    """Rules 2 and 3 over a Volcano scheduler configuration (the chart's scheduler_config_override)."""
    holes: list[Hole] = []
    actions = [a.strip() for a in str(config.get("actions", "")).split(",") if a.strip()]
    for action in actions:
        if action not in ACTIONS:
            holes.append(
                Hole(
                    f"actions: {action}",
                    f"not an action of Volcano v{versions.VOLCANO.version}"
                    f" ({', '.join(ACTIONS)}): what it evicts is not known",
                )
            )
        elif action in EVICTING:
            holes.append(
                Hole(f"actions: {action}", f"{EVICTING[action]}: it would not be limited to what a gang can spare")
            )
    tiers = [list(t.get("plugins") or []) for t in config.get("tiers") or []]
    for t, plugins in enumerate(tiers):
        for p, plugin in enumerate(plugins):
            if plugin.get("name") not in PLUGINS:
                holes.append(
                    Hole(
                        f"tiers[{t}].plugins[{p}]: {plugin.get('name')}",
                        f"not a plugin of Volcano v{versions.VOLCANO.version}: whether it picks victims is not known",
                    )
                )
    if "preempt" not in actions:
        return holes
    deciding = [
        (t, p, plugin["name"])
        for t, plugins in enumerate(tiers)
        for p, plugin in enumerate(plugins)
        if plugin.get("name") in PREEMPTABLE_PLUGINS and _enabled(plugin, "enablePreemptable")
    ]
    gangs = [(t, p) for t, p, name in deciding if name == "gang"]
    if not gangs:
        where = next(
            (
                (t, p)
                for t, plugins in enumerate(tiers)
                for p, plugin in enumerate(plugins)
                if plugin.get("name") == "gang"
            ),
            None,
        )
        setting = f"tiers[{where[0]}].plugins[{where[1]}].enablePreemptable" if where else "tiers: gang"
        holes.append(
            Hole(
                setting,
                "with `preempt`, the gang plugin must be preemptable: it alone keeps victims to pods above a job's "
                "minAvailable (gang.go preemptableFn)",
            )
        )
        return holes
    gang_tier, gang_at = gangs[0]
    for t, p, name in deciding:
        if name == "gang":
            continue
        if t != gang_tier:
            holes.append(
                Hole(
                    f"tiers[{t}].plugins[{p}].enablePreemptable",
                    f"{name} picks victims in tier {t}, where gang (tier {gang_tier}) has no say "
                    "(session_plugins.go Preemptable: the first tier with an answer decides; an empty one passes to "
                    "the next): set enablePreemptable: false",
                )
            )
        elif p > gang_at:
            holes.append(
                Hole(
                    f"tiers[{t}].plugins[{p}]",
                    f"{name} comes after gang in its tier: after an empty intersection its answer would start the "
                    "victims again "
                    "(session_plugins.go Preemptable); put gang last",
                )
            )
    return holes


def queue_holes(queues: Sequence[Mapping[str, Any]]) -> list[Hole]:
    """Rule 2: a queue whose spec.reclaimable is unset or true gives its pods to `reclaim`."""
    return [
        Hole(
            f"Queue {q['metadata']['name']}: spec.reclaimable",
            "must be false: a reclaimable queue's pods are evicted for other queues once `reclaim` runs "
            "(api/queue_info.go Reclaimable: unset is true)",
        )
        for q in queues
        if (q.get("spec") or {}).get("reclaimable", True) is not False
    ]


def priority_class_holes(classes: Sequence[Mapping[str, Any]]) -> list[Hole]:
    """Rule 1: only serving classes preempt, and pods that name no class get one that never does."""
    holes = []
    for cls in classes:
        name = cls["metadata"]["name"]
        workload = (cls["metadata"].get("labels") or {}).get(WORKLOAD_LABEL, "training")
        if cls.get("preemptionPolicy", "PreemptLowerPriority") != "Never" and workload != "serving":
            holes.append(
                Hole(
                    f"PriorityClass {name}: preemptionPolicy",
                    f"a {workload} class must be Never: its pods would preempt (preempt.go taskEligibleToPreempt)",
                )
            )
    defaults = [c for c in classes if c.get("globalDefault")]
    if not defaults:
        holes.append(
            Hole(
                "PriorityClass: globalDefault",
                "no default class: a pod naming no class (every Training Operator pod) gets preemptionPolicy "
                "PreemptLowerPriority and could preempt",
            )
        )
    elif min(defaults, key=lambda c: c["value"]).get("preemptionPolicy", "PreemptLowerPriority") != "Never":
        holes.append(
            Hole(
                f"PriorityClass {min(defaults, key=lambda c: c['value'])['metadata']['name']}: preemptionPolicy",
                "the default class must be Never: pods naming no class get it",
            )
        )
    return holes


def holes(
    scheduler_config: Mapping[str, Any], queues: Sequence[Mapping[str, Any]], classes: Sequence[Mapping[str, Any]]
) -> list[Hole]:
    """Every setting through which a training gang's minimum could be preempted; none: the proof holds."""
    return scheduler_holes(scheduler_config) + queue_holes(queues) + priority_class_holes(classes)


def holes_in_plan(plan: Any) -> list[Hole]:
    """The proof over a recorded plan: the Volcano release's scheduler configuration, the Queues
    and PriorityClasses the program creates."""
    (release,) = [r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.inputs.get("chart") == "volcano"]
    config = yaml.safe_load(release.inputs["values"]["custom"]["scheduler_config_override"])
    # Volcano's own `default` queue is a Server-Side Apply patch (QueuePatch), the others objects
    queues = [
        r.inputs for t in ("Queue", "QueuePatch") for r in plan.of_type(f"kubernetes:scheduling.volcano.sh/v1beta1:{t}")
    ]
    classes = [r.inputs for r in plan.of_type("kubernetes:scheduling.k8s.io/v1:PriorityClass")]
    return holes(config, queues, classes)
