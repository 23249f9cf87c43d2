# Cases the multi-process CLI tests share (sourced by pipeline_cli.sh and tensor_cli.sh, after
# tests/cli/expect.sh, which keeps `fail`).

# same_chat QUESTION ONE_BUNDLE RUN...: `tpullm chat` of RUN (the command line before its
# options, e.g. mpirun -n 2 tpullm chat X.bundle --parallel pipeline) answers QUESTION as
# `tpullm chat ONE_BUNDLE` does, both with status 0; uses $tpullm.
same_chat() {
  local question=$1 one=$2 rc1 rc2 a b
  shift 2
  a=$(printf '%s\n' "$question" | "$tpullm" chat "$one" -n 16 --temperature 0 --threads 1 \
    --no-stats 2>&1)
  rc1=$?
  b=$(printf '%s\n' "$question" | "$@" -n 16 --temperature 0 --threads 1 --no-stats 2>&1)
  rc2=$?
  if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ -n "$a" ] && [ "$b" = "$a" ]; then
    echo "ok: chat through '$*' answers as one process"
  else
    fail=1
    echo "FAIL: chat through '$*' (status $rc2): '$b', one process (status $rc1): '$a'"
  fi
}

# kill_a_rank NP PATTERN CMD...: starts CMD (an mpirun of NP ranks whose command lines match
# PATTERN), kills rank 1 with SIGKILL once all are running, and checks that mpirun ends
# non-zero within 60 s and no rank is left 10 s later (the output in killed.out).
kill_a_rank() {
  local np=$1 pattern=$2 launcher victim="" rc left t0
  shift 2
  "$@" >killed.out 2>&1 &
  launcher=$!
  for _ in $(seq 1 200); do # up to 20 s for the ranks to start
    mapfile -t pids < <(pgrep -f "$pattern" | grep -v "^$launcher$")
    [ ${#pids[@]} -ge "$np" ] && { victim=${pids[1]}; break; }
    sleep 0.1
  done
  if [ -z "$victim" ]; then
    fail=1
    echo "FAIL: the $np ranks did not start"
    kill "$launcher" 2>/dev/null
    return
  fi
  sleep 1
  t0=$(date +%s)
  kill -9 "$victim"
  for _ in $(seq 1 600); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$launcher" 2>/dev/null; then
    fail=1
    echo "FAIL: mpirun still running 60 s after a rank was killed"
    kill -9 "$launcher"
  fi
  wait "$launcher"
  rc=$?
  # mpirun may return while the ranks it killed are still being torn down: give them 10 s.
  for _ in $(seq 1 100); do
    left=$(pgrep -f "$pattern" | wc -l)
    [ "$left" -eq 0 ] && break
    sleep 0.1
  done
  if [ $rc -ne 0 ] && [ "$left" -eq 0 ]; then
    echo "ok: a killed rank ended '$pattern' in $(($(date +%s) - t0)) s, mpirun status $rc"
  else
    fail=1
    echo "FAIL: after the kill: mpirun status $rc, $left ranks left; output: $(tail -5 killed.out)"
    pkill -9 -f "$pattern"
  fi
}
