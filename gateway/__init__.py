"""The inference gateway: the one public door in front of every Triton node."""
