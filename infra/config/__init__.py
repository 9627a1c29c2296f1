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
    DNS_LABEL,
    ENVIRONMENTS,
    GP3_MAX_GIB,
    LABEL_VALUE,
    NAMESPACE,
    NODES_PER_GROUP,
    QUALIFIED_NAME,
    SYSTEM_TAINT_EFFECT,
    SYSTEM_TAINT_KEY,
    Bool,
    Cidr,
    DnsLabel,
    InstanceTypeName,
    Int,
    LabelValue,
    MaxNodes,
    NodeCount,
    QualifiedName,
    Setting,
    Str,
    derived,
    matching,
    number,
)
from infra.config.checkpoints import (  # noqa: F401
    Checkpoints,
)
from infra.config.cluster import (  # noqa: F401
    Autoscaler,
    Endpoint,
    NodeSizes,
    TeamCpuNodes,
)
from infra.config.delivery import (  # noqa: F401
    Delivery,
    Runner,
)
from infra.config.errors import (  # noqa: F401
    ConfigError,
    Problem,
    Problems,
    file_error,
    key_of,
)
from infra.config.gpu_pools import (  # noqa: F401
    CAPACITY_BLOCK_END_MARGIN_S,
    CAPACITY_TYPES,
    EXPANDERS,
    GPU_SCALE_DOWN_UNNEEDED_DEFAULT,
    GPU_TAINT_KEY,
    STARTUP_TAINT_KEY,
    TAINT_EFFECTS,
    UTC_TIME,
    Capacity,
    Catalog,
    Duration,
    GpuPool,
    HealthGate,
    Taint,
    UtcTime,
    seconds_of,
    utc,
)
from infra.config.job import (  # noqa: F401
    FRAMEWORKS,
    DataMount,
    Elastic,
    JobFile,
    JobResources,
    load_job,
)
from infra.config.loading import (  # noqa: F401
    PROVIDER_KEYS,
    SECRET_ONLY_KEYS,
    UNKNOWN_SECRET,
    credential_problems,
    load,
    parse,
    problems_of,
    validate,
)
from infra.config.observability import (  # noqa: F401
    LOG_RETENTION_DAYS,
    Fraction,
    HealthThresholds,
    Observability,
    Positive,
)
from infra.config.scheduler import (  # noqa: F401
    CPU_SERVICE_PRIORITY_CLASS,
    DEFAULT_PRIORITY_CLASS,
    RESERVED_NAMESPACE_PREFIXES,
    RESERVED_NAMESPACES,
    VOLCANO_QUEUES,
    WORKLOADS,
    PriorityClassSpec,
    Queue,
    Scheduler,
    Team,
)
from infra.config.stack import (  # noqa: F401
    IMAGE_REFERENCE,
    NOT_EFA_READY,
    StackConfig,
    TagKey,
    TagValue,
    eks_regions,
)
from infra.config.storage import (  # noqa: F401
    FSX_DEPLOYMENT_TYPES,
    FSX_MAX_GIB,
    FSX_THROUGHPUT_PER_TIB,
    S3_BUCKET,
    SCRATCH_2_THROUGHPUT_PER_TIB,
    Dataset,
    Fsx,
    S3Link,
    lustre_throughput_mb_s,
)
