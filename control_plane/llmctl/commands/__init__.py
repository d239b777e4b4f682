"""llmctl's commands, one module per resource of the admin API."""
