#!/usr/bin/env bash
# Sets up the sandbox user's network rules, as root, idempotently:
#   1. makes the system user (default tandem-sbx: no home, no login shell)
#      when it does not exist yet;
#   2. loads the nftables ruleset with `tandem egress rules --apply`: that
#      user's traffic may reach egressd's loopback proxy listener and nothing
#      else (counted in `sbx_dropped`, refused). The table `inet
#      tandem_egress` is replaced whole, so running this again changes nothing.
# Settings ([egress] listen, sandbox_user) are read from the invoking user's
# tandem.toml and env files (SUDO_USER's home under sudo).
# Usage: sudo sandbox/install.sh [--user NAME] [--tandem PATH] [--remove]
#   --user NAME    the sandbox user (default: tandem-sbx; match [egress] sandbox_user)
#   --tandem PATH  the tandem command (default: on PATH, else ~/.local/bin/tandem,
#                  else target/release/tandem of this checkout)
#   --remove       delete the nftables table (the user is kept)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
user="tandem-sbx"
tandem=""
mode=install
while [ $# -gt 0 ]; do
  case "$1" in
    --user) user="${2:?--user needs a name}"; shift 2 ;;
    --tandem) tandem="${2:?--tandem needs a path}"; shift 2 ;;
    --remove) mode=remove; shift ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "sandbox/install.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
say() { echo "sandbox/install.sh: $*"; }
[ "$(id -u)" = 0 ] || { say "needs root: sudo $0" >&2; exit 1; }
command -v nft >/dev/null || { say "nft is missing: apt-get install nftables" >&2; exit 1; }

if [ "$mode" = remove ]; then
  if nft list table inet tandem_egress >/dev/null 2>&1; then
    nft delete table inet tandem_egress
    say "table inet tandem_egress deleted (user $user kept)"
  else
    say "table inet tandem_egress was not loaded"
  fi
  exit 0
fi

# The operator's home: their tandem.toml names the proxy port.
home="$HOME"
if [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ]; then
  home="$(getent passwd "$SUDO_USER" | cut -d: -f6)"
fi
if [ -z "$tandem" ]; then
  for candidate in "$(command -v tandem || true)" "$home/.local/bin/tandem" "$here/target/release/tandem"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ]; then tandem="$candidate"; break; fi
  done
fi
if [ -z "$tandem" ] || [ ! -x "$tandem" ]; then
  say "no tandem command found: ops/install.sh, or --tandem PATH" >&2
  exit 1
fi

if getent passwd "$user" >/dev/null; then
  say "user $user exists (uid $(id -u "$user"))"
else
  shell=/usr/sbin/nologin
  [ -x "$shell" ] || shell=/sbin/nologin
  [ -x "$shell" ] || shell=/bin/false
  useradd --system --no-create-home --home-dir /nonexistent --shell "$shell" "$user"
  say "user $user made (uid $(id -u "$user"), no home, no login)"
fi

HOME="$home" "$tandem" egress rules --user "$user" --apply
say "done: nft list table inet tandem_egress; nft list counter inet tandem_egress sbx_dropped"
