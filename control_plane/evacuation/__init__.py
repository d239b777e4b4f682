"""Moving engines off GPUs that report faults, to healthy capacity on another node."""
