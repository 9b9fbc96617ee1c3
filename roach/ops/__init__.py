"""Operations over a user's jobs and clusters: plan, clean, pending reasons, rebalancing across tiers."""
