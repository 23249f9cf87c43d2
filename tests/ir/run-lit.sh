#!/usr/bin/env bash
# A tiny lit: runs the `// RUN:` lines of one test file, each through `bash -o pipefail`.
# Usage: run-lit.sh TEST_FILE, with TPULLM_OPT, FILECHECK and NOT naming the tools in the
# environment. Substitutions: %s = the test file, %S = its directory, %t = a scratch path (one
# per test, removed afterwards), %% = a literal %. A RUN line ending in '\' continues on the next
# RUN line. The test passes when every RUN line exits 0; a file without RUN lines fails.
set -euo pipefail
test_file=$1
[ -f "$test_file" ] || { echo "run-lit: no such test file: $test_file" >&2; exit 2; }
for var in TPULLM_OPT FILECHECK NOT; do
  [ -x "${!var:-}" ] || { echo "run-lit: \$$var must name an executable" >&2; exit 2; }
done

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/bin"
ln -s "$TPULLM_OPT" "$scratch/bin/tpullm-opt"
ln -s "$FILECHECK" "$scratch/bin/FileCheck"
ln -s "$NOT" "$scratch/bin/not"
export PATH="$scratch/bin:$PATH"

test_dir=$(cd "$(dirname "$test_file")" && pwd)
test_path="$test_dir/$(basename "$test_file")"

commands=()
pending=""
while IFS= read -r line; do
  case "$line" in
    *"// RUN:"*) ;;
    *) continue ;;
  esac
  cmd=${line#*// RUN:}
  if [[ "$cmd" == *\\ ]]; then
    pending+="${cmd%\\} "
    continue
  fi
  commands+=("$pending$cmd")
  pending=""
done < "$test_path"
[ -z "$pending" ] || { echo "run-lit: $test_path: last RUN line ends in '\\'" >&2; exit 1; }
[ ${#commands[@]} -gt 0 ] || { echo "run-lit: $test_path has no RUN lines" >&2; exit 1; }

n=0
for cmd in "${commands[@]}"; do
  n=$((n + 1))
  cmd=${cmd//%%/$'\x01'}
  cmd=${cmd//%s/$test_path}
  cmd=${cmd//%S/$test_dir}
  cmd=${cmd//%t/$scratch/test.tmp}
  cmd=${cmd//$'\x01'/%}
  echo "RUN[$n]: $cmd"
  if ! bash -o pipefail -c "$cmd"; then
    echo "run-lit: FAILED: RUN line $n of $test_path" >&2
    exit 1
  fi
done
echo "run-lit: PASSED ($n RUN lines)"
