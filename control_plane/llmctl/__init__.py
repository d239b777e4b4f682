"""``llmctl``: the admin REST API from a terminal or a CI pipeline, with documented exit codes.

Client side only: it talks HTTP to a running control plane and imports nothing of the server
but the manifest schema, which it checks files against before sending them."""
