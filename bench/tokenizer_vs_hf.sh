#!/usr/bin/env bash
# Encode speed of tpullm's tokenizer against HuggingFace's Rust tokenizers (npm tokenizers@0.23.2,
# its native binary), single thread, on the same multi-MB mixed-language text in the same run.
# Usage: bench/tokenizer_vs_hf.sh BUILD_DIR [TOKENIZER_NAME ...]   (default: qwen3 llama3 gemma3)
# Env: ORACLE_DIR (where npm installs tokenizers, default /tmp/tokoracle), TEXT_MB (default 4),
#      TPULLM_TOKENIZER_CACHE (default ~/.cache/tpullm/tokenizers).
set -euo pipefail
build=${1:?usage: bench/tokenizer_vs_hf.sh BUILD_DIR [NAME...]}
shift
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(qwen3 llama3 gemma3)
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${TPULLM_TOKENIZER_CACHE:-$HOME/.cache/tpullm/tokenizers}
oracle=${ORACLE_DIR:-/tmp/tokoracle}
bench=$build/bench/tpullm-bench-tokenizer
[ -x "$bench" ] || { echo "no $bench: build the tpullm-bench-tokenizer target" >&2; exit 2; }
if [ ! -d "$oracle/node_modules/tokenizers" ]; then
  mkdir -p "$oracle" && (cd "$oracle" && npm install --no-save tokenizers@0.23.2 >/dev/null)
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The text: sentences of several scripts (the same generator as bench_tokenizer.cpp's default is
# not needed: both sides read this file).
python3 - "$work/text.txt" "${TEXT_MB:-4}" <<'PY'
import random, sys
rnd = random.Random(20261201)
s = ["The compiler lowers each transformer layer into a small module and plans its memory. ",
     "Large language models convert the input text into tokens before the first prefill. ",
     "大型语言模型首先把输入文本转换成词元，然后进行预填充和解码。",
     "東京の天気は晴れ、気温は二十三度です。カタカナとひらがなも混ざります。",
     "Привет, мир! Это проверка токенизатора на кириллице и цифрах. ",
     "مرحبا بالعالم، هذا اختبار للنص العربي. ",
     "def encode(text):\n    return [vocab[w] for w in text.split()]  # O(n)\n",
     "    if (a && b) { c += d[i]; }\n\n",
     "Emoji 👋🌍 and families 👨\u200d👩\u200d👧 appear in chats. ",
     "I'm sure they'll say it's fine, but we've seen THE DIFFERENCE. ",
     "한국어 문장도 포함되어 있습니다. ", "Ελληνικά: ΣΊΣΥΦΟΣ και ς. ", "\n\n   \t  whitespace runs\r\n"]
out, n, limit = [], 0, int(float(sys.argv[2]) * (1 << 20))
while n < limit:
    t = rnd.choice(s)
    if rnd.random() < 0.25:
        t += str(rnd.randrange(1000000)) + " "
    out.append(t); n += len(t.encode())
open(sys.argv[1], "w").write("".join(out))
PY
cat > "$work/rs.cjs" <<'JS'
// mode "whole": the text in one encode call; "lines": one call per line (cut after each \n).
process.env.RAYON_NUM_THREADS = "1";
process.env.TOKENIZERS_PARALLELISM = "false";
const { Tokenizer } = require(require.resolve("tokenizers", { paths: [process.argv[4]] }));
const fs = require("fs");
(async () => {
  const t = Tokenizer.fromFile(process.argv[2] + "/tokenizer.json");
  const text = fs.readFileSync(process.argv[3], "utf8");
  const parts = process.argv[5] === "lines" ? text.split(/(?<=\n)/) : [text];
  const bytes = Buffer.byteLength(text);
  await t.encode(text.slice(0, 100000), null, { addSpecialTokens: false }); // warm-up
  let best = Infinity, n = 0;
  for (let r = 0; r < 2; r++) {
    const t0 = process.hrtime.bigint();
    n = 0;
    for (const p of parts) n += (await t.encode(p, null, { addSpecialTokens: false })).getIds().length;
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  console.log(bytes / best / 1e6, n);
})();
JS
printf "%-12s %-6s %12s %12s %8s %10s\n" tokenizer mode tpullm "HF Rust" ratio tokens
for name in "${names[@]}"; do
  dir=$cache/$name
  TPULLM_BENCH_TEXT=$work/text.txt TPULLM_BENCH_TOKENIZER=$dir "$bench" --benchmark_format=json \
    2>/dev/null >"$work/ours.json"
  for mode in whole lines; do
    bm=BM_TokenizerEncode
    [ $mode = lines ] && bm=BM_TokenizerEncodeLines
    read -r ours_mb ours_tok < <(python3 -c 'import json,sys
b=[x for x in json.load(open(sys.argv[1]))["benchmarks"] if x["name"].split("/")[0]==sys.argv[2]][0]
print(b["bytes_per_second"]/1e6, int(b["tokens"]))' "$work/ours.json" $bm)
    read -r rs_mb rs_tok < <(RAYON_NUM_THREADS=1 node "$work/rs.cjs" "$dir" "$work/text.txt" "$oracle" $mode)
    [ "$ours_tok" = "$rs_tok" ] || echo "warning: $name $mode: token counts differ ($ours_tok vs $rs_tok)" >&2
    python3 -c "import sys; o,r=float(sys.argv[3]),float(sys.argv[4]); print(f'{sys.argv[1]:<12} {sys.argv[2]:<6} {o:7.2f} MB/s {r:7.2f} MB/s {o/r:7.2f}x {sys.argv[5]:>10}')" \
      "$name" $mode "$ours_mb" "$rs_mb" "$ours_tok"
  done
done
