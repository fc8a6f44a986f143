"""Regression tests of the security review: each attack tried against a live stack started as
``make serve`` starts it."""
