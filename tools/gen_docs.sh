#!/usr/bin/env bash
# Regenerates the output excerpts of README.md and docs/*.md from real runs
# of the built kiln (timings masked); --check only reports what differs.
# See tools/docs_tool.py.
set -euo pipefail
cd "$(dirname "$0")/.."
exec /usr/bin/python3 tools/docs_tool.py gen "$@"
