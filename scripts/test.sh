#!/usr/bin/env bash
# Quick start, step 2: the whole test suite.
#   1. Release build: every CTest test (unit, IR FileCheck, kernels on the best and the portable
#      ISA path, frontend, install + consumer, formatting).
#   2. ASan+UBSan build (build-asan/): the same tests except the install and format checks and the
#      MPI runs (tests/mpi: Release only, under mpirun; Open MPI's own allocations would read as
#      leaks; the pipeline logic runs there with threads as ranks) and the
#      kernel numerics suites (tests/kernels: Release only; under the sanitizers every kernel the
#      CPU dispatches to still runs through the compiled-model, bundle and CLI verify tests). The
#      library and the tools are instrumented in full; the test programs with ASan's heap checks
#      only (CMakeLists.txt, TPULLM_TEST_CODE); the quantized test checkpoints and their goldens
#      are the Release tree's, made minutes before from the same sources (tests/cli).
# Both builds go through ccache (scripts/build.sh): a rebuild of an unchanged tree, in this
# folder or a fresh clone elsewhere on the same machine, takes minutes.
# Exits non-zero on any failure. TPULLM_TEST_SKIP_SANITIZE=1 skips step 2 (local iteration only).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)
"$root/scripts/install-deps.sh" >/dev/null

# After a failure, the output of each failed test again (its last 60 lines), so that the end
# of the log, which is what a CI summary keeps, says why and not only which.
failed_output() {
  local dir=$1/Testing/Temporary name
  [ -f "$dir/LastTestsFailed.log" ] || return 0
  while IFS= read -r name; do
    name=${name#*:}
    echo "---- output of $name"
    awk -v t="$name" 'index($0, "Test: " t) && substr($0, length($0) - length(t) + 1) == t {on = 1; next}
      on && /^<end of output>$/ {exit} on {print}' "$dir/LastTest.log" | tail -n 60
  done < "$dir/LastTestsFailed.log"
  return 1
}

echo "== Release build and tests =="
"$root/scripts/build.sh" "$root/build"
ctest --test-dir "$root/build" -j "$jobs" --output-on-failure || failed_output "$root/build"

if [ "${TPULLM_TEST_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== ASan+UBSan build and tests =="
  "$root/scripts/build.sh" "$root/build-asan" -DTPULLM_SANITIZE=ON -DTPULLM_BUILD_BENCH=OFF \
    -DTPULLM_BUILD_KERNEL_TESTS=OFF -DTPULLM_WITH_MPI=OFF \
    -DTPULLM_QUANT_MODELS_FROM="$root/build/tests/cli/quant-models" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$root/build-asan" -j "$jobs" --output-on-failure -E '^install:|^format:' ||
    failed_output "$root/build-asan"
fi
echo "== all tests passed =="
