"""Serving statistics per deployment: the control plane reads every node's metrics on an interval
and answers, for a window, rates and latency quantiles from the differences between readings."""
