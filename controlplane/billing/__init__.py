"""Usage pushed to Stripe Billing meters: one meter event per tenant, meter and closed window,
sent exactly once, and reconciled against local usage."""
