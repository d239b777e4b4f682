"""GPU inventory: what each node's GPUs hold right now, from NVML, Triton's metrics or a file."""
