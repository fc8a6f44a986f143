"""The Loopwright control plane: a Django project whose apps hold tenants, IAM, sessions and billing."""
