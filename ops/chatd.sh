#!/usr/bin/env bash
# For scripts that already call it: chatd.sh start|stop|restart|status.
# Usage: ops/chatd.sh start
set -euo pipefail
tandem="$(command -v tandem || echo "$HOME/.local/bin/tandem")"
case "${1:-}" in
  start|stop|restart|status) exec "$tandem" chat "$1" ;;
  *) echo "usage: chatd.sh start|stop|restart|status" >&2; exit 2 ;;
esac
