#!/bin/sh
# Every tutorial (docs/tutorials/*.md, docs/testing-your-code.md), run as
# written against the build BUILD: `make tutorials` and a step of `make test`.
set -u
cd "$(dirname "$0")/../.."
BUILD=$(cd "${1:-build}" && pwd)
exec /usr/bin/python3 tests/tutorials/run_tutorial.py --build "$BUILD" \
  $(ls docs/tutorials/[0-9]*.md) docs/testing-your-code.md
