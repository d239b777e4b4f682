"""GPU memory booked for deployments: placement's decisions, stored so that two placements at once
cannot double-book a GPU."""
