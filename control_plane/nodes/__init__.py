"""Triton nodes the control plane drives: their URLs, labels and repository-API key reference."""
