"""Named clusters: Cluster as data, the user's clusters.toml and get_cluster, routing a record to its alias, guardrails, discovery."""
