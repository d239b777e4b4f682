"""Which node serves a request: the routing table, node health and the choice between nodes."""
