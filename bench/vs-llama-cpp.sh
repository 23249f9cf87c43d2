#!/usr/bin/env bash
# tpullm against llama.cpp on the same GGUF files, same threads, same hour (issue 34's side by
# side). Not part of CI or the tests: it builds llama.cpp from a source tree you fetched.
#
#   bench/vs-llama-cpp.sh --llama-src DIR [--llama-build DIR] [--llama-label TEXT] [--tpullm BIN]
#                         [--threads N] [--repeat N] [--mode M] [--act-quant A] [--work DIR] GGUF...
#
# For each GGUF file it prints one table: prefill of 16 and 512 tokens, decode at contexts 128
# and 1024, for both engines, with the bytes each engine reads per decode step at context 128
# and the ceilings tpullm's bench measured in the same run (near read bandwidth, f32 FMA, the
# integer dot-product peak, and the tile unit's int8 peak on an AMX CPU). How each figure is
# taken:
#   tpullm:    `tpullm compile GGUF --mode M --act-quant A --seq-length 2048 --max-input-length
#              512` (M applies to the file's float tensors only: block types keep their codes;
#              the default, auto, is the file's own float type from its tensor table: bf16 for
#              a BF16 file, f32 for an all-F32 one, f16 for the rest; A, default dynamic as compile's own for a GGUF: activations rounded
#              to int8 per weight group, as llama.cpp rounds them; none: exact f32), then
#              `tpullm bench --prompt 16,512 --context 128,1024 --json --no-contention`; decode is
#              the best of --repeat runs of 16 steps at that context; MB/token from the bench
#              (the bundle's weights as stored plus the KV history).
#   llama.cpp: `llama-bench -m GGUF -t N -r R -o json`: pp16 and pp512 (-p), decode at 128 as
#              tg128 (128 tokens from an empty context, the mean rate), decode at 1024 with
#              `-d 1024 -n 64` where llama-bench has --n-depth, else from `-pg 1024,64` minus
#              `-p 1024` (the 64 steps' time, from context 1024; left out, with a line saying
#              why, when that time is within twice the two runs' spread); MB/token from the
#              GGUF's tensor table (every tensor but a token_embd that is only gathered) plus its
#              default f16 KV cache at context 128.
# The table names llama.cpp's build as llama-bench reports it, which is "unknown" for a source
# tree without its .git (a fetched snapshot): --llama-label TEXT (e.g. "b4748 c392e5094") names
# it instead, and without it the script asks git in --llama-src before printing "unknown".
# Both engines run one after the other on each file, so compare within a table, not across.
set -euo pipefail

die() { echo "vs-llama-cpp.sh: $*" >&2; exit 2; }
usage() { sed -n '5,6p' "$0" | sed 's/^# \{0,1\}//'; }

here=$(cd "$(dirname "$0")/.." && pwd)
llama_src="" llama_build="" llama_label="" tpullm="$here/build/tools/tpullm" threads=2 repeat=3 mode=auto work=""
act_quant=dynamic
files=()
# An option's value: refused with a line naming the option when missing or empty.
need() { (($# >= 2)) && [[ -n $2 ]] || die "$1 needs a value (--help)"; }
while (($#)); do
  case $1 in
    --llama-src) need "$@"; llama_src=$2; shift 2 ;;
    --llama-build) need "$@"; llama_build=$2; shift 2 ;;
    --llama-label) need "$@"; llama_label=$2; shift 2 ;;
    --tpullm) need "$@"; tpullm=$2; shift 2 ;;
    --threads) need "$@"; threads=$2; shift 2 ;;
    --repeat) need "$@"; repeat=$2; shift 2 ;;
    --mode) need "$@"; mode=$2; shift 2 ;;
    --act-quant) need "$@"; act_quant=$2; shift 2 ;;
    --work) need "$@"; work=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) die "unknown option $1 (--help)" ;;
    *) files+=("$1"); shift ;;
  esac
done
[[ -n $llama_src ]] || die "--llama-src DIR is required: a llama.cpp source tree (e.g. a fetched snapshot)"
[[ -f $llama_src/CMakeLists.txt ]] || die "$llama_src: not a llama.cpp source tree (no CMakeLists.txt)"
((${#files[@]})) || die "no GGUF file given"
[[ -x $tpullm ]] || die "$tpullm: no tpullm binary (build the project, or pass --tpullm)"
[[ $threads =~ ^[1-9][0-9]*$ ]] || die "--threads must be a positive integer"
[[ $repeat =~ ^[1-9][0-9]*$ ]] || die "--repeat must be a positive integer"
for f in "${files[@]}"; do
  [[ -e $f ]] || die "$f: no such file"
  [[ -f $f ]] || die "$f: not a regular file (a GGUF file is read several times)"
  [[ $(head -c 4 "$f") == GGUF ]] || die "$f: not a GGUF file"
done
command -v python3 >/dev/null || die "python3 is needed to read the JSON outputs"
llama_build=${llama_build:-$llama_src/build-vs-tpullm}
bench_bin=$llama_build/bin/llama-bench
if [[ ! -x $bench_bin ]]; then
  echo "building llama.cpp's llama-bench in $llama_build (once)..." >&2
  cmake -S "$llama_src" -B "$llama_build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF >&2
  cmake --build "$llama_build" --target llama-bench -j "$(nproc)" >&2
fi
[[ -x $bench_bin ]] || die "$bench_bin was not built"

own_work=""
if [[ -z $work ]]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/vs-llama-cpp.XXXXXX")
  own_work=$work
fi
mkdir -p "$work" || die "$work: cannot create the work folder"
# The source tree's own commit, where it is a git checkout of its own (not a folder inside
# another repository): the table's fallback when llama-bench reports "unknown".
llama_git=""
if top=$(git -C "$llama_src" rev-parse --show-toplevel 2>/dev/null) &&
  [[ $(cd "$top" && pwd -P) == $(cd "$llama_src" && pwd -P) ]]; then
  llama_git=$(git -C "$llama_src" describe --tags --always 2>/dev/null || true)
fi
# Bundles and JSON outputs go to a new folder inside it (never onto a file the user has there);
# with --work the JSON outputs stay there, the bundles never do.
scratch=$(mktemp -d "$work/vs-llama-cpp.XXXXXX") || die "$work: cannot write there"
trap 'rm -f "$scratch"/*.bundle; if [[ -n $own_work ]]; then rm -rf "$own_work"; fi' EXIT

# The float mode that keeps a GGUF file's float tensors as they are, from its tensor table:
# bf16 when a tensor is BF16, f32 when every tensor is F32, else f16 (block-type files too: their
# float tensors are norms, and f16 keeps the KV cache llama.cpp has).
gguf_float_mode() {
  python3 - "$1" <<'PY'
import struct, sys
try:
  f = open(sys.argv[1], "rb")
  def rd(fmt):
      return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]
  sizes = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
           12: "d"}
  def skip(t):
      if t == 8:
          f.seek(rd("Q"), 1)
      elif t == 9:
          et, n = rd("I"), rd("Q")
          if et in sizes:
              f.seek(struct.calcsize("<" + sizes[et]) * n, 1)
          else:
              for _ in range(n):
                  skip(et)
      else:
          f.seek(struct.calcsize("<" + sizes[t]), 1)
  f.read(4); rd("I")
  tensors, kvs = rd("Q"), rd("Q")
  if tensors > 1 << 20 or kvs > 1 << 20:
      raise ValueError(f"{tensors} tensors and {kvs} keys")
  for _ in range(kvs):
      f.seek(rd("Q"), 1)
      skip(rd("I"))
  types = set()
  for _ in range(tensors):
      f.seek(rd("Q"), 1)
      f.seek(8 * rd("I"), 1)
      types.add(rd("I"))
      rd("Q")
except (OSError, OverflowError, KeyError, struct.error, ValueError) as e:
  print(f"{e}", file=sys.stderr)
  sys.exit(1)
# ggml types: 0 F32, 1 F16, 30 BF16
print("bf16" if 30 in types else "f32" if types == {0} else "f16")
PY
}

has_depth=0
"$bench_bin" --help 2>&1 | grep -q -- '--n-depth' && has_depth=1

for f in "${files[@]}"; do
  name=$(basename "$f" .gguf)
  b="$scratch/$name.bundle"
  file_mode=$mode
  if [[ $mode == auto ]]; then
    file_mode=$(gguf_float_mode "$f" 2>/dev/null) ||
      die "$f: its GGUF tensor table cannot be read (truncated or damaged?); --mode M skips reading it"
  fi
  echo "== $f: tpullm compile (--mode $file_mode --act-quant $act_quant)..." >&2
  "$tpullm" compile "$f" -o "$b" --mode "$file_mode" --act-quant "$act_quant" --seq-length 2048 \
    --max-input-length 512 >&2
  echo "== $f: tpullm bench..." >&2
  "$tpullm" bench "$b" --prompt 16,512 --context 128,1024 --threads "$threads" \
    --repeat "$repeat" --no-contention --json > "$scratch/$name.tpullm.json"
  rm -f "$b"
  echo "== $f: llama-bench..." >&2
  "$bench_bin" -m "$f" -t "$threads" -r "$repeat" -p 16,512 -n 128 -o json \
    > "$scratch/$name.llama.json"
  if ((has_depth)); then
    "$bench_bin" -m "$f" -t "$threads" -r "$repeat" -p 0 -n 64 -d 1024 -o json \
      > "$scratch/$name.llama-depth.json"
  else
    "$bench_bin" -m "$f" -t "$threads" -r "$repeat" -p 1024 -n 0 -pg 1024,64 -o json \
      > "$scratch/$name.llama-depth.json"
  fi
  LLAMA_LABEL=$llama_label LLAMA_GIT=$llama_git python3 - "$f" "$scratch/$name.tpullm.json" "$scratch/$name.llama.json" \
    "$scratch/$name.llama-depth.json" "$has_depth" "$act_quant" "$file_mode" <<'EOF'
import json, os, struct, sys

gguf, tj, lj, dj, has_depth = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] == "1"
act_quant, mode = sys.argv[6], sys.argv[7]

# ggml type id -> (block elements, block bytes), as ggml-common.h defines them.
BLOCKS = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
          9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
          14: (256, 210), 15: (256, 292), 16: (256, 66), 17: (256, 74), 18: (256, 98),
          19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82), 23: (256, 136),
          24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2)}

def read_gguf(path):
    """Tensor table (name -> bytes) and metadata scalars of a GGUF v2 / v3 file."""
    with open(path, "rb") as fh:
        def rd(fmt):
            n = struct.calcsize(fmt)
            return struct.unpack("<" + fmt, fh.read(n))
        def rstr():
            (n,) = rd("Q")
            return fh.read(n).decode("utf-8", "replace")
        sizes = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
        def rval(t):
            if t == 8:
                return rstr()
            if t == 9:  # arrays are skipped: only scalars are needed
                (et,) = rd("I")
                (n,) = rd("Q")
                if et in sizes:
                    fh.seek(n * struct.calcsize(sizes[et]), 1)
                else:
                    for _ in range(n):
                        rval(et)
                return None
            return rd(sizes[t])[0]
        magic, version = fh.read(4), rd("I")[0]
        if magic != b"GGUF":
            raise SystemExit(path + ": not a GGUF file")
        n_tensors, n_kv = rd("Q")[0], rd("Q")[0]
        meta = {}
        for _ in range(n_kv):
            k = rstr()
            (t,) = rd("I")
            v = rval(t)
            if v is not None:
                meta[k] = v
        tensors = {}
        for _ in range(n_tensors):
            name = rstr()
            (nd,) = rd("I")
            ne = rd("Q" * nd)
            (typ,) = rd("I")
            rd("Q")
            elems = 1
            for d in ne:
                elems *= d
            be, bb = BLOCKS.get(typ, (1, 0))
            tensors[name] = elems // be * bb
        return meta, tensors

meta, tensors = read_gguf(gguf)
arch = meta.get("general.architecture", "")
layers = meta.get(arch + ".block_count", 0)
heads = meta.get(arch + ".attention.head_count", 1)
kv_heads = meta.get(arch + ".attention.head_count_kv", heads)
hidden = meta.get(arch + ".embedding_length", 0)
head_dim = meta.get(arch + ".attention.key_length", hidden // max(heads, 1))
weights = sum(b for n, b in tensors.items() if n != "token_embd.weight" or "output.weight" not in tensors)
kv_per_pos = 2 * layers * kv_heads * head_dim * 2  # llama.cpp's default f16 cache
llama_mb = (weights + 128 * kv_per_pos) / 1e6

t = json.load(open(tj))
def ours(kind, key, value, field):
    for r in t[kind]:
        if r.get(key) == value:
            return r.get(field)
    return None

def llama_rows(path):
    rows = json.load(open(path))
    return {(r["n_prompt"], r["n_gen"], r.get("n_depth", 0)): r for r in rows}

l = llama_rows(lj)
d = llama_rows(dj)
notes = []
def ts(r):
    return r["avg_ts"] if r else None
if has_depth:
    l1024 = ts(d.get((0, 64, 1024)))
else:
    pg, pp = d.get((1024, 64, 0)), d.get((1024, 0, 0))
    steps_s = (pg["avg_ns"] - pp["avg_ns"]) / 1e9 if pg and pp else 0.0
    l1024 = 64 / steps_s if steps_s > 0 else None
    # The difference is the 64 steps only when they outlast the runs' own spread: where a slow
    # prefill of 1024 tokens moves by more than the steps take, it can read several times the
    # true rate (seen: 90 t/s for a 1 GB file on an 80 GB/s machine).
    def spread(r):
        s = r.get("samples_ns") or []
        return (max(s) - min(s)) / 1e9 if len(s) > 1 else 0.0
    if l1024 is not None and steps_s <= 2 * (spread(pg) + spread(pp)):
        notes.append(f"llama.cpp decode @1024 left out: its 64 steps ({steps_s:.2f} s, pg - pp) are "
                     f"within twice the spread of its runs ({spread(pp):.2f} s at pp1024, "
                     f"{spread(pg):.2f} s at pg1024,64); a llama-bench with --n-depth, or more "
                     f"--repeat, measures it")
        l1024 = None

rows = {
    "tpullm": [ours("prefill", "prompt", 16, "tokens_per_s"), ours("prefill", "prompt", 512, "tokens_per_s"),
               ours("decode", "context", 128, "tokens_per_s"), ours("decode", "context", 1024, "tokens_per_s"),
               (ours("decode", "context", 128, "bytes_per_token") or 0) / 1e6],
    "llama.cpp": [ts(l.get((16, 0, 0))), ts(l.get((512, 0, 0))), ts(l.get((0, 128, 0))), l1024, llama_mb],
}
def fmt(v, p=1):
    return "-" if v is None else f"{v:.{p}f}"
c = t["ceilings"]
near = ours("decode", "context", 128, "read_gbs_near") or c["read_gbs"]
lcpu = (json.load(open(lj)) or [{}])[0]
build = lcpu.get("build_commit", "?")
if os.environ.get("LLAMA_LABEL"):
    build = os.environ["LLAMA_LABEL"]
elif build in ("unknown", "?") and os.environ.get("LLAMA_GIT"):
    build = os.environ["LLAMA_GIT"]
print(f"\n### {gguf}")
print(f"{t['machine']['cpu']}, {t['machine']['threads']} threads, tpullm --mode {mode} --act-quant {act_quant} (llama.cpp: {lcpu.get('n_threads', '?')}, "
      f"build {build}); ceilings of this run: read {near:.1f} GB/s near "
      f"(start-up {c['read_gbs']:.1f}), f32 FMA {c['f32_fma_gflops']:.0f} GFLOP/s, "
      f"int8 dot {c.get('int8_dot_gops', 0):.0f} GOP/s ({c.get('int8_dot_path', '?')})"
      + (f", AMX int8 {c['amx_int8_gops']:.0f} GOP/s (tpullm's integer prefill of 16 rows and more)"
         if c.get("amx_int8_gops", 0) > 0 and t["machine"].get("isa") == "amx" else ""))
print("\n| engine | pp16 t/s | pp512 t/s | decode @128 t/s | decode @1024 t/s | MB/token @128 | decode @128 / near read |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for eng, r in rows.items():
    frac = r[2] * r[4] * 1e6 / (near * 1e9) if r[2] and r[4] else None
    print(f"| {eng} | {fmt(r[0])} | {fmt(r[1])} | {fmt(r[2])} | {fmt(r[3])} | {fmt(r[4], 0)} | {fmt(frac, 2)} |")
ratio = [a / b if a and b else None for a, b in zip(rows["tpullm"][:4], rows["llama.cpp"][:4])]
print(f"| tpullm / llama.cpp | {fmt(ratio[0], 2)} | {fmt(ratio[1], 2)} | {fmt(ratio[2], 2)} | {fmt(ratio[3], 2)} | | |")
for n in notes:
    print(f"\n{n}")
EOF
done
