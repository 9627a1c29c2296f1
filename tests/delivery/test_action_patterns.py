"""The ceilings refuse some actions by a pattern, not by name, for IAM counts every character of the boundary
(components/delivery.py MANAGED_POLICY_CHARACTERS): `ec2:ModifyEbs*` for ModifyEbsDefaultKmsKeyId. A pattern that
matched one more action of its service would refuse a role what it may need; one that missed an action would let it
through. Each pattern is compared here with every operation of its service in the botocore this project pins
(boto/botocore:botocore/data/SERVICE/VERSION/service-2.json@1.44.18), as IAM compares an action with a pattern
(`*` for any characters, without case: policies/iam_evaluation.py). The Service Authorization Reference as stored
in salesforce/policy_sentry:policy_sentry/shared/data/docs/list_*.html@66e53f23 gives each pattern the same actions,
and these others that botocore has no operation for: CreateLogDelivery (logs:Create*Delivery*, the older vended-log
API, meant), and Verified Access's web ACL actions (ec2:*VerifiedAccess*, every action of Verified Access by
design)."""

from __future__ import annotations

from functools import cache

import botocore.session
import pytest

from components.delivery import IMAGE_WRITES, NEVER_UNDER_THE_BOUNDARY, REFUSED_WHOLE
from policies.iam_evaluation import Policy, Request, evaluate

# What each pattern stands for: the operations of its service it is to match, and no other.
INTENDED = {
    "autoscaling:AttachI*": {"AttachInstances"},
    "autoscaling:U*": {"UpdateAutoScalingGroup"},
    "ec2:*TransitGatewayVpcAttachment": {
        "AcceptTransitGatewayVpcAttachment",
        "CreateTransitGatewayVpcAttachment",
        "DeleteTransitGatewayVpcAttachment",
        "ModifyTransitGatewayVpcAttachment",
        "RejectTransitGatewayVpcAttachment",
    },
    "ec2:*VpcPeeringConnection": {
        "AcceptVpcPeeringConnection",
        "CreateVpcPeeringConnection",
        "DeleteVpcPeeringConnection",
        "RejectVpcPeeringConnection",
    },
    "ec2:AcceptVpcE*": {"AcceptVpcEndpointConnections"},
    "ec2:Associate*CidrBlock": {"AssociateSubnetCidrBlock", "AssociateVpcCidrBlock"},
    "ec2:AttachVpn*": {"AttachVpnGateway"},
    "ec2:Create*Vpn*": {
        "CreateClientVpnEndpoint",
        "CreateClientVpnRoute",
        "CreateVpnConcentrator",
        "CreateVpnConnection",
        "CreateVpnConnectionRoute",
        "CreateVpnGateway",
    },
    "ec2:CreateDefault*": {"CreateDefaultSubnet", "CreateDefaultVpc"},
    "ec2:CreateVpcEndpointS*": {"CreateVpcEndpointServiceConfiguration"},
    "ec2:ModifyEbs*": {"ModifyEbsDefaultKmsKeyId"},
    "ecr:*CacheRule": {
        "CreatePullThroughCacheRule",
        "DeletePullThroughCacheRule",
        "UpdatePullThroughCacheRule",
        "ValidatePullThroughCacheRule",
    },
    "ecr:*RepositoryCreationTemplate": {
        "CreateRepositoryCreationTemplate",
        "DeleteRepositoryCreationTemplate",
        "UpdateRepositoryCreationTemplate",
    },
    "ecr:*StorageClass": {"UpdateImageStorageClass"},
    "ecr:PutImageTag*": {"PutImageTagMutability"},
    "ecr:PutL*": {"PutLifecyclePolicy"},
    "ecr:PutRep*": {"PutReplicationConfiguration"},
    "fsx:*FromBackup": {"CreateFileSystemFromBackup", "CreateVolumeFromBackup"},
    "fsx:CreateDataRepository*": {"CreateDataRepositoryAssociation", "CreateDataRepositoryTask"},
    "kms:*CustomKeyStore": {
        "ConnectCustomKeyStore",
        "CreateCustomKeyStore",
        "DeleteCustomKeyStore",
        "DisconnectCustomKeyStore",
        "UpdateCustomKeyStore",
    },
    "kms:*agResource": {"TagResource", "UntagResource"},
    "kms:Disable*": {"DisableKey", "DisableKeyRotation"},
    "logs:Create*Delivery*": {"CreateDelivery"},
    "logs:Put*Destination*": {
        "PutDeliveryDestination",
        "PutDeliveryDestinationPolicy",
        "PutDestination",
        "PutDestinationPolicy",
    },
}
# Patterns that stand for every action naming a family, reads included: nothing to compare them with but themselves.
FAMILIES = {"ec2:*TrafficMirror*", "ec2:*VerifiedAccess*"}


@cache
def _operations(service: str) -> frozenset[str]:
    return frozenset(botocore.session.get_session().get_service_model(service).operation_names)


@pytest.mark.parametrize("pattern", sorted(INTENDED))
def test_each_action_pattern_of_the_ceilings_matches_exactly_the_actions_it_stands_for(pattern):
    """Matched as the evaluator the decision tests use matches a statement's actions."""
    service = pattern.split(":")[0]
    granted = Policy("pattern", {"Statement": [{"Effect": "Allow", "Action": pattern, "Resource": "*"}]})
    matched = {o for o in _operations(service) if evaluate(Request(f"{service}:{o}", "*"), [granted]).allowed}
    assert matched == INTENDED[pattern]


def test_every_action_pattern_the_ceilings_refuse_is_compared_here():
    """REFUSED_WHOLE (both ceilings' AdministratorsOnly), NEVER_UNDER_THE_BOUNDARY (the boundary's) and IMAGE_WRITES
    (the deploy role's ImagesAreTheImageRoles): a new pattern there is listed above with what it stands for."""
    patterns = {a for a in (*REFUSED_WHOLE, *NEVER_UNDER_THE_BOUNDARY, *IMAGE_WRITES) if "*" in a}
    assert patterns - FAMILIES == set(INTENDED)
