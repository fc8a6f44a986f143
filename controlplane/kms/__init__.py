"""Customer keys per tenant and envelope encryption of stored blobs (checkpoints, weights)."""
