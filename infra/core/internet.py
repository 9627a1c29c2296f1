"""How much of the internet an allow-list opens to: one rule that the stack settings (prod's API
endpoint) and the policy pack (eks-endpoint-restricted) both apply."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

MAX_INTERNET_SHARE = 2.0**-16  # a /16's worth of the IPv4 address space


def internet_share(cidrs: Iterable[str]) -> float:
    """The share of the IPv4 address space the CIDRs cover together (overlaps counted once)."""
    networks = ipaddress.collapse_addresses(ipaddress.IPv4Network(c, strict=False) for c in cidrs)
    return sum(n.num_addresses for n in networks) / 2**32
