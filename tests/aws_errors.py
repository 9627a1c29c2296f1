"""AWS errors as AWS sends them, for botocore Stubbers: the wire code and HTTP status of an error,
read from botocore's own service model, never typed by hand.

botocore's service model (botocore/data/SERVICE/VERSION/service-2.json) declares an operation's
errors as shapes. The shape's name is what botocore generates the exception class from; the code
on the wire is the shape's `error.code` when it has one (query protocol services such as Auto
Scaling: shape `ResourceContentionFault`, code `ResourceContention`, HTTP 500), else the shape
name (JSON protocols: `AccessDeniedException`). `wire_error` looks both up.

Errors common to every action of a service are not in the model. Those our stubs answer are in
COMMON_ERRORS, each with where its code and status were read; `wire_error` refuses any other
code, so a stub cannot invent one.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import botocore
from botocore.stub import Stubber

DATA = Path(botocore.__file__).parent / "data"

# Errors a service sends for any action, absent from its model (by protocol of the service, or by the service).
COMMON_ERRORS: dict[tuple[str, str], tuple[int, str]] = {
    # Query-protocol services (Auto Scaling, STS, IAM) deny with code AccessDenied and HTTP 403:
    # "https response error StatusCode: 403, ... api error AccessDenied: User: ... is not authorized
    # to perform: autoscaling:DescribeInstanceRefreshes" (hashicorp/nomad-autoscaler#952, an Auto
    # Scaling call from the Go SDK); moto answers the same for query APIs it denies
    # (getmoto/moto: moto/core/exceptions.py AccessDeniedError, code 403, "AccessDenied"). Not
    # `AccessDeniedException` (400): that is the JSON-protocol code, which the generic "Common
    # Errors" page of the Auto Scaling API reference lists but the query protocol does not send.
    ("query", "AccessDenied"): (
        403,
        "hashicorp/nomad-autoscaler#952; getmoto/moto:moto/core/exceptions.py AccessDeniedError",
    ),
    # Throttling of query services: botocore's retry rules match it on code and status
    # (botocore/data/_retry.json definitions.throttling: Throttling, 400).
    ("query", "Throttling"): (400, "boto/botocore:botocore/data/_retry.json (definitions.throttling)"),
    # EC2's model declares no error shapes; its codes are in the EC2 API reference ("Error codes
    # for the Amazon EC2 API": client errors, HTTP 400), this one as terraform-provider-aws
    # handles it (hashicorp/terraform-provider-aws:internal/service/ec2/errors.go@00081ce4).
    ("ec2", "InvalidCapacityReservationId.NotFound"): (
        400,
        "docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html",
    ),
    # An action the caller's policies do not allow: EC2's own code (not AccessDenied), HTTP 403.
    ("ec2", "UnauthorizedOperation"): (
        403,
        "docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html",
    ),
    # SQS denies with the query code AccessDenied and HTTP 403 ("Error Code: AccessDenied, Status Code: 403 ... Access
    # to the resource https://sqs.us-west-2.amazonaws.com/ is denied", aws/aws-sdk-php#188; the same from the JS SDK,
    # island-is/island.is#7812); its JSON protocol is awsQueryCompatible, so botocore reads that code back from the
    # x-amzn-query-error header. A service's own entry, keyed by the service, not by its protocol.
    ("sqs", "AccessDenied"): (403, "aws/aws-sdk-php#188; island-is/island.is#7812"),
}


@dataclass(frozen=True)
class WireError:
    service: str
    code: str
    status: int
    source: str


@cache
def service_model(service: str) -> dict:
    """The newest service-2.json of `service` that this botocore ships."""
    versions = sorted(p for p in (DATA / service).iterdir() if p.is_dir())
    path = versions[-1] / "service-2.json.gz"
    if not path.exists():
        path = versions[-1] / "service-2.json"
        return json.loads(path.read_text())
    return json.loads(gzip.decompress(path.read_bytes()))


def declared_errors(service: str) -> dict[str, tuple[int, str]]:
    """Wire code -> (HTTP status, shape name) of every error shape in the model."""
    model = service_model(service)
    found = {}
    for name, shape in model["shapes"].items():
        if not shape.get("exception"):
            continue
        error = shape.get("error") or {}
        found[error.get("code", name)] = (error.get("httpStatusCode", 400), name)
    return found


def wire_error(service: str, code: str) -> WireError:
    """The wire code and status of `code` for `service`; AssertionError if AWS never sends it
    (naming the wire code when `code` is a shape name)."""
    declared = declared_errors(service)
    if code in declared:
        return WireError(
            service, code, declared[code][0], f"botocore {service} service-2.json shape {declared[code][1]}"
        )
    protocol = service_model(service)["metadata"]["protocol"]
    for key in ((service, code), (protocol, code)):
        if key in COMMON_ERRORS:
            status, source = COMMON_ERRORS[key]
            return WireError(service, code, status, source)
    by_shape = {shape: wire for wire, (_, shape) in declared.items()}
    if code in by_shape:
        raise AssertionError(f"{service}: {code!r} is botocore's shape name; AWS sends the code {by_shape[code]!r}")
    raise AssertionError(
        f"{service} ({protocol} protocol) never sends {code!r}: not in its model, not a common error we cite"
    )


def add_wire_error(stub: Stubber, service: str, operation: str, code: str, message: str, **kwargs) -> WireError:
    """`stub.add_client_error` with the code and status AWS sends."""
    error = wire_error(service, code)
    stub.add_client_error(operation, error.code, message, error.status, **kwargs)
    return error
