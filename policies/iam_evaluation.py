"""A small IAM policy evaluator: does this principal's policies allow this request, and if not,
which statement says no.

Enough of AWS's evaluation logic for identity-based policies and a permissions boundary in one
account (docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html):
an explicit Deny in any policy wins; otherwise the request must be allowed by the boundary (when
there is one) and by an identity policy. Statements match on Action/NotAction (case-insensitive,
`*` and `?` wildcards), Resource/NotResource (case-sensitive wildcards) and Condition with the
operators our policies use: String(Not)Equals, String(Not)Like, Arn(Not)Equals, Arn(Not)Like,
Bool, Null, the `...IfExists` suffix and the `ForAnyValue:`/`ForAllValues:` prefixes
(reference_policies_elements_condition_operators.html: a key missing from the request makes a
positive operator false and a negated one true; `IfExists` makes a missing key true; `ForAllValues` holds and
`ForAnyValue` does not, whatever the operator: reference_policies_condition-single-vs-multi-valued-context-keys.html).
Context key names match whatever their case ("Context key names are not case-sensitive",
reference_policies_elements_condition.html), the tag key of aws:RequestTag/KEY too: a request carrying two tags whose
keys differ in case alone (KMS, ECR and IAM keep both: tag keys are case-sensitive) gives that key both values.
No policy variables, no resource policies, no SCPs, no session policies: what we render and the
attacks on it need none of them. No maintained library on PyPI evaluates conditions and
boundaries (policyuniverse and parliament parse and lint; they do not decide requests).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

NEGATED = {"StringNotEquals", "StringNotLike", "ArnNotEquals", "ArnNotLike", "StringNotEqualsIgnoreCase"}


@dataclass(frozen=True)
class Request:
    """One API call: `iam:CreateRole` on a role ARN, with the request's condition keys."""

    action: str
    resource: str
    context: Mapping[str, str | Sequence[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Policy:
    name: str
    document: Mapping[str, Any]

    @classmethod
    def of(cls, name: str, document: str | Mapping[str, Any]) -> Policy:
        return cls(name, json.loads(document) if isinstance(document, str) else document)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str
    denied_by: tuple[str, str] | None = None  # (policy, Sid) of the explicit Deny that decided it

    def __bool__(self) -> bool:
        return self.allowed


def _listed(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


@functools.cache
def _compiled(pattern: str, case_sensitive: bool) -> re.Pattern[str]:
    """A wildcard pattern as a regular expression, made once per pattern: the suite's attacks ask the same few hundred
    patterns some 190,000 times, and writing each out again (a re.escape per character) was most of a decision."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(regex, 0 if case_sensitive else re.IGNORECASE)


def _glob(pattern: str, value: str, case_sensitive: bool) -> bool:
    return _compiled(pattern, case_sensitive).fullmatch(value) is not None


def _action_matches(statement: Mapping[str, Any], action: str) -> bool:
    if "NotAction" in statement:
        return not any(_glob(p, action, False) for p in _listed(statement["NotAction"]))
    return any(_glob(p, action, False) for p in _listed(statement.get("Action", [])))


def _resource_matches(statement: Mapping[str, Any], resource: str) -> bool:
    if "NotResource" in statement:
        return not any(_glob(p, resource, True) for p in _listed(statement["NotResource"]))
    return any(_glob(p, resource, True) for p in _listed(statement.get("Resource", [])))


def _compare(operator: str, wanted: str, actual: str) -> bool:
    base = operator.replace("Not", "")
    if base in ("StringEquals",):
        return wanted == actual
    if base == "StringEqualsIgnoreCase":
        return wanted.lower() == actual.lower()
    if base in ("StringLike", "ArnLike", "ArnEquals"):
        return _glob(wanted, actual, True)
    if base == "Bool":
        return wanted.lower() == actual.lower()
    raise ValueError(f"condition operator {operator} is not supported by this evaluator")


def _condition_holds(operator: str, key: str, wanted: Sequence[str], context: Mapping[str, Any]) -> bool:
    qualifier, _, operator = operator.rpartition(":")
    if_exists = operator.endswith("IfExists")
    operator = operator.removesuffix("IfExists")
    named = [k for k in context if k.lower() == key.lower()]
    present = bool(named)
    if operator == "Null":
        return all((str(w).lower() == "true") != present for w in wanted)
    if not present:  # the set operators decide by the set alone: all of none holds, any of none does not
        if qualifier:
            return qualifier == "ForAllValues"
        return if_exists or operator in NEGATED
    actual = [str(a) for k in named for a in _listed(context[k])]
    wanted = [str(w) for w in wanted]
    negated = operator in NEGATED
    hits = [any(_compare(operator, w, a) for w in wanted) for a in actual]  # per request value: matches one
    if qualifier == "ForAllValues":
        return all(not h for h in hits) if negated else all(hits)
    if qualifier == "ForAnyValue" and negated:  # some request value matches none of the policy's
        return not all(hits)
    return not any(hits) if negated else any(hits)


def _conditions_hold(statement: Mapping[str, Any], context: Mapping[str, Any]) -> bool:
    for operator, keys in (statement.get("Condition") or {}).items():
        for key, wanted in keys.items():
            if not _condition_holds(operator, key, _listed(wanted), context):
                return False
    return True


def _applies(statement: Mapping[str, Any], request: Request) -> bool:
    return (
        _action_matches(statement, request.action)
        and _resource_matches(statement, request.resource)
        and _conditions_hold(statement, request.context)
    )


def _statements(policy: Policy) -> list[Mapping[str, Any]]:
    return _listed(policy.document.get("Statement", []))


def evaluate(request: Request, identity: Sequence[Policy], boundary: Policy | None = None) -> Decision:
    """Allowed or not, and why: the explicit Deny (policy and Sid) that refuses it, or which
    policy fails to allow it."""
    for policy in [*identity, *([boundary] if boundary else [])]:
        for i, statement in enumerate(_statements(policy)):
            if statement.get("Effect") == "Deny" and _applies(statement, request):
                sid = statement.get("Sid", f"#{i}")
                return Decision(False, f"denied by {policy.name}:{sid}", (policy.name, sid))
    if boundary is not None and not any(
        s.get("Effect") == "Allow" and _applies(s, request) for s in _statements(boundary)
    ):
        return Decision(False, f"not allowed by the permissions boundary {boundary.name}")
    allowing = [
        p.name for p in identity if any(s.get("Effect") == "Allow" and _applies(s, request) for s in _statements(p))
    ]
    if not allowing:
        return Decision(False, "no identity policy allows it")
    return Decision(True, f"allowed by {', '.join(allowing)}")


def actions_of(document: str | Mapping[str, Any]) -> list[tuple[str, str]]:
    """(action, resource) of every Allow statement, for checking a policy against a ceiling."""
    doc = json.loads(document) if isinstance(document, str) else document
    return [
        (a, r)
        for s in _listed(doc.get("Statement", []))
        if s.get("Effect") == "Allow"
        for a in _listed(s.get("Action", []))
        for r in _listed(s.get("Resource", "*"))
    ]


__all__ = ["Decision", "Policy", "Request", "actions_of", "evaluate"]
