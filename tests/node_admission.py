"""One way to run a ValidatingAdmissionPolicy that guards node updates (the health gate's own-node
policy, the FSx CSI node plugin's) with cel-python, as the API server would for one request."""

from __future__ import annotations

from functools import cache

import celpy


@cache
def program(expression: str):
    env = celpy.Environment()
    return env.program(env.compile(expression))


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
    activation = {
        "object": None if new is None else celpy.json_to_cel(new),
        "oldObject": None if old is None else celpy.json_to_cel(old),
        "request": celpy.json_to_cel(request),
    }
    if not all(bool(program(c["expression"]).evaluate(activation)) for c in policy["spec"]["matchConditions"]):
        return []
    out = []
    for validation in policy["spec"]["validations"]:
        value = program(validation["expression"]).evaluate(activation)
        if not isinstance(value, celpy.celtypes.BoolType) or not value:  # an evaluation error denies too
            out.append(validation["message"])
    return out
