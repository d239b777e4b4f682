# Debian's Python 3.11 with venv and its shared library (the Triton Python backend's stub embeds it):
# what the official python:3.11-slim-bookworm gives, made from the local Debian base.
FROM llm-platform-base/debian:bookworm
# Versions are those of the Debian 12 release the mirror serves (a stand-in, not a product image).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv libpython3.11 ca-certificates \
    && rm -rf /var/lib/apt/lists/*
CMD ["python3"]
