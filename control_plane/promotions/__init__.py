"""Promotions: a version (registered from a manifest, or already there) brought to an alias
through a candidate deployment, gates and the zero-downtime swap, rolled back on any failure."""
