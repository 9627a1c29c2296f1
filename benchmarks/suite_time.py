"""Where the test suite's time goes: pytest's --durations=0 (setup, call and teardown of every test),
summed per file, largest first, with the number of tests timed and the total.

    python benchmarks/suite_time.py                      # the whole suite, two workers
    python benchmarks/suite_time.py -n 0 tests/cli/x.py  # some files, one process

Arguments go to pytest as they are (default `-n 2`). The sums are wall-clock seconds inside each
test, so they grow with the machine's load: compare two commits in one session, one after the
other, and note `uptime` (docs/performance.md)."""

from __future__ import annotations

import collections
import re
import subprocess
import sys

LINE = re.compile(r"\s*([\d.]+)s (?:call|setup|teardown)\s+(\S+?)::(\S.*)")


def per_file(output: str) -> list[tuple[float, int, str]]:
    """(seconds, tests, file) of each file in pytest's --durations=0 report, largest first."""
    seconds: dict[str, float] = collections.defaultdict(float)
    tests: dict[str, set[str]] = collections.defaultdict(set)
    for line in output.splitlines():
        found = LINE.match(line)
        if found:
            seconds[found[2]] += float(found[1])
            tests[found[2]].add(found[3])
    return sorted(((s, len(tests[f]), f) for f, s in seconds.items()), reverse=True)


def main(argv: list[str]) -> int:
    args = argv or ["-n", "2"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=0", *args],
        capture_output=True,
        text=True,
    )
    rows = per_file(done.stdout)
    for seconds, count, name in rows:
        print(f"{seconds:8.2f} {count:5d}  {name}")
    said = done.stdout.strip().splitlines()
    print(f"{sum(r[0] for r in rows):8.2f} {sum(r[1] for r in rows):5d}  summed ({said[-1] if said else 'no output'})")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
