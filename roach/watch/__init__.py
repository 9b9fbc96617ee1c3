"""roach watch: the one-poller monitor of a user's jobs, tiers and logs."""
