"""LoRA adapters: registered under a model version, loaded on deployments at run time."""
