#!/usr/bin/env bash
# Formats every project C++ source in place with clang-format 14 (the test suite checks this).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cf=$(command -v clang-format-14 || command -v clang-format)
find "$root/include" "$root/tools" "$root/bench" "$root/tests" "$root/examples" \
  \( -name '*.hpp' -o -name '*.cpp' \) -not -path '*/tests/data/*' -print0 | xargs -0 "$cf" -i
