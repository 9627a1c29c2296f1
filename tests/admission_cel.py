"""The CEL of the admission policies, evaluated as the API server evaluates it: with cel-expr-python,
Google's Python binding of cel-cpp (the C++ implementation of the CEL spec that cel-go, the API
server's, is tested against), on the JSON the API server hands a policy, with Kubernetes' CEL
library functions the policies call registered here. Each expression is compiled once (type-checked
with every variable `dyn`, as the API server checks a policy whose kinds it does not know).

cel-python, which the suite used before, walks the parse tree in Python per evaluation: about 4 ms an
expression, some 60 s of the suite's CPU; this is about a hundred times faster."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from typing import Any

from cel_expr_python import cel

T = cel.Type
Allow = Callable[[str, str, str, str], bool]  # (group, resource, namespace, verb) -> allowed

_NOBODY: Allow = lambda *_: False  # noqa: E731
_allow: list[Allow] = [_NOBODY]  # the requester's rights during the evaluation running now

# apimachinery's suffixes (kubernetes/kubernetes:staging/src/k8s.io/apimachinery/pkg/api/resource/suffix.go@7125a5f0):
# a Pod's quantities reach a policy in canonical form, which may end in any of them
_SUFFIXES = {
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def quantity_value(text: str) -> float:
    """A Kubernetes quantity's value (k8s.io/apimachinery/pkg/api/resource: decimal and binary suffixes, exponents)."""
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        number = text[: -len(suffix)]
        if text.endswith(suffix) and number.lstrip("+-").replace(".", "", 1).isdigit():
            return float(number) * _SUFFIXES[suffix]
    return float(text)


def _sum(values: list) -> int | float:
    """lists.go `list.sum()`: an int list sums to an int, a list with a double to a double."""
    return float(sum(values)) if any(isinstance(v, float) for v in values) else int(sum(values))


def _step(key: str) -> Callable[[dict, str], dict]:
    return lambda path, value: {**path, key: value}


def _allowed(path: dict) -> bool:
    return bool(
        _allow[0](path.get("group", ""), path.get("resource", ""), path.get("namespace", ""), path.get("verb", ""))
    )


def _member(name: str, parameters: list, returns: Any, impl: Callable[..., Any]) -> cel.FunctionDecl:
    return cel.FunctionDecl(name, [cel.Overload(f"k8s_{name}", returns, parameters, is_member=True, impl=impl)])


# Kubernetes' CEL libraries (k8s.io/apiserver/pkg/cel/library): lists.go `list.sum()`; quantity.go
# `quantity(s)` and its asApproximateFloat() (a quantity is carried as its value, a double: the policies
# only ever ask for that); authz.go `authorizer.group(g).resource(r)[.namespace(ns)][.name(n)]
# .check(verb).allowed()`, the path carried as a map and answered by the requester's rights.
_PATH = T.Map(T.STRING, T.STRING)  # an authorizer request being built: group, resource, ..., verb
_FUNCTIONS = [
    _member("sum", [T.List(T.DYN)], T.DYN, _sum),
    cel.FunctionDecl("quantity", [cel.Overload("k8s_quantity", T.DOUBLE, [T.STRING], impl=quantity_value)]),
    _member("asApproximateFloat", [T.DOUBLE], T.DOUBLE, lambda value: value),
    *(
        _member(step, [_PATH, T.STRING], _PATH, _step(key))
        for step, key in [
            ("group", "group"),
            ("resource", "resource"),
            ("namespace", "namespace"),
            ("name", "name"),
            ("check", "verb"),
        ]
    ),
    _member("allowed", [_PATH], T.BOOL, _allowed),
]
_ENV = cel.NewEnv(
    variables={name: T.DYN for name in ("object", "oldObject", "request", "variables", "authorizer")},
    functions=_FUNCTIONS,
)


class EvaluationError(Exception):
    """What an expression evaluated to when it is no value (a missing field, no such overload): the
    API server counts it as a denial."""


@cache
def program(expression: str) -> cel.Expression:
    return _ENV.compile(expression)


def plain(value: Any) -> Any:
    """A JSON value as plain dicts, lists, strings and numbers (a YAML reader's own subclasses are no
    CEL value): what the API server would hand the policy, the object as JSON."""
    return json.loads(json.dumps(value))


def evaluate(expression: str, activation: dict[str, Any], allow: Allow = _NOBODY) -> Any:
    """The expression's value (plain Python: bool, int, float, str, list, dict, None) on `activation`
    (object, oldObject, request, variables: plain JSON values), `authorizer` answered by `allow`; an
    EvaluationError when it evaluates to an error."""
    _allow[0] = allow
    try:
        value = program(expression).eval(data={**activation, "authorizer": {}})
    finally:
        _allow[0] = _NOBODY
    if value.type() == T.ERROR:
        raise EvaluationError(str(value.value()))
    return value.plain_value()
