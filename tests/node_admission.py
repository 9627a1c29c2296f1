"""One way to run a ValidatingAdmissionPolicy that guards node updates (the health gate's own-node
policy, the FSx CSI node plugin's) with cel-expr-python (tests/admission_cel.py), as the API server
would for one request."""

from __future__ import annotations

from tests import admission_cel


def node_update_denials(
    policy: dict, old: dict, new: dict, user: str, node_extra_key: str, node_of_token: str | None
) -> list[str]:
    """The messages of the validations that deny `user`'s update of a node from `old` to `new`
    (none when the policy does not match); the token is bound to `node_of_token` (None: no node)."""
    return denials(policy, old, new, "UPDATE", user, node_extra_key, node_of_token)


def denials(
    policy: dict,
    old: dict | None,
    new: dict | None,
    operation: str,
    user: str,
    node_extra_key: str,
    node_of_token: str | None,
) -> list[str]:
    """node_update_denials for any operation on any object (DELETE: `new` is None, as `object` is)."""
    extra = {node_extra_key: [node_of_token]} if node_of_token else {}
    request = {"userInfo": {"username": user, **({"extra": extra} if extra else {})}, "operation": operation}
    activation = admission_cel.plain({"object": new, "oldObject": old, "request": request})
    if any(_value(c["expression"], activation) is False for c in policy["spec"]["matchConditions"]):
        return []  # the policy does not match (a condition that errs matches: the policy fails closed)
    return [v["message"] for v in policy["spec"]["validations"] if _value(v["expression"], activation) is not True]


def _value(expression: str, activation: dict) -> object:
    """The expression's value, or the error it evaluated to (which denies, as any value but true does)."""
    try:
        return admission_cel.evaluate(expression, activation)
    except admission_cel.EvaluationError as error:
        return error
