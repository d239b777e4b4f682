"""Who may call the control plane (API tokens and scopes) and what they changed (the audit log)."""
