# Sourced by the CLI test scripts: their work folder and their one assertion, `expect`.
# A script sets `fail=1` through expect (or itself) and ends with `exit $fail`.

# work_in DIR: DIR emptied (removed and created again) and made the current folder.
work_in() {
  rm -rf "$1" && mkdir -p "$1" && cd "$1" || exit 1
}

fail=0
out=
# expect RC REGEX CMD...: CMD exits with status RC and its output (stdout and stderr together,
# left in $out) has a line matching the extended REGEX (with EXPECT_WHOLE=1: the whole output,
# newlines included, matches it); it never reports an internal error, an uncaught exception or
# an abort; and a refusal (RC 2) is exactly one line. Prints "ok: ..." or "FAIL: ..." (fail=1).
expect() {
  local want=$1 re=$2 rc
  shift 2
  out=$("$@" 2>&1)
  rc=$?
  local grep_flags=-Eq
  [ "${EXPECT_WHOLE:-0}" = 1 ] && grep_flags=-Ezq
  if [ "$rc" -ne "$want" ] || ! printf '%s' "$out" | grep "$grep_flags" -- "$re" ||
     printf '%s' "$out" | grep -Eq "internal error|terminate called|Aborted" ||
     { [ "$want" -eq 2 ] && [ "$(printf '%s\n' "$out" | wc -l)" -ne 1 ]; }; then
    fail=1
    echo "FAIL: $* -> rc $rc (want $want), output: $out"
  else
    echo "ok: $* -> $rc"
  fi
}

# expect_failure REGEX CMD...: CMD exits non-zero and its output (stdout and stderr together)
# has a line matching the extended REGEX, with no internal error, uncaught exception or abort.
# For runs under mpirun, whose own lines surround the one-line refusal `expect` would demand.
expect_failure() {
  local re=$1 rc
  shift
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" -ne 0 ] && printf '%s' "$out" | grep -Eq -- "$re" &&
     ! printf '%s' "$out" | grep -Eq "internal error|terminate called|Aborted"; then
    echo "ok: $* -> $rc"
  else
    fail=1
    echo "FAIL: $* -> rc $rc (want non-zero), output: $out"
  fi
}
