# A stand-in for the official redis image where none can be pulled: Debian's Redis 7, in memory only.
FROM llm-platform-base/debian:bookworm
# The official image's uid and gid (999), as for postgres. Package versions: Debian 12's.
# hadolint ignore=DL3008
RUN groupadd --system --gid 999 redis \
    && useradd --system --uid 999 --gid 999 --home-dir /var/lib/redis --shell /usr/sbin/nologin redis \
    && apt-get update \
    && apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/*
USER 999:999
EXPOSE 6379
CMD ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--save", "", "--appendonly", "no"]
