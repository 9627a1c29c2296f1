"""FSx for Lustre: capacity, the S3 link, datasets."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    Field,
    Strict,
    model_validator,
)

from infra.config.base import Bool, DnsLabel, Setting, Str, derived, items, number
from infra.config.errors import Problems, _duplicates
from infra.config.limits import S3_BUCKET_PATTERN, s3_bucket

FSX_DEPLOYMENT_TYPES = ("PERSISTENT_2", "SCRATCH_2")
FSX_THROUGHPUT_PER_TIB = (125, 250, 500, 1000)  # MB/s per TiB, PERSISTENT_2 (SCRATCH_2 is fixed at 200)
SCRATCH_2_THROUGHPUT_PER_TIB = 200
# StorageCapacity: 0 - 2,147,483,647 GiB in the API (botocore/data/fsx/2018-03-01/service-2.json
# shape StorageCapacity); for SSD Lustre "1200 GiB, 2400 GiB, and increments of 2400 GiB" (same
# file, CreateFileSystemRequest.StorageCapacity). The account quota on total Lustre storage is lower.
FSX_MAX_GIB = 2_147_483_647
S3_BUCKET = S3_BUCKET_PATTERN


class S3Link(Setting):
    """An S3 data repository linked to the file system."""

    bucket: Annotated[
        str, Strict(), Field(max_length=63, json_schema_extra={"pattern": S3_BUCKET}), AfterValidator(s3_bucket)
    ]
    """The S3 bucket holding the data set."""
    import_path: Str = derived("s3://bucket/prefix read into the file system; default s3://BUCKET.")
    export_path: Str = derived("Where changes are written back; default importPath (PERSISTENT_2: must equal it).")
    auto_import: Bool = True
    """Import new, changed and deleted S3 objects automatically (a delete in S3 removes the file)."""
    export_deletions: Bool = False
    """Also export deletions to S3 (PERSISTENT_2): off, so an `rm -rf` on Lustre never deletes the S3 copy."""
    dataset: DnsLabel | None = None
    """The shared dataset (higgsfield:fsx.datasets) the link fills, at /datasets/NAME (PERSISTENT_2: required)."""

    @model_validator(mode="after")
    def _paths(self) -> S3Link:
        problems = Problems()
        import_path = self.import_path or f"s3://{self.bucket}"
        for where, url in (("importPath", import_path), ("exportPath", self.export_path)):
            if url is None:
                continue
            if not re.fullmatch(r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?", url):
                problems.add(where, f"{url!r} is not an s3:// URL (s3://bucket/prefix)")
            elif url[len("s3://") :].split("/", 1)[0] != self.bucket:
                problems.add(where, f"{url!r} is not in bucket {self.bucket!r} (the s3.bucket setting)")
        problems.raise_any()
        self._fill(import_path=import_path, export_path=self.export_path or import_path)
        return self


class Dataset(Setting):
    """A shared dataset directory on Lustre."""

    name: DnsLabel
    owner: DnsLabel
    """The team that writes it (higgsfield:scheduler.teams)."""
    readers: tuple[DnsLabel, ...] = items()
    """Teams that mount it read-only."""


class Fsx(Setting):
    """FSx for Lustre shared storage (throughput: `lustre_throughput_mb_s`)."""

    enabled: Bool = False
    """Create the file system, its CSI driver and the shared PVC."""
    deployment_type: Literal["PERSISTENT_2", "SCRATCH_2"] = "PERSISTENT_2"
    """PERSISTENT_2 keeps data (and is protected in prod); SCRATCH_2 is cheaper and not replicated."""
    storage_capacity_gib: number(1200, FSX_MAX_GIB, "the FSx API maximum") = Field(1200, alias="storageCapacityGiB")
    """1200 or a multiple of 2400 GiB."""
    throughput_per_tib: Literal[125, 250, 500, 1000] = derived(
        "PERSISTENT_2 MB/s per TiB, default 250; SCRATCH_2 is fixed at 200 (leave unset).", alias="throughputPerTiB"
    )
    compression: Literal["LZ4", "NONE"] = "LZ4"
    """Data compression on the file system."""
    s3: S3Link | None = None
    availability_zone: Str = derived(
        "Default: the EFA GPU pools' zone (else the first pool's, else the first AZ); must be the EFA pools' zone."
    )
    backup_retention_days: number(0, 90, "the FSx maximum") = derived(
        "0-90 days for PERSISTENT_2 (default 7); 0 for SCRATCH_2."
    )
    datasets: tuple[Dataset, ...] = items()
    """Shared directories /datasets/NAME: read-write for the owner team, read-only for the readers, invisible to the
    rest."""

    @model_validator(mode="after")
    def _kind(self) -> Fsx:
        problems = Problems()
        _duplicates(problems, "datasets", [d.name for d in self.datasets])
        if self.s3 is not None and self.deployment_type == "PERSISTENT_2":
            if self.s3.dataset is None:
                problems.add(
                    "s3.dataset",
                    "name the dataset (higgsfield:fsx.datasets) the S3 link fills: it appears at /datasets/NAME for "
                    "that dataset's teams",
                )
            elif self.s3.dataset not in {d.name for d in self.datasets}:
                problems.add(
                    "s3.dataset",
                    f"unknown dataset {self.s3.dataset!r}; datasets: "
                    f"{', '.join(d.name for d in self.datasets) or 'none'}",
                )
        kind, capacity = self.deployment_type, self.storage_capacity_gib
        if capacity != 1200 and capacity % 2400:
            problems.add(
                "storageCapacityGiB", f"{capacity} is not a valid {kind} size: use 1200 or a multiple of 2400 GiB"
            )
        throughput = self.throughput_per_tib
        if kind == "SCRATCH_2":
            if throughput is not None:
                problems.add(
                    "throughputPerTiB",
                    f"SCRATCH_2 has a fixed {SCRATCH_2_THROUGHPUT_PER_TIB} MB/s per TiB; remove the setting or use "
                    "PERSISTENT_2",
                )
            throughput = SCRATCH_2_THROUGHPUT_PER_TIB
        backups = self.backup_retention_days
        if backups is None:
            backups = 7 if kind == "PERSISTENT_2" else 0
        if kind == "SCRATCH_2" and backups:
            problems.add(
                "backupRetentionDays", f"{backups} is not allowed: 0-90 days for PERSISTENT_2, 0 for SCRATCH_2"
            )
        if self.s3 is not None and kind == "PERSISTENT_2" and self.s3.export_path != self.s3.import_path:
            problems.add(
                "s3.exportPath",
                "PERSISTENT_2 links one S3 path both ways (a data repository association); make it equal importPath",
            )
        problems.raise_any()
        self._fill(throughput_per_tib=throughput or 250, backup_retention_days=backups)
        return self

    @property
    def linked_buckets(self) -> list[str]:
        """The S3 buckets the file system is linked to (the deploy role may manage them)."""
        return [self.s3.bucket] if self.enabled and self.s3 else []


def lustre_throughput_mb_s(capacity_gib: int, per_tib: int | None) -> float:
    """Throughput in MB/s = capacity in TiB as FSx counts it (1200 GiB is 1.2 TiB) x the per-TiB
    rate; SCRATCH_2 (no rate set) has a fixed 200 MB/s per TiB."""
    return capacity_gib / 1000 * (per_tib or SCRATCH_2_THROUGHPUT_PER_TIB)
