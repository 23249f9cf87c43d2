#!/usr/bin/env bash
# run / chat / serve / bench on a checkpoint folder or a GGUF file (docs/cli.md "Running a
# checkpoint or a GGUF file"): compiled once into the bundle cache by compile's own code (the
# cached file is byte-identical to `tpullm compile` with the same shapes), reused on the next
# call, compiled again when a file of the source changes; --no-cache leaves nothing behind; a path
# that is none of the three is one line saying what was expected; a cache that cannot be created
# or written (a full disk) is one line and leaves no partial file. XDG_CACHE_HOME and TMPDIR point
# into WORK_DIR: nothing is written under the real home.
# Usage: run_source.sh TPULLM MODELS_DIR GGUF_MODELS_DIR WORK_DIR
set -u
tpullm=$1 models=$2 ggufs=$3 work=$4
. "$(dirname "$0")/expect.sh"
EXPECT_WHOLE=1 # its patterns span lines
work_in "$work"
mkdir -p tmp
export XDG_CACHE_HOME=$work/cache TMPDIR=$work/tmp
cache=$XDG_CACHE_HOME/tpullm/bundles
bundles() { find "$cache" -maxdepth 1 -name '*.bundle' 2>/dev/null | wc -l; }
leftovers() { find "$cache" "$TMPDIR" -mindepth 1 \( -name '.*' -o -name 'tpullm-*' \) 2>/dev/null; }

# A copy of a small checkpoint (this test changes one of its files later).
cp -r "$models/qwen2-tied-bias" model

# First run: compiled into the cache with the defaults (the model's 4096 positions), progress on
# stderr, then generated from.
expect 0 "compiling model for this machine \(mode f32, seq_length 4096, max_input_length 256\) into $cache/model-[0-9a-f]{16}\.bundle.*compiled [0-9]+ functions.*stopped: token budget after 6 tokens" \
  "$tpullm" run model --prompt-ids 17,300,42,7 -n 6
first_ids=$(printf '%s\n' "$out" | grep -E '^[0-9]+(,[0-9]+)+$')
cached=$(find "$cache" -maxdepth 1 -name 'model-*.bundle')
[ "$(bundles)" -eq 1 ] || { fail=1; echo "FAIL: $(bundles) bundles in the cache, want 1"; }
stamp=$(stat -c %Y.%i "$cached") # a rewrite renames a new file over it: another inode
# Second run: the cached bundle, not compiled again (same file, same mtime, same ids).
expect 0 "using the cached bundle $cached \(compiled from model/\)" \
  "$tpullm" run model/ --prompt-ids 17,300,42,7 -n 6
printf '%s' "$out" | grep -q "compiling" && { fail=1; echo "FAIL: the second run compiled"; }
[ "$(stat -c %Y.%i "$cached")" = "$stamp" ] || { fail=1; echo "FAIL: the cached bundle was rewritten"; }
[ "$(printf '%s\n' "$out" | grep -E '^[0-9]+(,[0-9]+)+$')" = "$first_ids" ] ||
  { fail=1; echo "FAIL: the cached bundle generates other ids"; }
# The same code path as tpullm compile: with the same shapes, the same bytes.
expect 0 "wrote compiled.bundle" "$tpullm" compile model -o compiled.bundle --seq-length 4096 \
  --max-input-length 256
cmp -s compiled.bundle "$cached" || { fail=1; echo "FAIL: the cached bundle differs from compile's"; }
# -q prints only the ids (no cache message); the cached bundle itself runs as a bundle.
expect 0 "^$first_ids$" "$tpullm" run model --prompt-ids 17,300,42,7 -n 6 -q
expect 0 "stopped: token budget" "$tpullm" run "$cached" --prompt-ids 17,300,42,7 -n 6

# Another --seq-length or --mode is another bundle; a changed file of the source compiles again.
expect 0 "seq_length 128, max_input_length 64\) into .*stopped" \
  "$tpullm" run model --seq-length 128 --prompt-ids 1,2 -n 2
expect 0 "mode bf16, seq_length 128.*stopped" \
  "$tpullm" run model --seq-length 128 --mode bf16 --prompt-ids 1,2 -n 2
[ "$(bundles)" -eq 3 ] || { fail=1; echo "FAIL: $(bundles) bundles in the cache, want 3"; }
printf ' ' >> model/config.json
expect 0 "compiling model .*seq_length 128" "$tpullm" run model --seq-length 128 --prompt-ids 1,2 -n 2
[ "$(bundles)" -eq 4 ] || { fail=1; echo "FAIL: $(bundles) bundles in the cache, want 4"; }

# --no-cache: compiled into TMPDIR, removed once opened; the cache untouched.
expect 0 "into $TMPDIR/tpullm-run-.*\.bundle.*stopped: token budget after 2 tokens" \
  "$tpullm" run model --no-cache --seq-length 64 --prompt-ids 1,2 -n 2
[ "$(bundles)" -eq 4 ] || { fail=1; echo "FAIL: --no-cache wrote into the cache"; }
[ -z "$(leftovers)" ] || { fail=1; echo "FAIL: left behind: $(leftovers)"; }
# Options of a source are refused for a bundle, by name.
expect 2 "^tpullm run: invalid input: --no-cache: applies only when BUNDLE is a checkpoint folder or a GGUF file" \
  "$tpullm" run "$cached" --no-cache --prompt-ids 1
expect 2 "^tpullm bench: invalid input: --seq-length: applies only when BUNDLE" \
  "$tpullm" bench "$cached" --seq-length 64
expect 2 "^tpullm chat: invalid input: --seq-length: must be > 0, got 0" \
  "$tpullm" chat model --seq-length 0

# Paths that are none of the three: one line saying what was expected.
mkdir empty
expect 2 "^tpullm run: invalid input: empty: is a directory without config.json or a .gguf file; expected a bundle file \(from tpullm compile\), a checkpoint folder \(config.json \+ safetensors\), a .gguf file or a folder holding one$" \
  "$tpullm" run empty --prompt-ids 1
printf 'hello\n' > notes.gguf
expect 2 "^tpullm chat: invalid input: notes.gguf: is not a tpullm bundle, a checkpoint folder or a GGUF file; expected a bundle file" \
  "$tpullm" chat notes.gguf
expect 2 "^tpullm serve: invalid input: model/config.json: is not a tpullm bundle" \
  "$tpullm" serve model/config.json --port 0
# A GGUF is passed to compile's loader as it is (a truncated one: its parse error, one line).
printf 'GGUF\003\000\000\000' > tiny.gguf
expect 2 "^tpullm run: invalid input: .*tiny.gguf" "$tpullm" run tiny.gguf --prompt-ids 1
mkdir two && cp "$ggufs/llama-q4_0/model.gguf" two/a.gguf && cp two/a.gguf two/b.gguf
expect 2 "^tpullm run: invalid input: two: has no config.json and 2 GGUF files; name one of them$" \
  "$tpullm" run two --prompt-ids 1

# A GGUF file (llama.cpp's Q8_0, tied embeddings), and a folder holding one: the same content, so
# the same key (the folder's name names the file); byte-identical to tpullm compile.
cp "$ggufs/qwen2-q8_0/model.gguf" q8.gguf
expect 0 "compiling q8.gguf for this machine \(mode f32, act-quant dynamic, seq_length [0-9]+, max_input_length [0-9]+\) into $cache/q8-[0-9a-f]{16}\.bundle.*stopped: token budget after 4 tokens" \
  "$tpullm" run q8.gguf --seq-length 256 --prompt-ids 1,2,3 -n 4
gguf_ids=$(printf '%s\n' "$out" | grep -E '^[0-9]+(,[0-9]+)+$')
q8=$(find "$cache" -maxdepth 1 -name 'q8-*.bundle')
expect 0 "wrote q8-compiled.bundle" "$tpullm" compile q8.gguf -o q8-compiled.bundle --seq-length 256 \
  --max-input-length 128
cmp -s q8-compiled.bundle "$q8" || { fail=1; echo "FAIL: the cached GGUF bundle differs from compile's"; }
expect 0 "acts +[0-9]+ of [0-9]+ linears round their input to int8 \(act-quant dynamic\)" \
  "$tpullm" inspect q8-compiled.bundle
expect 0 "using the cached bundle $q8" "$tpullm" run q8.gguf --seq-length 256 --prompt-ids 1,2,3 -n 4
expect 0 "compiling $ggufs/qwen2-q8_0 .*stopped" \
  "$tpullm" run "$ggufs/qwen2-q8_0" --seq-length 256 --prompt-ids 1,2,3 -n 4
[ "$(printf '%s\n' "$out" | grep -E '^[0-9]+(,[0-9]+)+$')" = "$gguf_ids" ] ||
  { fail=1; echo "FAIL: the GGUF's folder generates other ids than the file"; }
# A GGUF compiles with --act-quant dynamic unless told otherwise: none is another bundle (exact
# f32 activations); a compiled bundle keeps the act-quant it was compiled with.
expect 0 "compiling q8.gguf for this machine \(mode f32, seq_length 256, .*stopped" \
  "$tpullm" run q8.gguf --seq-length 256 --act-quant none --prompt-ids 1,2,3 -n 4
expect 2 "--act-quant: applies only when BUNDLE is a checkpoint folder or a GGUF file" \
  "$tpullm" run "$q8" --act-quant none --prompt-ids 1 -n 1
expect 2 "--act-quant: must be none or dynamic \(or, with --mode int8, static\), got 'fast'" \
  "$tpullm" run q8.gguf --act-quant fast --prompt-ids 1 -n 1

# A cache that cannot be created: one line naming the directory, nothing written.
printf 'x' > afile
expect 1 "I/O error: $work/afile/tpullm/bundles: cannot create the bundle cache directory: Not a directory \(set XDG_CACHE_HOME to a writable directory, or run with --no-cache\)$" \
  env XDG_CACHE_HOME="$work/afile" "$tpullm" run model --prompt-ids 1 -n 1
if [ "$(id -u)" -ne 0 ]; then # root writes through permissions
  mkdir -p ro/tpullm/bundles && chmod 555 ro/tpullm/bundles
  expect 1 "ro/tpullm/bundles/model-[0-9a-f]{16}\.bundle: cannot write the compiled bundle into the bundle cache" \
    env XDG_CACHE_HOME="$work/ro" "$tpullm" run model --prompt-ids 1 -n 1
  chmod 755 ro/tpullm/bundles
fi
# A disk that fills up while the bundle is written (a 1 MiB file size limit: the bundle is
# larger): one line, no partial or staged file left, the cache as it was.
before=$(ls -A "$cache" | sort)
expect 1 "cannot write the compiled bundle into the bundle cache: write failed after [0-9]+ bytes: File too large \(free some space, set XDG_CACHE_HOME to another directory, or run with --no-cache\)$" \
  bash -c 'trap "" XFSZ; ulimit -f 1024; exec "$@"' full "$tpullm" run model --seq-length 96 --prompt-ids 1 -n 1
[ "$(ls -A "$cache" | sort)" = "$before" ] || { fail=1; echo "FAIL: the failed write left: $(ls -A "$cache")"; }

exit $fail
