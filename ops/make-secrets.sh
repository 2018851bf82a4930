#!/usr/bin/env bash
# Writes the secrets file ($QSE_SECRETS, default ~/TandemLLM/state/secrets.env)
# with a forward key and an admin token when they are missing. Never
# overwrites a value that is there. The file is 0600, its folder 0700.
# Usage: ops/make-secrets.sh
set -euo pipefail
file="${QSE_SECRETS:-$HOME/TandemLLM/state/secrets.env}"
dir="$(dirname "$file")"
umask 077
mkdir -p "$dir"
chmod 700 "$dir"
[ -e "$file" ] || : > "$file"
chmod 600 "$file"

random_hex() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }

added=""
for name in QSE_FORWARD_KEY QSE_ADMIN_TOKEN; do
  if ! grep -qE "^(export +)?${name}=.+" "$file"; then
    printf '%s=%s\n' "$name" "$(random_hex)" >> "$file"
    added="$added $name"
  fi
done
if [ -n "$added" ]; then
  echo "make-secrets: wrote$added to $file (0600)"
else
  echo "make-secrets: $file already holds QSE_FORWARD_KEY and QSE_ADMIN_TOKEN; nothing changed"
fi
