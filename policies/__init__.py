"""The Higgsfield policy pack (Pulumi CrossGuard): `rules.POLICIES`. The pack object is built
only in `__main__.py`, which Pulumi runs for `pulumi preview --policy-pack policies`."""
