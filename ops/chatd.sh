#!/usr/bin/env bash
# For scripts that already call it: chatd.sh start|stop|restart|status|logs,
# with every further argument passed on to `tandem chat` (start --front ADDR,
# logs 50 -f, ...).
# Usage: ops/chatd.sh start [--front 127.0.0.1:4180]
set -euo pipefail
tandem="$(command -v tandem || echo "$HOME/.local/bin/tandem")"
case "${1:-}" in
  start|stop|restart|status|logs) exec "$tandem" chat "$@" ;;
  *) echo "usage: chatd.sh start|stop|restart|status|logs [arguments of tandem chat …]" >&2; exit 2 ;;
esac
