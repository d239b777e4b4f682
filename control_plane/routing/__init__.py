"""The routing table: what the inference gateway serves where, and whom it lets in."""
