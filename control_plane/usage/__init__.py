"""Usage per tenant, model and hour, as the gateways report it."""
