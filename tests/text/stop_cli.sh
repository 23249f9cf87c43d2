#!/usr/bin/env bash
# --stop of `tpullm run` and `tpullm chat` (docs/cli.md): the answer of a greedy run is taken,
# a stop string is cut from its middle (two whole UTF-8 characters), and the same run with
# --stop=THAT must print exactly the answer up to the first occurrence of the stop string and
# report "stopped: stop string". The weights are random, so the answer is read, not pinned.
# Usage: stop_cli.sh TPULLM BUNDLE WORKDIR run|chat
set -euo pipefail
tpullm=$1 bundle=$2 work=$3 mode=$4
export LC_ALL=C # byte-wise strings: characters are found from the bytes below
mkdir -p "$work"

answer() { # extra options... -> stdout to $work/out.txt, stderr to $work/err.txt
  if [ "$mode" = run ]; then
    "$tpullm" run "$bundle" --prompt "Hello, world" -n 12 "$@" >"$work/out.txt" 2>"$work/err.txt"
  else
    printf 'Hi there\n' | "$tpullm" chat "$bundle" -n 12 "$@" >"$work/out.txt" 2>"$work/err.txt"
  fi
}
read_file() { # the exact bytes of a file (trailing newlines kept)
  local s
  s=$(cat "$1"; printf x)
  printf '%s' "${s%x}"
}

answer
full=$(read_file "$work/out.txt"; printf x)
full=${full%x}
full=${full%$'\n'} # the newline the command prints after the answer
grep -q "token budget" "$work/err.txt" || { echo "the full answer did not run to its budget"; cat "$work/err.txt"; exit 1; }

# Two whole characters from the middle of the answer: a start byte that is not a UTF-8
# continuation byte (0x80-0xBF), then up to the second start byte after it.
mapfile -t bytes < <(od -An -v -tu1 "$work/out.txt" | tr -s ' ' '\n' | grep -v '^$')
n=${#full}
[ "$n" -ge 4 ] || { echo "answer too short to cut a stop string from: '$full'"; exit 1; }
cont() { [ "${bytes[$1]}" -ge 128 ] && [ "${bytes[$1]}" -le 191 ]; }
start=$((n / 2))
while [ "$start" -lt "$n" ] && cont "$start"; do start=$((start + 1)); done
end=$((start + 1)) chars=1
while [ "$end" -lt "$n" ]; do
  if ! cont "$end"; then
    [ "$chars" -eq 2 ] && break
    chars=$((chars + 1))
  fi
  end=$((end + 1))
done
[ "$start" -lt "$n" ] || { echo "no character starts in the second half of '$full'"; exit 1; }
stop=${full:start:end-start}
expected=${full%%"$stop"*} # up to the first occurrence

answer "--stop=$stop"
got=$(read_file "$work/out.txt"; printf x)
got=${got%x}
if [ "$got" != "$expected"$'\n' ]; then
  echo "with --stop='$stop' the answer is:"; printf '%s' "$got" | od -c | head -20
  echo "expected the answer before the stop string:"; printf '%s\n' "$expected" | od -c | head -20
  echo "(the full answer: '$full')"
  exit 1
fi
grep -q "stop string" "$work/err.txt" || { echo "the stop reason is not 'stop string':"; cat "$work/err.txt"; exit 1; }
echo "ok: --stop='$stop' ended '$full' as '$expected'"
