"""The namespace -> queue annotation works at the pinned Volcano: its PodGroup mutating admission is on.

A team namespace carries `scheduling.volcano.sh/queue-name: <team queue>` (components/tenancy.py
namespace()); the README promises that a PodGroup created without a queue lands in the team's
queue. Only Volcano's `/podgroups/mutate` admission does that (createPodGroupPatch: a PodGroup in
queue `default` gets the namespace annotation's queue, volcano-sh/volcano:pkg/webhooks/admission/
podgroups/mutate/mutate_podgroup.go@v1.15.1:104-125), and the 1.15.1 chart leaves it out of
`custom.enabled_admissions` (installer/helm/chart/volcano/values.yaml@v1.15.1:58).
"""

from __future__ import annotations

from components.tenancy import QUEUE_ANNOTATION
from components.training import VOLCANO_ADMISSIONS, VOLCANO_CHART_ADMISSIONS
from infra.offline.evaluate import Plan

RELEASE = "kubernetes:helm.sh/v3:Release"
# values.yaml@v1.15.1:58, the chart's default list (read there; the path we add is not in it).
CHART_DEFAULT = (
    "/jobs/mutate,/jobs/validate,/podgroups/validate,/queues/mutate,/queues/validate,"
    "/hypernodes/validate,/cronjobs/validate"
)


def _volcano(plan: Plan) -> dict:
    (release,) = [r for r in plan.of_type(RELEASE) if r.inputs["chart"] == "volcano"]
    return release.inputs["values"]


def test_volcano_enables_the_podgroup_mutating_admission_the_namespace_annotation_needs(plan):
    enabled = _volcano(plan)["custom"]["enabled_admissions"].split(",")
    # templates/webhooks.yaml@v1.15.1:99 renders the MutatingWebhookConfiguration only on regexMatch
    # "/podgroups/mutate".
    assert "/podgroups/mutate" in enabled


def test_volcano_keeps_every_admission_the_chart_enables_by_default(plan):
    # enabled_admissions replaces the chart's list; dropping one would switch off its webhook
    # (job and queue validation) and the admission service's --enabled-admission (templates/admission.yaml:138).
    enabled = _volcano(plan)["custom"]["enabled_admissions"].split(",")
    assert tuple(CHART_DEFAULT.split(",")) == VOLCANO_CHART_ADMISSIONS
    assert set(VOLCANO_CHART_ADMISSIONS) <= set(enabled)
    assert tuple(enabled) == VOLCANO_ADMISSIONS and set(enabled) - set(VOLCANO_CHART_ADMISSIONS) == {
        "/podgroups/mutate"
    }


def test_volcano_admission_is_on(plan):
    # custom.admission_enable (values.yaml@v1.15.1:26, default true) gates the admission Deployment.
    assert _volcano(plan)["custom"].get("admission_enable", True) is True


def test_every_team_namespace_names_its_queue_in_the_annotation_the_webhook_reads(plan):
    # schedulingv1beta1.QueueNameAnnotationKey = GroupName + "/queue-name", GroupName scheduling.volcano.sh
    # (staging/src/volcano.sh/apis/pkg/apis/scheduling/v1beta1/labels.go@v1.15.1:48).
    assert QUEUE_ANNOTATION == "scheduling.volcano.sh/queue-name"
    namespaces = {r.inputs["metadata"]["name"]: r.inputs for r in plan.of_type("kubernetes:core/v1:Namespace")}
    for team in plan.config.scheduler.teams:
        assert namespaces[team.name]["metadata"]["annotations"][QUEUE_ANNOTATION] == team.queue


def test_team_namespaces_are_not_excluded_from_the_webhook(plan):
    # The webhook skips the release namespace and kube-system, plus custom.webhooks_namespace_selector_expressions
    # (templates/webhooks.yaml@v1.15.1:121-130): no team may live there, and we add no exclusions.
    assert not _volcano(plan)["custom"].get("webhooks_namespace_selector_expressions")
    assert not {t.name for t in plan.config.scheduler.teams} & {"volcano-system", "kube-system"}
