#!/usr/bin/env bash
# Fetches the validators the constrained-output tests check answers with (nobody here wrote
# them): npm ajv@8.17.1 (a JSON Schema validator) with its four dependencies, and zod@3.25.76
# (the schemas of the OpenAI SDK's zodResponseFormat helper), each pinned by the sha256 of its
# package, unpacked side by side into the cache the OpenAI SDK uses:
#   ${TPULLM_NPM_CACHE:-$HOME/.cache/tpullm/npm}/node_modules/{ajv,fast-deep-equal,...,zod}
# Idempotent: a package already there at its version is skipped. Needs npm (Debian's nodejs + npm).
set -euo pipefail
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
cache=${TPULLM_NPM_CACHE:-$home/.cache/tpullm/npm}
mkdir -p "$cache/node_modules"
while read -r name version sha; do
  dest="$cache/node_modules/$name"
  if [ -s "$dest/package.json" ] && grep -q "\"version\": \"$version\"" "$dest/package.json"; then
    continue
  fi
  tmp=$(mktemp -d "$cache/.fetch-$name.XXXXXX")
  (cd "$tmp" && npm pack --silent "$name@$version" >/dev/null)
  echo "$sha  $tmp/$name-$version.tgz" | sha256sum -c --quiet - ||
    { echo "fetch-validators: $name-$version.tgz: sha256 mismatch" >&2; rm -rf "$tmp"; exit 1; }
  mkdir -p "$tmp/out"
  tar -xzf "$tmp/$name-$version.tgz" -C "$tmp/out" --strip-components=1
  rm -rf "$dest" && mv "$tmp/out" "$dest"
  rm -rf "$tmp"
  echo "fetched $name $version"
done <<'LIST'
ajv 8.17.1 f09dae78b8cc984dbf178eba92a7b19bff9e5f7c990508f3af0bf8f118770308
fast-deep-equal 3.1.3 b019a0980f27638dc3f85836b0e478f188e00d7a6e5852c0819fa86f56e47b8f
fast-uri 3.1.0 3ad33c6b4bd8cc1d5f867b7453cc783a96ffc89101a9ad3a8bcfe7905a83581d
json-schema-traverse 1.0.0 023222622df29fc274bde5d3590e47aa1d4a8e3c1d6e2aba029948ed79799b21
require-from-string 2.0.2 cb694a4965908f7775a0c757f00cf4e624d193cd71d77988fbcca0f597b88d82
zod 3.25.76 9e1f1a05f0dd0c1dab64ee91ceb9bf55cd44d35368c70edda80a2fdc70a88377
LIST
