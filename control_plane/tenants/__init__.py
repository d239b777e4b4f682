"""Tenants of the inference gateway: which models they may call, at which priorities, with which
API keys."""
