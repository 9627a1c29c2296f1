"""Every AWS error a stub in this suite answers is one AWS sends: its wire code and HTTP status
come from botocore's service model (tests/aws_errors.py), never from a shape name or a guess."""

from __future__ import annotations

import ast
from pathlib import Path

import health_gate
import pytest

from tests.aws_errors import add_wire_error, declared_errors, wire_error

TESTS = Path(__file__).resolve().parents[1]


def test_resource_contention_is_sent_as_its_wire_code_with_http_500():
    error = wire_error("autoscaling", "ResourceContention")
    assert (error.code, error.status) == ("ResourceContention", 500)
    assert declared_errors("autoscaling")["ResourceContention"][1] == "ResourceContentionFault"


def test_botocores_shape_name_is_refused_as_a_wire_code():
    with pytest.raises(AssertionError, match="AWS sends the code 'ResourceContention'"):
        wire_error("autoscaling", "ResourceContentionFault")


def test_auto_scaling_denies_with_access_denied_and_http_403_not_the_json_protocols_exception():
    error = wire_error("autoscaling", "AccessDenied")
    assert (error.code, error.status) == ("AccessDenied", 403)
    with pytest.raises(AssertionError, match="never sends 'AccessDeniedException'"):
        wire_error("autoscaling", "AccessDeniedException")


def test_service_quotas_denies_with_its_json_protocol_exception():
    assert wire_error("service-quotas", "AccessDeniedException").code == "AccessDeniedException"


def test_the_health_gate_retries_on_every_retryable_code_that_set_instance_health_can_send():
    assert "ResourceContention" in health_gate.RETRYABLE
    for code in health_gate.RETRYABLE:
        wire_error("autoscaling", code)  # each is a code Auto Scaling sends


def _client_error_calls(tree: ast.AST) -> list[ast.Call]:
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "add_client_error"
    ]


def test_no_stub_in_the_suite_types_an_error_code_by_hand():
    """Stubbed errors go through add_wire_error, which reads the code and status from botocore."""
    offenders = [
        f"{p.name}:{call.lineno}"
        for p in sorted(TESTS.rglob("*.py"))
        if p.name != "aws_errors.py"
        for call in _client_error_calls(ast.parse(p.read_text()))
    ]
    assert offenders == []


def test_add_wire_error_answers_the_status_from_the_model():
    import boto3
    from botocore.stub import Stubber

    client = boto3.client("autoscaling", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    add_wire_error(stub, "autoscaling", "set_instance_health", "ResourceContention", "busy")
    with stub, pytest.raises(client.exceptions.ResourceContentionFault) as raised:
        client.set_instance_health(InstanceId="i-0abc123def4567890", HealthStatus="Unhealthy")
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert raised.value.response["Error"]["Code"] == "ResourceContention"
