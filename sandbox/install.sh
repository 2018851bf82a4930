#!/usr/bin/env bash
# Sets up this machine for tandem's sandboxes, as root, idempotently:
#   1. makes the system user (default tandem-sbx: no home, no login shell)
#      when it does not exist yet, and gives it subordinate uid and gid
#      ranges (/etc/subuid, /etc/subgid; 65536 ids from 200000 up, where
#      nobody else has them) when it has none, for rootless podman;
#   2. installs sandbox/containers.conf as
#      /etc/containers/containers.conf.d/tandem.conf when podman is there
#      (runc, and the default ulimits without which containers fail
#      "error setting rlimits" here);
#   3. loads the nftables ruleset with `tandem egress rules --apply`: that
#      user's traffic may reach egressd's loopback proxy listener and nothing
#      else (counted in `sbx_dropped`, refused). The table `inet
#      tandem_egress` is replaced whole, so running this again changes nothing.
# It starts no daemon: podman's API service and tandem's daemons are yours.
# Settings ([egress] listen, sandbox_user) are read from the invoking user's
# tandem.toml and env files (SUDO_USER's home under sudo).
# Usage: sudo sandbox/install.sh [--user NAME] [--tandem PATH] [--remove]
#   --user NAME    the sandbox user (default: tandem-sbx; match [egress] sandbox_user)
#   --tandem PATH  the tandem command (default: on PATH, else ~/.local/bin/tandem,
#                  else target/release/tandem of this checkout)
#   --remove       delete the nftables table and the containers.conf drop-in
#                  (the user and its id ranges are kept)
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
    -h|--help) awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; exit 0 ;;
    *) echo "sandbox/install.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
say() { echo "sandbox/install.sh: $*"; }
conf_src="$here/sandbox/containers.conf"
conf_dir=/etc/containers/containers.conf.d
conf_dst="$conf_dir/tandem.conf"
[ "$(id -u)" = 0 ] || { say "needs root: sudo $0" >&2; exit 1; }
command -v nft >/dev/null || { say "nft is missing: apt-get install nftables" >&2; exit 1; }

if [ "$mode" = remove ]; then
  if nft list table inet tandem_egress >/dev/null 2>&1; then
    nft delete table inet tandem_egress
    say "table inet tandem_egress deleted (user $user kept)"
  else
    say "table inet tandem_egress was not loaded"
  fi
  if [ -f "$conf_dst" ] && cmp -s "$conf_src" "$conf_dst"; then
    rm -f "$conf_dst"
    say "$conf_dst deleted"
  elif [ -f "$conf_dst" ]; then
    say "$conf_dst kept: it differs from $conf_src (edited by hand?)"
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

# Subordinate ids for rootless podman: 65536 of them, from 200000 up, in a
# range nobody else in the file holds. A user that has some keeps them.
free_start() {
  [ -f "$1" ] || { echo 200000; return; }
  awk -F: -v n=65536 '
    $2 ~ /^[0-9]+$/ && $3 ~ /^[0-9]+$/ { s[NR] = $2; e[NR] = $2 + $3 }
    END {
      start = 200000
      do {
        moved = 0
        for (i in s) if (start < e[i] && s[i] < start + n) { start = e[i]; moved = 1 }
      } while (moved)
      print start
    }' "$1"
}
for kind in uid gid; do
  file="/etc/sub$kind"
  if [ -f "$file" ] && grep -q "^$user:" "$file"; then
    say "$user has sub${kind}s already ($(grep "^$user:" "$file" | head -1 | cut -d: -f2-))"
  else
    start="$(free_start "$file")"
    usermod "--add-sub${kind}s" "$start-$((start + 65535))" "$user"
    say "$user given sub${kind}s $start-$((start + 65535)) in $file"
  fi
done

# podman's settings for the sandboxes.
if command -v podman >/dev/null || [ -d /etc/containers ]; then
  if [ -f "$conf_dst" ] && cmp -s "$conf_src" "$conf_dst"; then
    say "$conf_dst is up to date"
  else
    install -D -m 0644 "$conf_src" "$conf_dst"
    say "$conf_dst installed (runc, default ulimits)"
  fi
  command -v runc >/dev/null || say "runc is missing: apt-get install runc" >&2
else
  say "podman is not installed: containers.conf skipped (apt-get install podman runc, then run this again; with docker, nothing is needed)"
fi

HOME="$home" "$tandem" egress rules --user "$user" --apply
say "done: nft list table inet tandem_egress; nft list counter inet tandem_egress sbx_dropped"
say "next: a container runtime API (podman system service --time=0 unix:///run/podman/podman.sock, or docker) and tandem sandbox build"
