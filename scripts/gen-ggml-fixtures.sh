#!/usr/bin/env bash
# Regenerates tests/data/ggml/: ggml block fixtures for tests/unit/test_ggml_blocks.cpp, made by
# ggml's own C code (the quantizers and dequantize_row_* that llama.cpp compiles into
# llama-quantize). Not run by the tests or CI; run it by hand after changing what it writes.
#
# Usage: scripts/gen-ggml-fixtures.sh GGML_SRC GGML_BUILD [MODELS_GGUF] [OUT_DIR]
#   GGML_SRC     a ggml source tree: the root of github.com/ggml-org/ggml, or llama.cpp's ggml/
#                (a folder with include/ggml.h and include/gguf.h)
#   GGML_BUILD   its CMake build folder holding libggml-base.so (ggml: `cmake -S . -B build
#                -DCMAKE_BUILD_TYPE=Release && cmake --build build --target ggml-base`; llama.cpp:
#                its build/ after building llama-quantize, which links ggml-base)
#   MODELS_GGUF  shared/models-gguf (default: ../shared/models-gguf beside the repository)
#   OUT_DIR      default tests/data/ggml
#
# What it writes (all little-endian):
#   types.txt        one line per ggml type id ggml defines: id name block_elems block_bytes
#   fixtures.txt     one line per fixture: name type K rows source
#   NAME.blk         `rows` rows of K elements of `type`, ggml's raw block bytes
#   NAME.f32         the same rows dequantized by ggml's type_traits to_float (dequantize_row_*)
# Fixtures "q*_..." quantize rows of blk.0.ffn_down.weight of llama-f16/model.gguf (F16 [768 x
# 256], widened by ggml's own to_float) plus four synthetic rows (all zeros, all positive, block
# outliers, values small enough for f16-subnormal block scales) with ggml_quantize_chunk and no
# importance matrix, as `llama-quantize --pure IN OUT TYPE` does; fixtures "shared_*" copy rows
# of tensors that llama-quantize (b4748) wrote into the shared GGUF cases. Every .f32 is what
# `llama-quantize --allow-requantize OUT DEQ F32` gives for those rows (the same to_float).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src=${1:?usage: gen-ggml-fixtures.sh GGML_SRC GGML_BUILD [MODELS_GGUF] [OUT_DIR]}
build=${2:?usage: gen-ggml-fixtures.sh GGML_SRC GGML_BUILD [MODELS_GGUF] [OUT_DIR]}
models=${3:-$root/../shared/models-gguf}
out=${4:-$root/tests/data/ggml}
lib=$(find "$build" -name 'libggml-base.so' -print -quit)
[ -n "$lib" ] || { echo "no libggml-base.so under $build" >&2; exit 2; }
[ -f "$src/include/gguf.h" ] || { echo "$src/include/gguf.h: not a ggml source tree" >&2; exit 2; }
[ -f "$models/llama-f16/model.gguf" ] || { echo "$models/llama-f16/model.gguf: missing" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat >"$work/oracle.c" <<'EOF'
#include "ggml.h"
#include "gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char* out_dir;
static FILE* manifest;

static void die(const char* what) {
  fprintf(stderr, "oracle: %s\n", what);
  exit(2);
}

static void write_file(const char* name, const char* ext, const void* p, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.%s", out_dir, name, ext);
  FILE* f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0)
    die(path);
}

/* Writes NAME.blk and NAME.f32 (ggml's to_float of each row) and a manifest line. */
static void emit(const char* name, enum ggml_type t, const void* blocks, int64_t K, int64_t rows,
                 const char* source) {
  const size_t row_bytes = ggml_row_size(t, K);
  float* f = malloc(sizeof(float) * (size_t)(K * rows));
  for (int64_t r = 0; r < rows; ++r)
    ggml_get_type_traits(t)->to_float((const char*)blocks + r * row_bytes, f + r * K, K);
  write_file(name, "blk", blocks, row_bytes * (size_t)rows);
  write_file(name, "f32", f, sizeof(float) * (size_t)(K * rows));
  fprintf(manifest, "%s %s %lld %lld %s\n", name, ggml_type_name(t), (long long)K,
          (long long)rows, source);
  free(f);
}

/* Reads tensor `name` of `path`: its type, ne0, and the bytes of its first `rows` rows. */
static void* read_rows(const char* path, const char* name, int64_t rows, enum ggml_type* t,
                       int64_t* K) {
  struct ggml_context* meta = NULL;
  struct gguf_init_params ip = {.no_alloc = true, .ctx = &meta};
  struct gguf_context* g = gguf_init_from_file(path, ip);
  if (!g)
    die(path);
  const int64_t id = gguf_find_tensor(g, name);
  if (id < 0)
    die(name);
  struct ggml_tensor* tensor = ggml_get_tensor(meta, name);
  *t = gguf_get_tensor_type(g, id);
  *K = tensor->ne[0];
  const size_t bytes = ggml_row_size(*t, *K) * (size_t)rows;
  void* p = malloc(bytes);
  FILE* f = fopen(path, "rb");
  if (!f || fseek(f, (long)(gguf_get_data_offset(g) + gguf_get_tensor_offset(g, id)), SEEK_SET) ||
      fread(p, 1, bytes, f) != bytes)
    die(path);
  fclose(f);
  gguf_free(g);
  ggml_free(meta);
  return p;
}

int main(int argc, char** argv) {
  if (argc != 3)
    die("usage: oracle MODELS_GGUF OUT_DIR");
  out_dir = argv[2];
  char path[4096];
  snprintf(path, sizeof path, "%s/fixtures.txt", out_dir);
  manifest = fopen(path, "w");
  snprintf(path, sizeof path, "%s/types.txt", out_dir);
  FILE* types = fopen(path, "w");
  if (!manifest || !types)
    die(out_dir);

  for (int t = 0; t < GGML_TYPE_COUNT; ++t)
    if (ggml_blck_size((enum ggml_type)t) > 0)
      fprintf(types, "%d %s %lld %zu\n", t, ggml_type_name((enum ggml_type)t),
              (long long)ggml_blck_size((enum ggml_type)t), ggml_type_size((enum ggml_type)t));
  fclose(types);

  /* Source rows: 8 rows of the F16 model widened by ggml, then 4 synthetic rows. */
  enum { kModelRows = 8, kRows = 12 };
  snprintf(path, sizeof path, "%s/llama-f16/model.gguf", argv[1]);
  enum ggml_type st;
  int64_t K;
  void* half = read_rows(path, "blk.0.ffn_down.weight", kModelRows, &st, &K);
  if (st != GGML_TYPE_F16)
    die("llama-f16 blk.0.ffn_down.weight is not F16");
  float* x = calloc((size_t)(K * kRows), sizeof(float));
  ggml_get_type_traits(GGML_TYPE_F16)->to_float(half, x, K * kModelRows);
  free(half);
  for (int64_t k = 0; k < K; ++k) {
    x[8 * K + k] = 0.0f;                                           /* all zeros */
    x[9 * K + k] = 0.25f + fabsf(x[k]);                            /* all positive */
    x[10 * K + k] = (k % 37 == 5) ? 20.0f * x[K + k] : x[K + k];   /* block outliers */
    x[11 * K + k] = 1e-4f * x[2 * K + k];                          /* f16-subnormal scales */
  }

  const enum ggml_type quant[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
                                  GGML_TYPE_Q8_0, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K,
                                  GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_NL,
                                  GGML_TYPE_IQ4_XS};
  for (size_t i = 0; i < sizeof quant / sizeof quant[0]; ++i) {
    const enum ggml_type t = quant[i];
    if (ggml_quantize_requires_imatrix(t))
      die("type needs an importance matrix");
    void* q = malloc(ggml_row_size(t, K) * kRows);
    ggml_quantize_chunk(t, x, q, 0, kRows, K, NULL);
    char name[64];
    snprintf(name, sizeof name, "%s", ggml_type_name(t));
    for (char* c = name; *c; ++c)
      *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
    emit(name, t, q, K, kRows, "ggml_quantize_chunk");
    free(q);
  }

  /* Rows that llama-quantize itself wrote into the shared cases. */
  const struct {
    const char *name, *folder, *tensor;
  } shared[] = {
      {"shared_q4_0", "llama-q4_0", "blk.0.ffn_down.weight"},
      {"shared_q4_k", "llama-q4_k_m", "blk.0.ffn_down.weight"},
      {"shared_q6_k", "llama-q4_k_m", "blk.1.ffn_down.weight"},
      {"shared_q8_0", "qwen2-q8_0", "blk.0.ffn_down.weight"},
  };
  for (size_t i = 0; i < sizeof shared / sizeof shared[0]; ++i) {
    snprintf(path, sizeof path, "%s/%s/model.gguf", argv[1], shared[i].folder);
    enum ggml_type t;
    int64_t k;
    void* q = read_rows(path, shared[i].tensor, 4, &t, &k);
    char source[256];
    snprintf(source, sizeof source, "%s:%s", shared[i].folder, shared[i].tensor);
    emit(shared[i].name, t, q, k, 4, source);
    free(q);
  }
  fclose(manifest);
  free(x);
  return 0;
}
EOF

libdir=$(dirname "$lib")
cc -std=gnu11 -O1 -ffp-contract=off -I"$src/include" "$work/oracle.c" -L"$libdir" -lggml-base \
  -Wl,-rpath,"$libdir" -lm -o "$work/oracle"
mkdir -p "$out"
rm -f "$out"/*.blk "$out"/*.f32 "$out"/fixtures.txt "$out"/types.txt
"$work/oracle" "$models" "$out"
echo "wrote $(wc -l <"$out/fixtures.txt") fixtures and $(wc -l <"$out/types.txt") type rows to $out"
du -sh "$out"
