"""`higgsfield verify STACK`: ordered, declarative checks against a stack's live AWS account and
cluster, each with a timeout and one line (PASS, FAIL or SKIP), the evidence it saw and, on
failure, what to do (docs/verify.md says what each proves and the rights it needs).

A check is a `Spec` (what it proves, the IAM actions or RBAC it needs, the checks it builds on, its
timeout, whether it costs money) and a function of the `Context` (the stack's plan, boto3 clients,
a Kubernetes client from the user's kubeconfig) that returns an `Outcome`. The runner keeps the
order, runs each in a thread bounded by its timeout, skips a check whose prerequisites did not
pass, and never lets one check's failure stop the others. Checks that create and cost run only
with `--allow-cost` (infra/cli/verify/trial.py); one that disrupts (terminates an instance under a
job: infra/cli/verify/node_loss.py) only with `--disruptive` as well."""

from __future__ import annotations

import concurrent.futures
import difflib
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


@dataclass(frozen=True)
class Outcome:
    """What one check found: `evidence` is what it saw, `fix` what to do when it failed."""

    status: str
    evidence: str
    fix: str = ""
    timings: dict[str, Any] = field(default_factory=dict)  # measured seconds (the trial's), saved by --save


def passed(evidence: str) -> Outcome:
    return Outcome(PASS, evidence)


def failed(evidence: str, fix: str) -> Outcome:
    return Outcome(FAIL, evidence, fix)


def skipped(evidence: str, fix: str = "") -> Outcome:
    return Outcome(SKIP, evidence, fix)


@dataclass(frozen=True)
class Spec:
    """One check, declared: its id (for --only/--skip), what it proves, the rights it needs."""

    id: str
    title: str
    run: Callable[[Any], Outcome]
    needs: str  # "aws", "kube" or "aws+kube"
    rights: str  # the IAM actions and Kubernetes RBAC it uses
    timeout_s: float = 30.0
    after: tuple[str, ...] = ()  # checks that, when they run, must pass first (skipped otherwise)
    costs: bool = False  # creates and costs: runs only with --allow-cost
    disrupts: bool = False  # terminates what it did not create (an instance under its job): also --disruptive
    manual: str = ""  # not automated: the command that checks it by hand


@dataclass(frozen=True)
class Result:
    spec: Spec
    outcome: Outcome
    seconds: float


class Selection(Exception):
    """--only/--skip name a check that does not exist."""


def select(specs: Sequence[Spec], only: Iterable[str] = (), skip: Iterable[str] = ()) -> list[Spec]:
    """The checks --only (ids or prefixes like `kube.`) and --skip leave, in their order."""
    only, skip = [s for s in only if s], [s for s in skip if s]
    ids = [s.id for s in specs]
    for name in [*only, *skip]:
        if not any(i == name or i.startswith(name.rstrip(".") + ".") for i in ids):
            close = difflib.get_close_matches(name, ids, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise Selection(
                f"no check {name!r}{hint} (`higgsfield verify --list` lists every check and what it proves)"
            )

    def named(spec: Spec, names: list[str]) -> bool:
        return any(spec.id == n or spec.id.startswith(n.rstrip(".") + ".") for n in names)

    return [s for s in specs if (not only or named(s, only)) and not named(s, skip)]


CLEANUP_S = 120.0  # how long an interrupted or timed-out check is given to delete what it created


def _result(future: concurrent.futures.Future, timeout: float) -> Outcome:
    return future.result(timeout=timeout)


def _stop(ctx: Any, future: concurrent.futures.Future) -> None:
    """Ask a running check to stop (`ctx.cancel`, which the trial's loops watch) and give it
    CLEANUP_S to delete what it created: a trial left behind keeps paying for its nodes."""
    cancel = getattr(ctx, "cancel", None)
    if cancel is not None and not future.done():
        cancel.set()
        concurrent.futures.wait([future], timeout=CLEANUP_S)
        cancel.clear()


def _slow(spec: Spec) -> str:
    """What to look at when `spec` ran past its timeout: the cluster's API is reached over a network path of the
    user's (VPN, endpoint access); AWS's APIs answer a slow run when they throttle (a long history read page by
    page, botocore's retries backing off)."""
    where = {
        "kube": "the network path to the cluster's API (VPN, endpoint access)",
        "aws": "whether AWS throttled its calls (CloudTrail's ThrottlingException; a long history or listing read "
        "page by page) or the network path to AWS",
    }.get(spec.needs, "the network path to the cluster's API (VPN, endpoint access) and to AWS")
    return f"check {where}, then rerun this check with --only {spec.id}"


def _bounded(spec: Spec, ctx: Any) -> Outcome:
    """The check in a thread of its own, given up after its timeout; on Ctrl-C or the timeout it is
    asked to stop and clean up first (its client calls have their own socket timeouts)."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"verify-{spec.id}")
    future = pool.submit(spec.run, ctx)
    try:
        return _result(future, spec.timeout_s)
    except concurrent.futures.TimeoutError:
        _stop(ctx, future)
        return failed(f"no answer within {spec.timeout_s:g} s", _slow(spec))
    except KeyboardInterrupt:
        _stop(ctx, future)
        raise
    finally:
        pool.shutdown(wait=False)


def run(
    specs: Sequence[Spec],
    ctx: Any,
    *,
    allow_cost: bool = False,
    disruptive: bool = False,
    on_result: Callable[[Result], None] | None = None,
    describe_error: Callable[[Spec, Exception], Outcome] | None = None,
) -> list[Result]:
    """Every check in order; a failing one never stops the next."""
    results: list[Result] = []
    state: dict[str, str] = {}
    for spec in specs:
        start = time.monotonic()
        # a prerequisite that ran and did not pass skips this check; one left out (--only/--skip) does not
        missing = [a for a in spec.after if a in state and state[a] != PASS]
        if spec.manual:
            outcome = skipped("not automated", f"check by hand: {spec.manual}")
        elif spec.costs and not allow_cost:
            outcome = skipped("creates and costs: runs only with --allow-cost", "rerun with --allow-cost")
        elif spec.disrupts and not disruptive:
            outcome = skipped(
                "terminates an EC2 instance under its own job: runs only with --allow-cost --disruptive",
                "rerun with --allow-cost --disruptive",
            )
        elif missing:
            outcome = skipped(f"needs {', '.join(missing)} to pass first")
        else:
            try:
                outcome = _bounded(spec, ctx)
            except Exception as exc:  # noqa: BLE001 - a check's own failure is its line, never the run's
                outcome = describe_error(spec, exc) if describe_error else failed(f"{type(exc).__name__}: {exc}", "")
        state[spec.id] = outcome.status
        result = Result(spec, outcome, time.monotonic() - start)
        results.append(result)
        if on_result:
            on_result(result)
    return results


def line(result: Result) -> str:
    """One check's report: status, id, evidence; the fix indented under a failure."""
    o = result.outcome
    text = f"{o.status:<4}  {result.spec.id:<26} {o.evidence}"
    if o.fix and o.status != PASS:
        text += f"\n      {'':<26} -> {o.fix}"
    return text


def listing(specs: Sequence[Spec], width: int = 120) -> str:
    """The checks in order, what each proves and the rights it needs, wrapped within `width` columns."""
    import textwrap

    rows = [f"{'check':<26} {'needs':<9} {'timeout':>7}  what it proves"]
    for s in specs:
        flag = (
            " [--allow-cost --disruptive]"
            if s.disrupts
            else " [--allow-cost]"
            if s.costs
            else (f" [by hand: {s.manual}]" if s.manual else "")
        )
        head = f"{s.id:<26} {s.needs:<9} {s.timeout_s:>6g}s  "
        rows += textwrap.wrap(s.title + flag, width, initial_indent=head, subsequent_indent=" " * len(head))
        pad = " " * len(head)
        rows += textwrap.wrap(
            f"rights: {s.rights}", width, initial_indent=pad, subsequent_indent=pad + " " * 8, break_on_hyphens=False
        )
    return "\n".join(rows)


def listing_json(specs: Sequence[Spec]) -> list[dict]:
    return [
        {
            "id": s.id,
            "title": s.title,
            "needs": s.needs,
            "rights": s.rights,
            "timeout_s": s.timeout_s,
            "after": list(s.after),
            "costs": s.costs,
            "disrupts": s.disrupts,
            "manual": s.manual,
        }
        for s in specs
    ]


def as_json(stack: str, results: Sequence[Result]) -> dict:
    counts = {k: sum(r.outcome.status == k for r in results) for k in (PASS, FAIL, SKIP)}
    return {
        "stack": stack,
        "counts": counts,
        "checks": [
            {
                "id": r.spec.id,
                "title": r.spec.title,
                "status": r.outcome.status,
                "evidence": r.outcome.evidence,
                "fix": r.outcome.fix,
                "seconds": round(r.seconds, 2),
                **({"timings": r.outcome.timings} if r.outcome.timings else {}),
            }
            for r in results
        ],
    }
