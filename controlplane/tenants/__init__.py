"""Tenants, their members, invitations, subnets and storage locations (the lowest app: it imports
none of the others and announces what they record through ``signals``)."""
