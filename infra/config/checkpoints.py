"""Checkpoints: where jobs write them, how long they get to stop."""

from __future__ import annotations

from pydantic import (
    model_validator,
)

from infra.config.base import Bool, Setting, derived, number
from infra.config.errors import Problems
from infra.config.gpu_pools import PositiveDuration, seconds_of


class Checkpoints(Setting):
    """How the rendered training jobs checkpoint and resume (examples/checkpointing.py)."""

    keep_last: number(1, 1000, "ours") = 3
    """Complete checkpoints kept on shared storage per job (older ones are deleted once a newer one is complete)."""
    flush_time: PositiveDuration = "10m"
    """How long a final checkpoint may take on SIGTERM (write the shards to local NVMe, then publish them to FSx);
    minutes for a large model."""
    termination_grace_period: PositiveDuration = derived(
        "The pods' terminationGracePeriodSeconds; default flushTime + 2m, never shorter than flushTime."
    )
    export_to_s3: Bool = False
    """Write checkpoints under the directory the S3 data repository association exports (higgsfield:fsx.s3.dataset), so
    they reach S3; only its owner team can."""

    @model_validator(mode="after")
    def _grace(self) -> Checkpoints:
        problems = Problems()
        if self.termination_grace_period is None:
            self._fill(termination_grace_period=f"{seconds_of(self.flush_time) + 120}s")
        elif seconds_of(self.termination_grace_period) < seconds_of(self.flush_time):
            problems.add(
                "terminationGracePeriod",
                f"{self.termination_grace_period} is shorter than flushTime {self.flush_time}: the kubelet would "
                "kill a pod before its final checkpoint is written",
            )
        problems.raise_any()
        return self

    @property
    def grace_seconds(self) -> int:
        return seconds_of(self.termination_grace_period)

    @property
    def flush_seconds(self) -> int:
        return seconds_of(self.flush_time)
