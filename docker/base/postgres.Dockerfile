# A stand-in for the official postgres image where none can be pulled: Debian's PostgreSQL 15, set up
# from the same variables (POSTGRES_USER, POSTGRES_PASSWORD or POSTGRES_PASSWORD_FILE, POSTGRES_DB).
FROM llm-platform-base/debian:bookworm
# The official image's uid and gid (999), made before the package would pick its own, so compose
# runs either image as user 999. Package versions: the Debian 12 release the mirror serves.
# hadolint ignore=DL3008
RUN groupadd --system --gid 999 postgres \
    && useradd --system --uid 999 --gid 999 --home-dir /var/lib/postgresql --shell /bin/bash postgres \
    && apt-get update \
    && apt-get install -y --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
USER 999:999
EXPOSE 5432
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint.sh"]
