"""`higgsfield verify` aws.squash-history: the deploy role may call fsx:UpdateFileSystem with any root squash (`pulumi
up` does; no IAM key reads its parameters), so it may exempt an address of its own, be root on every team's directory
from there and put the plan's exemption back before verify runs, where aws.layout-client sees only the present. The
check reads CloudTrail's event history instead. The account is moto's prod account with the stack's file system in
the cluster's VPC, FSx answered by a Stubber as in tests/cli/test_verify_layout_client.py, CloudTrail by a Stubber with
LookupEvents' wire shapes (boto/botocore:botocore/data/cloudtrail/2013-11-01/service-2.json@1.44.18: Events[] with
CloudTrailEvent a JSON string, newest first). The event record's requestParameters are FSx's request with lowercase
first letters, as AWS's FSx CloudTrail page shows TagResource's (`resourceARN`): assumed below the top level."""

from __future__ import annotations

import datetime
import json

import pytest

from infra.cli.verify import checks
from tests.aws_errors import add_wire_error
from tests.cli.test_verify_checks import NOW, REGION, _moto_cluster, _stubbed, aws, aws_ctx, one, plan  # noqa: F401 (fixtures)
from tests.cli.test_verify_layout_client import ACCOUNT, FILE_SYSTEM, _file_system, _planned

DEPLOY = f"arn:aws:sts::{ACCOUNT}:assumed-role/higgsfield-prod-deploy/GitHubActions"
ADMIN = f"arn:aws:sts::{ACCOUNT}:assumed-role/Admin/alice"
ATTACKER_NID = "10.40.50.7@tcp"
SINCE = NOW - datetime.timedelta(days=checks.EVENT_HISTORY_DAYS)


def _planned_squash(plan) -> dict:  # noqa: F811
    return _planned(plan)[1].inputs["rootSquashConfiguration"]


def _event(
    name: str,
    when: datetime.datetime,
    *,
    squash: dict | None = None,
    fs: str = FILE_SYSTEM,
    who: str = DEPLOY,
    event_id: str = "",
    error: str = "",
    source: str = checks.FSX_EVENT_SOURCE,
    record: dict | str | None = None,
    resources: tuple[str, ...] = (),
) -> dict:
    """One of LookupEvents' Events: an FSx call as CloudTrail records it (`record` replaces the recorded event: a
    string is sent as it is). An update names the file system in its request; a create in its response (the ID FSx
    assigns), none when it was refused."""
    request: dict = {"clientRequestToken": "3f1a"}
    if name == "UpdateFileSystem":
        request["fileSystemId"] = fs
    if squash is not None:
        request["lustreConfiguration"] = {"rootSquashConfiguration": squash}
    made = name != "UpdateFileSystem" and not error
    event_id = event_id or f"{name}-{when:%H%M}"
    recorded = {
        "eventVersion": "1.09",
        "userIdentity": {"type": "AssumedRole", "arn": who, "accountId": ACCOUNT},
        "eventTime": f"{when:%Y-%m-%dT%H:%M:%SZ}",
        "eventSource": source,
        "eventName": name,
        "awsRegion": REGION,
        "requestParameters": request,
        "responseElements": {"fileSystem": {"fileSystemId": fs, "fileSystemType": "LUSTRE"}} if made else None,
        "eventID": event_id,
        "eventType": "AwsApiCall",
        "apiVersion": "2018-03-01",
        **({"errorCode": error, "errorMessage": "not authorized"} if error else {}),
    }
    sent = record if record is not None else recorded
    return {
        "EventId": event_id,
        "EventName": name,
        "ReadOnly": "false",
        "EventTime": when,
        "EventSource": source,
        "Username": who.rpartition("/")[2],
        "Resources": [{"ResourceType": "AWS::FSx::FileSystem", "ResourceName": r} for r in resources],
        "CloudTrailEvent": sent if isinstance(sent, str) else json.dumps(sent),
    }


def _lookup(name: str, next_token: str | None = None) -> dict:
    """LookupEvents' request for one event name over the history's whole window (`next_token`: a later page)."""
    asked = {
        "LookupAttributes": [{"AttributeKey": "EventName", "AttributeValue": name}],
        "StartTime": SINCE,
        "EndTime": NOW,
    }
    return asked | ({"NextToken": next_token} if next_token else {})


@pytest.fixture
def history(aws, aws_ctx, plan):  # noqa: F811
    """The stack's file system in the cluster's VPC (FSx's answer) and `answer(*events)`, CloudTrail's answer to the
    check's three lookups: each event given to the lookup of its name, one page each."""
    ec2 = aws.client("ec2")
    vpc = ec2.create_vpc(CidrBlock=plan.config.vpc_cidr)["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.40.48.0/20", AvailabilityZone=f"{REGION}b")["Subnet"]
    _moto_cluster().resources_vpc_config = {"subnetIds": [subnet["SubnetId"]], "vpcId": vpc}
    _stubbed(aws_ctx, "fsx").add_response(
        "describe_file_systems", {"FileSystems": [_file_system(plan, subnet["SubnetId"])]}
    )
    trail = _stubbed(aws_ctx, "cloudtrail")

    def answer(*events: dict) -> None:
        for name in checks.SQUASH_EVENTS:
            trail.add_response(
                "lookup_events", {"Events": [e for e in events if e["EventName"] == name]}, _lookup(name)
            )

    return trail, answer


def _hour(n: int) -> datetime.datetime:
    return NOW - datetime.timedelta(hours=n)


def test_an_exemption_added_and_removed_again_fails_naming_who_when_and_the_address(history, aws_ctx, plan):  # noqa: F811
    planned = _planned_squash(plan)
    added = {"rootSquash": planned["rootSquash"], "noSquashNids": [*planned["noSquashNids"], ATTACKER_NID]}
    _, answer = history
    answer(
        _event("UpdateFileSystem", _hour(1), squash=planned, event_id="b1d2-removed"),
        _event("UpdateFileSystem", _hour(3), squash=added, event_id="a7c9-added"),
    )
    outcome = one("aws.squash-history", aws_ctx)
    assert outcome.status == "FAIL"
    assert f"{_hour(3)} UpdateFileSystem by {DEPLOY} (event a7c9-added): exempted {ATTACKER_NID}" in outcome.evidence
    assert "b1d2-removed" not in outcome.evidence
    assert "AttributeKey=EventId,AttributeValue=ID" in outcome.fix and "revokes the caller's sessions" in outcome.fix


def test_updates_and_the_create_that_set_the_plans_squash_pass(history, aws_ctx, plan):  # noqa: F811
    """What `pulumi up` does: the file system made with the plan's squash, later updates with it or without any
    (a storage change leaves squash as it was)."""
    _, answer = history
    answer(
        _event("CreateFileSystem", _hour(900), squash=_planned_squash(plan)),
        _event("UpdateFileSystem", _hour(500), squash=_planned_squash(plan)),
        _event("UpdateFileSystem", _hour(2)),
    )
    outcome = one("aws.squash-history", aws_ctx)
    assert outcome.status == "PASS", outcome.evidence
    assert f"file system {FILE_SYSTEM}: 3 FSx event(s) in the last 90 days" in outcome.evidence


def test_another_file_systems_exemption_is_not_the_stacks(history, aws_ctx, plan):  # noqa: F811
    """Another file system of the region (another stack's, or a second one the deploy role made and deleted): its
    exemptions are not root on this stack's teams' directories. A second Lustre file system in the cluster's VPC
    fails aws.layout-client while it stands; one made new holds none of the teams' files (a restore of the stack's
    backups is refused: tests/delivery/test_r16_layout_client_attack.py)."""
    exempting = {"rootSquash": "65534:65534", "noSquashNids": [ATTACKER_NID]}
    _, answer = history
    answer(
        _event("CreateFileSystem", _hour(5), squash=exempting, fs="fs-0fedcba9876543210"),
        _event("UpdateFileSystem", _hour(4), squash=exempting, fs="fs-0fedcba9876543210"),
    )
    assert one("aws.squash-history", aws_ctx).status == "PASS"


def test_an_efs_call_of_the_same_name_is_not_read(history, aws_ctx):  # noqa: F811
    """EFS has an UpdateFileSystem too, its file systems IDs of the same form; its event source tells it apart."""
    _, answer = history
    answer(_event("UpdateFileSystem", _hour(4), source="elasticfilesystem.amazonaws.com", record="not FSx's"))
    assert one("aws.squash-history", aws_ctx).status == "PASS"


@pytest.mark.parametrize(
    ("record", "resources"),
    [
        (
            {"eventSource": checks.FSX_EVENT_SOURCE, "requestParameters": "HIDDEN_DUE_TO_SECURITY_REASONS"},
            (FILE_SYSTEM,),
        ),
        ("{not json", ()),
    ],
    ids=["redacted-parameters-of-the-file-system", "not-json-naming-no-file-system"],
)
def test_an_update_whose_parameters_cannot_be_read_fails_as_unreadable(history, aws_ctx, record, resources):  # noqa: F811
    """A pass would be the blind spot this check closes: read once by a human, an unreadable event ends the doubt."""
    _, answer = history
    answer(_event("UpdateFileSystem", _hour(6), record=record, resources=resources, event_id="c3e4"))
    outcome = one("aws.squash-history", aws_ctx)
    assert outcome.status == "FAIL"
    assert f"{_hour(6)} UpdateFileSystem by " in outcome.evidence
    assert "(event c3e4): parameters unreadable" in outcome.evidence


def test_an_exemption_on_the_second_page_fails(history, aws_ctx, plan):  # noqa: F811
    trail, _ = history
    planned = _planned_squash(plan)
    added = {"noSquashNids": [*planned["noSquashNids"], ATTACKER_NID]}
    trail.add_response("lookup_events", {"Events": []}, _lookup("CreateFileSystem"))
    trail.add_response("lookup_events", {"Events": []}, _lookup("CreateFileSystemFromBackup"))
    first = [_event("UpdateFileSystem", _hour(n), squash=planned, event_id=f"p{n}") for n in range(1, 51)]
    trail.add_response("lookup_events", {"Events": first, "NextToken": "page-2"}, _lookup("UpdateFileSystem"))
    second = {"Events": [_event("UpdateFileSystem", _hour(60), squash=added, event_id="old-one")]}
    trail.add_response("lookup_events", second, _lookup("UpdateFileSystem", "page-2"))
    outcome = one("aws.squash-history", aws_ctx)
    assert outcome.status == "FAIL" and f"(event old-one): exempted {ATTACKER_NID}" in outcome.evidence


def test_a_refused_lookup_names_the_right_and_who_runs_the_check(history, aws_ctx):  # noqa: F811
    trail, _ = history
    add_wire_error(trail, "cloudtrail", "lookup_events", "AccessDeniedException", "not authorized")
    outcome = one("aws.squash-history", aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence == "CloudTrail refused LookupEvents (AccessDeniedException)"
    assert "allowed cloudtrail:LookupEvents" in outcome.fix
    assert "`higgsfield verify STACK --only aws.squash-history`" in outcome.fix


def test_squash_switched_off_for_a_while_fails(history, aws_ctx, plan):  # noqa: F811
    _, answer = history
    answer(
        _event("UpdateFileSystem", _hour(1), squash=_planned_squash(plan)),
        _event("UpdateFileSystem", _hour(2), squash={"rootSquash": "0:0", "noSquashNids": []}, event_id="off"),
    )
    outcome = one("aws.squash-history", aws_ctx)
    assert outcome.status == "FAIL" and "(event off): root squash off" in outcome.evidence


def test_root_squashed_to_a_teams_uid_fails(history, aws_ctx, plan):  # noqa: F811
    """Root on every node as a team's UID owns that team's directory."""
    uid = next(iter(plan.config.scheduler.team_uids.values()))
    _, answer = history
    answer(_event("UpdateFileSystem", _hour(2), squash={"rootSquash": f"{uid}:{uid}"}, event_id="as-team"))
    outcome = one("aws.squash-history", aws_ctx)
    assert outcome.status == "FAIL" and f"(event as-team): root squashed to {uid}:{uid}" in outcome.evidence


def test_member_names_are_read_in_any_case(history, aws_ctx, plan):  # noqa: F811
    """The casing CloudTrail gives FSx's nested members is assumed; the API's own (PascalCase) reads the same."""
    planned = _planned_squash(plan)
    record = {
        "eventSource": checks.FSX_EVENT_SOURCE,
        "userIdentity": {"arn": DEPLOY},
        "requestParameters": {
            "FileSystemId": FILE_SYSTEM,
            "LustreConfiguration": {"RootSquashConfiguration": {"NoSquashNids": [ATTACKER_NID.upper()]}},
        },
    }
    _, answer = history
    answer(_event("UpdateFileSystem", _hour(2), squash=planned, record=record, event_id="cased"))
    outcome = one("aws.squash-history", aws_ctx)
    assert outcome.status == "FAIL" and f"(event cased): exempted {ATTACKER_NID.upper()}" in outcome.evidence


def test_the_file_system_created_without_squash_fails(history, aws_ctx):  # noqa: F811
    _, answer = history
    answer(_event("CreateFileSystem", _hour(30), event_id="bare"))
    outcome = one("aws.squash-history", aws_ctx)
    assert outcome.status == "FAIL" and "(event bare): created without root squash" in outcome.evidence


# --- beside it: the other ways to an exemption ------------------------------------------------------------------------


def test_a_change_made_through_cloudformation_is_an_fsx_call_and_fails_naming_the_service(history, aws_ctx, plan):  # noqa: F811
    """CloudFormation (or the console) calls FSx's UpdateFileSystem itself, recorded as any call, with the service
    that made it on the caller's behalf in userIdentity.invokedBy."""
    planned = _planned_squash(plan)
    event = _event(
        "UpdateFileSystem",
        _hour(8),
        squash={"noSquashNids": [*planned["noSquashNids"], ATTACKER_NID]},
        who=f"arn:aws:sts::{ACCOUNT}:assumed-role/cfn-exec/AWSCloudFormation",
        event_id="cfn",
    )
    record = json.loads(event["CloudTrailEvent"])
    record["userIdentity"]["invokedBy"] = "cloudformation.amazonaws.com"
    event["CloudTrailEvent"] = json.dumps(record)
    _, answer = history
    answer(event)
    outcome = one("aws.squash-history", aws_ctx)
    assert outcome.status == "FAIL"
    assert "by arn:aws:sts::123456789012:assumed-role/cfn-exec/AWSCloudFormation via cloudformation.amazonaws.com" in (
        outcome.evidence
    )


def test_a_refused_exemption_is_named_as_an_attempt(history, aws_ctx, plan):  # noqa: F811
    """A refused call changed nothing, but asking for an exemption is worth a human's look."""
    planned = _planned_squash(plan)
    asked = {"noSquashNids": [*planned["noSquashNids"], ATTACKER_NID]}
    _, answer = history
    answer(_event("UpdateFileSystem", _hour(9), squash=asked, who=ADMIN, error="AccessDenied", event_id="tried"))
    outcome = one("aws.squash-history", aws_ctx)
    assert outcome.status == "FAIL"
    assert f"(event tried): refused (AccessDenied), asked: exempted {ATTACKER_NID}" in outcome.evidence


def test_a_refused_restore_made_no_file_system_and_passes(history, aws_ctx):  # noqa: F811
    """The deploy role's CreateFileSystemFromBackup is refused (AdministratorsOnly, fsx:*FromBackup): no file system
    was made, none of this stack's."""
    _, answer = history
    answer(_event("CreateFileSystemFromBackup", _hour(10), error="AccessDenied"))
    assert one("aws.squash-history", aws_ctx).status == "PASS"


def test_the_lookup_asks_the_stacks_region_for_the_whole_90_day_history(history, aws_ctx):  # noqa: F811
    """Events older than 90 days are gone from the history (LookupEvents: "within the last 90 days"), and each
    region keeps its own: the file system's is the stack's. The Stubber holds each request to _lookup's window."""
    _, answer = history
    answer()
    assert one("aws.squash-history", aws_ctx).status == "PASS"
    assert aws_ctx.clients["cloudtrail"].meta.region_name == REGION
