"""The program evaluated without a cloud: `evaluate.record` runs infra/__main__.py under Pulumi's
mocks into a Plan, and the other modules compute from it (or from the stack's config) what the
commands report: checks, diffs, cost, timelines, manifests, example jobs."""
