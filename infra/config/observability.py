"""Logs, metrics, health thresholds."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    AfterValidator,
    Field,
    Strict,
    field_validator,
)

from infra.config.base import GP3_MAX_GIB, Bool, Int, Setting, number

LOG_RETENTION_DAYS = (
    1,
    3,
    5,
    7,
    14,
    30,
    60,
    90,
    120,
    150,
    180,
    365,
    400,
    545,
    731,
    1096,
    1827,
    2192,
    2557,
    2922,
    3288,
    3653,
)


def _fraction(value: float) -> float:
    if not 0 < value <= 1:  # false for nan too
        raise ValueError(f"must be a number in (0, 1], got {value}")
    return value


def _positive(value: float) -> float:
    if not 0 < value < MAX_THRESHOLD:  # false for nan; .inf (YAML's infinity) would fail every node
        raise ValueError(f"must be a positive number below {MAX_THRESHOLD:,}, got {value}")
    return value


MAX_THRESHOLD = 1_000_000.0  # MB/s or GB/s: far above any node's Lustre or NCCL bandwidth


Fraction = Annotated[
    float, Strict(), AfterValidator(_fraction), Field(json_schema_extra={"exclusiveMinimum": 0, "maximum": 1})
]
Positive = Annotated[float, Strict(), AfterValidator(_positive), Field(json_schema_extra={"exclusiveMinimum": 0})]


class HealthThresholds(Setting):
    """What a healthy GPU node reaches, as fractions of the GPU's peak or absolute figures."""

    min_matmul_fraction: Fraction = 0.6
    """bf16 dense matmul TFLOP/s / peak."""
    min_memory_bandwidth_fraction: Fraction = 0.7
    """Device-to-device copy GB/s / peak."""
    min_lustre_mb_s: Positive = Field(200.0, alias="minLustreMBps")
    """Write then read of a file on /fsx, per node."""
    min_bus_bandwidth_gb_s: Positive = Field(50.0, alias="minBusBandwidthGBps")
    """NCCL all-reduce bus bandwidth across nodes."""


class Observability(Setting):
    """Prometheus, DCGM, logs and node auto-repair."""

    enabled: Bool = True
    """Prometheus, Grafana dashboards, the DCGM exporter."""
    metrics_retention_days: number(1, 3650, "ten years") = 15
    """Days Prometheus keeps metrics."""
    metrics_storage_gib: number(10, GP3_MAX_GIB, "the gp3 maximum") = Field(100, alias="metricsStorageGiB")
    """Prometheus's encrypted gp3 volume, GiB."""
    log_retention_days: Int = 30
    """A CloudWatch Logs retention: 1, 3, 5, 7, 14, 30, 60, 90, ... 3653 days."""
    node_auto_repair: Bool = True
    """Replace unhealthy GPU nodes: EKS auto-repair on node-group pools, Karpenter's node repair on Karpenter pools."""
    health: HealthThresholds = Field(HealthThresholds(), alias="healthcheck")

    @field_validator("log_retention_days")
    @classmethod
    def _cloudwatch_retention(cls, value: int) -> int:
        if value not in LOG_RETENTION_DAYS:
            raise ValueError(
                f"{value} is not a CloudWatch Logs retention; use one of: {', '.join(map(str, LOG_RETENTION_DAYS))}"
            )
        return value
