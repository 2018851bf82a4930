#!/usr/bin/env bash
# Stops chatd (open runs end interrupted, text kept). Never stops the engine.
# Usage: ops/stop.sh
set -euo pipefail
tandem="$(command -v tandem || echo "$HOME/.local/bin/tandem")"
exec "$tandem" chat stop
