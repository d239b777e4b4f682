"""Placement policy: which GPUs of which node a version runs on, decided from readings (pure)."""
