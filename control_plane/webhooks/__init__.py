"""Webhooks: signed HTTP callbacks on promotion events, through an outbox so none is lost."""
