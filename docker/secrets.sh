#!/usr/bin/env bash
# Generates the secrets docker/compose.yaml mounts, into docker/secrets/ (git-ignored): the
# database password (and the URL that carries it), the operator's admin token, the gateway's and
# the nodes' tokens, the key to the nodes' repository API, the gateway-backend secret.
# Existing files are kept (FORCE=1 replaces them: then `docker compose down -v`, the database
# keeps the old password otherwise). Prints the admin token's file.
set -euo pipefail
dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/secrets"
mkdir -p "$dir"
chmod 700 "$dir"
random() { python3 -c 'import secrets; print(secrets.token_urlsafe(32))'; }
write() {  # name, value
  if [ "${FORCE:-0}" = 1 ] || [ ! -s "$dir/$1" ]; then
    (umask 077; printf '%s\n' "$2" > "$dir/$1")
    # Compose mounts the file as it is; the containers run as uid 10001 (or postgres's user):
    # readable inside, while the 0700 directory keeps other host users out.
    chmod 444 "$dir/$1"
  fi
}
write postgres-password "$(random)"
write llmcp_database_url "postgresql+psycopg://llmcp:$(tr -d '\n' < "$dir/postgres-password")@postgres:5432/llmcp"
write admin-token "llmcp_$(random)"
write gateway-token "llmcp_$(random)"
write node-token "llmcp_$(random)"
write triton-repository-key "$(random)"
write gateway-secret "$(random)"
echo "$dir/admin-token"
