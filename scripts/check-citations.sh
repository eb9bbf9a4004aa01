#!/bin/sh
# Fails, listing file:line, when a tracked file cites a document the repository
# does not hold; writes nothing. scripts/cite-repo.py rewrites such citations.
set -eu
cd "$(dirname "$0")/.."
exec python3 scripts/cite-repo.py --check
