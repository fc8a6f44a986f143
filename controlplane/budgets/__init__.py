"""Spend caps: budgets in tokens or money per period on an account, a key, a session or a tag;
the hard cap that refuses token-consuming requests, and the soft thresholds that alert."""
