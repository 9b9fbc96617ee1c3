"""The job side of roach: what runs on the cluster (docs/architecture.md)."""
