"""Long-running actions as resources: created by a 202, run in the background, polled."""
