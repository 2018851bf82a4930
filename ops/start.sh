#!/usr/bin/env bash
# Starts chatd once the engine answers /health (waits up to
# QSE_ENGINE_WAIT_S, default 300 s). Does nothing in setup mode
# (QSE_SETUP_MODE=1 or $QSE_ROOT/run/setup.mode present), with
# HOLD_RESTART=1, or with QSE_CHATD=off. Never starts the engine.
# Usage: ops/start.sh
set -euo pipefail
root="${QSE_ROOT:-$HOME/TandemLLM}"
if [ "${QSE_CHATD:-on}" = off ]; then echo "start: QSE_CHATD=off: chatd not started"; exit 0; fi
if [ "${HOLD_RESTART:-0}" = 1 ]; then echo "start: HOLD_RESTART=1: chatd not started"; exit 0; fi
if [ "${QSE_SETUP_MODE:-0}" = 1 ] || [ -e "$root/run/setup.mode" ]; then
  echo "start: the box is in setup mode: chatd not started"; exit 0
fi
tandem="$(command -v tandem || echo "$HOME/.local/bin/tandem")"
engine="${QSE_ENGINE_URL:-http://127.0.0.1:8000}"
wait_s="${QSE_ENGINE_WAIT_S:-300}"
deadline=$(( $(date +%s) + wait_s ))
until curl -fsS -m 2 "$engine/health" >/dev/null 2>&1 || curl -fsS -m 2 "$engine/v1/models" >/dev/null 2>&1; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "start: the engine at $engine did not answer within ${wait_s}s: chatd not started" >&2
    exit 1
  fi
  sleep 2
done
exec "$tandem" chat start
