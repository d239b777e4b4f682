"""Autoscaling a deployed alias by its queue or latency: a pure decision over recent readings
(``decision``), and the loop that records every decision and carries out the ones that change
something (``scaler``)."""
