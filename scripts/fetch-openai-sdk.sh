#!/usr/bin/env bash
# Fetches the official OpenAI Node SDK that the serve tests (tests/serve) drive the server with:
# npm openai@5.23.2 (no dependencies), pinned by the sha256 of its package, unpacked into a cache
# outside the source tree:
#   ${TPULLM_NPM_CACHE:-$HOME/.cache/tpullm/npm}/node_modules/openai
# Idempotent: skipped when that version is already there. Needs npm (Debian's nodejs + npm).
set -euo pipefail
version=5.23.2
sha=a2aa74ff8be1a80a215af201a3d2228e999464d166c1eaec2c9ca313395fbef1
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
cache=${TPULLM_NPM_CACHE:-$home/.cache/tpullm/npm}
dest="$cache/node_modules/openai"
if [ -s "$dest/package.json" ] && grep -q "\"version\": \"$version\"" "$dest/package.json"; then
  exit 0
fi
mkdir -p "$cache/node_modules"
tmp=$(mktemp -d "$cache/.fetch-openai.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "openai@$version" >/dev/null)
echo "$sha  $tmp/openai-$version.tgz" | sha256sum -c --quiet - ||
  { echo "fetch-openai-sdk: openai-$version.tgz: sha256 mismatch" >&2; exit 1; }
mkdir -p "$tmp/out"
tar -xzf "$tmp/openai-$version.tgz" -C "$tmp/out" --strip-components=1
rm -rf "$dest" && mv "$tmp/out" "$dest"
echo "fetched openai $version"
