"""Idempotency keys: a retried POST returns its first result and creates nothing twice."""
