"""The Higgsfield policy pack (Pulumi CrossGuard). Policies land with the guardrails issue."""
