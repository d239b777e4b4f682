"""The one place that decides how an alias moves: the routes, the demo deployment, the CLI (through
the routes), promotions and rollbacks all call it, so no path can move a deployed alias without a
zero-downtime swap."""
