#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (-fsanitize=fuzzer,address,undefined) and runs each for
# N seconds. Usage: scripts/fuzz.sh [SECONDS=60] [TARGET...]   (targets: safetensors hf_config tir gguf; bundle needs
# the kernel library to build with clang, which it does not yet: GCC-only target attributes)
# The committed seed corpus (tests/fuzz/corpus/<target>/) is copied into a working corpus under
# the build dir, so new inputs never land in the source tree. Crashes are written to
# $BUILD/fuzz-artifacts/<target>/; copy a reproducer into tests/fuzz/corpus/<target>/ once fixed
# so the replay test (the CTest test tpullm-fuzz-replay-<target>, with any compiler) keeps it fixed.
# Environment: FUZZ_BUILD_DIR (default build-fuzz), CXX (default clang++-14 or clang++),
# FUZZ_JOBS (parallel fuzzing jobs per target, default 1).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(safetensors hf_config tir gguf)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
cxx=${CXX:-$(command -v clang++-14 || command -v clang++ || true)}
[ -n "$cxx" ] || { echo "fuzz.sh: no clang++ found (apt-get install clang-14)" >&2; exit 1; }
case "$("$cxx" --version)" in *clang*) ;; *) echo "fuzz.sh: $cxx is not clang" >&2; exit 1 ;; esac

gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER="$cxx" -DTPULLM_BUILD_TOOLS=OFF -DTPULLM_BUILD_BENCH=OFF \
    -DTPULLM_FUZZ_INSTRUMENT=ON
fi
for t in "${targets[@]}"; do
  cmake --build "$build" --target "tpullm-fuzz-$t" -j "$(nproc)"
done

status=0
for t in "${targets[@]}"; do
  work="$build/fuzz-corpus/$t"
  art="$build/fuzz-artifacts/$t"
  mkdir -p "$work" "$art"
  cp -n "$root/tests/fuzz/corpus/$t/"* "$work/" 2>/dev/null || true
  dict=()
  [ -f "$root/tests/fuzz/$t.dict" ] && dict=(-dict="$root/tests/fuzz/$t.dict")
  maxlen=8192
  [ "$t" = bundle ] && maxlen=1048576 # whole bundle files (the seeds are tiny models, ~0.6 MB)
  echo "== fuzzing $t for ${secs}s (corpus $work)"
  par=()
  [ "${FUZZ_JOBS:-1}" -gt 1 ] && par=(-jobs="$FUZZ_JOBS" -workers="$FUZZ_JOBS")
  # Run inside the artifacts dir: libFuzzer writes fuzz-N.log files to the working directory.
  if ! (cd "$art" && "$build/tests/fuzz/tpullm-fuzz-$t" "$work" "${dict[@]}" \
      -max_total_time="$secs" -max_len="$maxlen" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 "${par[@]}" -artifact_prefix="$art/"); then
    echo "== $t: FAILURE, reproducer(s) in $art" >&2
    status=1
  fi
done
exit $status
