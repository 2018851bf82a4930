#!/usr/bin/env bash
# Installs tandem for this user, idempotently: the binaries into
# ~/.local/bin, the user units into ~/.config/systemd/user (enabled when a
# user manager answers), lingering, the watchdog's cron line (when no user
# manager runs the timer), man pages and bash completions.
# Usage: ops/install.sh [--from DIR] [--uninstall]
#   --from DIR    where the built binaries are (default: target/release)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
from="$here/target/release"
mode=install
while [ $# -gt 0 ]; do
  case "$1" in
    --from) from="$2"; shift 2 ;;
    --uninstall) mode=uninstall; shift ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "install: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
bin="$HOME/.local/bin"
units="$HOME/.config/systemd/user"
man="$HOME/.local/share/man/man1"
completions="$HOME/.local/share/bash-completion/completions"
binaries="tandem chatd egressd hostexecd triggerd connectord engine-sim tandem-shim"
cron_line='* * * * * $HOME/.local/bin/tandem watchdog >/dev/null 2>&1'

user_manager() { systemctl --user show-environment >/dev/null 2>&1; }

if [ "$mode" = uninstall ]; then
  if user_manager; then
    systemctl --user disable --now tandem.target tandem-chatd.service tandem-egress.service tandem-hostexec.service tandem-triggers.service tandem-connectors.service tandem-watchdog.timer >/dev/null 2>&1 || true
  fi
  for b in $binaries; do rm -f "$bin/$b"; done
  for u in "$here"/units/*; do rm -f "$units/$(basename "$u")"; done
  rm -f "$man"/tandem*.1 "$completions/tandem"
  if command -v crontab >/dev/null && crontab -l 2>/dev/null | grep -qF 'tandem watchdog'; then
    crontab -l 2>/dev/null | grep -vF 'tandem watchdog' | crontab -
  fi
  user_manager && systemctl --user daemon-reload || true
  echo "install: tandem removed (data in ~/.tandemllm kept)"
  exit 0
fi

for b in $binaries; do
  [ -x "$from/$b" ] || { echo "install: $from/$b is missing: cargo build --release --workspace" >&2; exit 1; }
done
mkdir -p "$bin" "$units" "$man" "$completions"
for b in $binaries; do install -m 0755 "$from/$b" "$bin/$b"; done
for u in "$here"/units/*; do install -m 0644 "$u" "$units/$(basename "$u")"; done
"$bin/tandem" man "$man" >/dev/null
"$bin/tandem" completions bash > "$completions/tandem"
mkdir -p "$HOME/.tandemllm" && chmod 700 "$HOME/.tandemllm"

if user_manager; then
  systemctl --user daemon-reload
  systemctl --user enable tandem.target tandem-chatd.service tandem-egress.service tandem-hostexec.service tandem-triggers.service tandem-connectors.service tandem-watchdog.timer >/dev/null
  echo "install: units installed and enabled (systemctl --user start tandem.target)"
  if command -v loginctl >/dev/null; then
    loginctl enable-linger "$(id -un)" 2>/dev/null || echo "install: could not turn lingering on: loginctl enable-linger $(id -un)"
  fi
else
  echo "install: no user manager answers: units copied, tandem manages the processes itself"
  if command -v crontab >/dev/null; then
    if ! crontab -l 2>/dev/null | grep -qF 'tandem watchdog'; then
      (crontab -l 2>/dev/null; echo "$cron_line") | crontab -
      echo "install: cron line added: $cron_line"
    fi
  else
    echo "install: no crontab here: add this line to your scheduler: $cron_line"
  fi
fi
echo "install: the sandbox user's network rules need root: sudo sandbox/install.sh"
echo "install: done. Next: tandem doctor; tandem chat start; tandem egress start; tandem hostexec start; tandem triggers start; tandem connectors start; tandem status"
