"""Deployments: which version of a model alias runs on which Triton node, and making it so."""
