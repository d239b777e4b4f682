"""Tenant limits at the gateway: requests and tokens per minute, requests in flight and tokens per
UTC day, counted in Redis so that every gateway replica enforces one limit together."""
