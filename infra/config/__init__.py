"""The typed stack configuration: the only package that reads `pulumi.Config` (`loading.load`).

The stack file's settings are declared once, as frozen pydantic models (`Setting` subclasses), one
module per concern -- find a setting by its name:

    base.py           the building blocks: Setting, bounded numbers, patterns, Kubernetes names
    errors.py         Problem, Problems, ConfigError: one line per problem, with the full key
    cluster.py        higgsfield:endpoint, cpuNodes, autoscaler
    gpu_pools.py      higgsfield:gpuPools (capacity, taints, the health gate)
    scheduler.py      higgsfield:scheduler (queues, priority classes, teams)
    storage.py        higgsfield:fsx (S3 link, datasets)
    observability.py  higgsfield:observability
    checkpoints.py    higgsfield:checkpoints
    delivery.py       higgsfield:delivery
    stack.py          StackConfig, the root, and the rules that span concerns
    loading.py        credentials refused, values decoded, `validate`/`parse`/`load`

Attribute names are what the components read, aliases are the stack-file keys (camelCase; the
root model's are the full keys, `higgsfield:gpuPools`), constraints and defaults live on the
fields, and what only we know (AWS catalog facts, cross-field rules) are validators on the
models. `validate()` checks everything at once and raises one `ConfigError` listing every
problem with its full key (`higgsfield:gpuPools[1].availabilityZone: ...`); it is a
`pulumi.RunError`, so `pulumi up` prints the lines without a traceback. The JSON Schema of
stack files (`schemas/stack.schema.json`) and the config reference are generated from these
models (`higgsfield schema --write`). Everything public is importable from `infra.config`.
"""

from infra.config.base import (  # noqa: F401
    NAMESPACE,
    ENVIRONMENTS,
    Setting,
    derived,
    Int,
    Bool,
    Str,
    number,
    matching,
    DNS_LABEL,
    DnsLabel,
    QUALIFIED_NAME,
    LABEL_VALUE,
    QualifiedName,
    LabelValue,
    InstanceTypeName,
    NODES_PER_GROUP,
    NodeCount,
    MaxNodes,
    GP3_MAX_GIB,
    Cidr,
)

from infra.config.errors import (  # noqa: F401
    Problem,
    key_of,
    ConfigError,
    Problems,
)

from infra.config.gpu_pools import (  # noqa: F401
    CAPACITY_TYPES,
    TAINT_EFFECTS,
    EXPANDERS,
    GPU_TAINT_KEY,
    STARTUP_TAINT_KEY,
    Taint,
    UTC_TIME,
    UtcTime,
    Duration,
    seconds_of,
    utc,
    CAPACITY_BLOCK_END_MARGIN_S,
    Capacity,
    Catalog,
    GPU_SCALE_DOWN_UNNEEDED_DEFAULT,
    HealthGate,
    GpuPool,
)

from infra.config.cluster import (  # noqa: F401
    Endpoint,
    NodeSizes,
    Autoscaler,
)

from infra.config.scheduler import (  # noqa: F401
    VOLCANO_QUEUES,
    DEFAULT_PRIORITY_CLASS,
    WORKLOADS,
    Queue,
    PriorityClassSpec,
    RESERVED_NAMESPACES,
    RESERVED_NAMESPACE_PREFIXES,
    Team,
    Scheduler,
)

from infra.config.storage import (  # noqa: F401
    FSX_DEPLOYMENT_TYPES,
    FSX_THROUGHPUT_PER_TIB,
    SCRATCH_2_THROUGHPUT_PER_TIB,
    FSX_MAX_GIB,
    S3_BUCKET,
    S3Link,
    Dataset,
    Fsx,
    lustre_throughput_mb_s,
)

from infra.config.observability import (  # noqa: F401
    LOG_RETENTION_DAYS,
    Fraction,
    Positive,
    HealthThresholds,
    Observability,
)

from infra.config.checkpoints import (  # noqa: F401
    Checkpoints,
)

from infra.config.delivery import (  # noqa: F401
    Runner,
    Delivery,
)

from infra.config.stack import (  # noqa: F401
    IMAGE_REFERENCE,
    NOT_EFA_READY,
    TagKey,
    TagValue,
    eks_regions,
    StackConfig,
)

from infra.config.loading import (  # noqa: F401
    problems_of,
    SECRET_ONLY_KEYS,
    PROVIDER_KEYS,
    UNKNOWN_SECRET,
    credential_problems,
    validate,
    parse,
    load,
)
