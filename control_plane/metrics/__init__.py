"""The control plane's Prometheus metrics: what it did (counters and histograms, updated where it
happens) and what it holds (gauges read from the database and the GPU monitor at each scrape)."""
