// Bundle::open: map, verify (header, FlatBuffer verifier, checksum, every offset and size, every
// program's types and buffers) and decode a bundle; weights point into the mapping.
#include <algorithm>
#include <atomic>
#include <functional>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <thread>

#include <sys/stat.h>
#include <unistd.h>

#include "bundle_format.hpp"
#include "tpullm/bundle/bundle.hpp"
#include "tpullm/kernels/worker_pool.hpp"
#include "tpullm/conversion/weight_convert.hpp"
#include "tpullm/frontend/tensor_parallel.hpp"
#include "tpullm/ir/builder.hpp"
#include "tpullm/support/crc32c.hpp"
#include "tpullm/support/mapped_file.hpp"
#include "value_codec.hpp"

namespace tpullm::bundle {

namespace fb = ::tpullm::fbs;
using codec::DecodeError;
using codec::fail;

/// Decodes and checks the metadata into a Bundle (friend of Bundle).
struct BundleReader {
  Bundle& out;
  std::int64_t blob_size = 0;

  static constexpr std::int64_t kMaxBytes = std::int64_t{1} << 40;

  static std::int64_t bounded(std::int64_t v, std::int64_t lo, std::int64_t hi,
                              const std::string& what) {
    if (v < lo || v > hi)
      fail(what, std::to_string(v) + " is outside [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
    return v;
  }

  void model(const fb::Model& m) {
    ModelInfo& i = out.model_;
    i.family = m.family()->str();
    i.layers = bounded(m.layers(), 1, 1 << 16, "model.layers");
    i.hidden = bounded(m.hidden(), 1, 1 << 20, "model.hidden");
    i.intermediate = bounded(m.intermediate(), 0, 1 << 24, "model.intermediate");
    i.heads = bounded(m.heads(), 1, 1 << 16, "model.heads");
    i.kv_heads = bounded(m.kv_heads(), 1, 1 << 16, "model.kv_heads");
    i.head_dim = bounded(m.head_dim(), 1, 1 << 16, "model.head_dim");
    i.vocab = bounded(m.vocab(), 1, 1 << 26, "model.vocab");
    auto& p = i.params;
    p.seq_length = bounded(m.seq_length(), 1, 1 << 24, "model.seq_length");
    p.max_input_length = bounded(m.max_input_length(), 1, p.seq_length, "model.max_input_length");
    p.with_history = m.with_history();
    std::vector<std::int64_t> dl(m.decode_lengths()->begin(), m.decode_lengths()->end());
    if (dl.empty() || dl.front() != p.seq_length)
      fail("model.decode_lengths", "must start with seq_length");
    for (std::size_t k = 1; k < dl.size(); ++k)
      if (dl[k] <= 0 || dl[k] >= dl[k - 1])
        fail("model.decode_lengths", "must be positive and strictly decreasing");
    p.decode_chunks.assign(dl.begin() + 1, dl.end());
    p.decode_chunk = dl.back();
    if (m.prefill_lengths() != nullptr) {
      std::int64_t prev = p.max_input_length;
      for (auto n : *m.prefill_lengths()) {
        if (n <= 0 || n >= prev)
          fail("model.prefill_lengths",
               "must be positive, below max_input_length and strictly decreasing");
        p.prefill_chunks.push_back(n);
        prev = n;
      }
    }
    i.bos_token_id = bounded(m.bos_token_id(), -1, i.vocab - 1, "model.bos_token_id");
    if (m.eos_token_ids() != nullptr)
      for (auto e : *m.eos_token_ids())
        i.eos_token_ids.push_back(bounded(e, 0, i.vocab - 1, "model.eos_token_ids"));
    i.mode = m.mode()->str();
    i.source = m.source() != nullptr ? m.source()->str() : "";
    i.tensor_parallel =
        bounded(m.tensor_parallel(), 1, frontend::kMaxTensorParallel, "model.tensor_parallel");
    if (i.tensor_parallel > 1)
      if (const std::string why = frontend::tp_split_refusal(i.heads, i.kv_heads, i.intermediate,
                                                             i.vocab, i.tensor_parallel);
          !why.empty())
        fail("model.tensor_parallel", why);
  }

  void text(const fb::Text* t) {
    if (t == nullptr)
      return;
    auto& x = out.model_.text;
    auto str = [](const flatbuffers::String* s) { return s != nullptr ? s->str() : std::string(); };
    x.tokenizer_json = str(t->tokenizer());
    x.tokenizer_config_json = str(t->tokenizer_config());
    x.generation_config_json = str(t->generation_config());
    if (x.tokenizer_json.empty() &&
        (!x.tokenizer_config_json.empty() || !x.generation_config_json.empty()))
      fail("text", "has tokenizer_config or generation_config without a tokenizer");
  }

  void target(const fb::Target& t) {
    target::Target& g = out.target_;
    g.name = t.name()->str();
    g.cores = bounded(t.cores(), 1, 4096, "target.cores");
    g.local_memory = bounded(t.local_memory(), 1, kMaxBytes, "target.local_memory");
    g.alignment = bounded(t.alignment(), 1, 1 << 20, "target.alignment");
    if (t.weight_dtypes() != nullptr)
      for (const auto* s : *t.weight_dtypes()) {
        auto d = ir::parse_dtype(s->string_view());
        if (!d)
          fail("target.weight_dtypes", "unknown element type '" + s->str() + "'");
        g.weight_dtypes.push_back(*d);
      }
    if (t.isa()->string_view() != host_isa())
      fail("target",
           "the bundle was compiled for " + t.isa()->str() + ", this machine is " + host_isa());
  }

  void kv(const fb::KvCache& k) {
    const ModelInfo& m = out.model_;
    memory::KvGeometry& g = out.kv_;
    g.layers = k.layers();
    g.capacity = k.capacity();
    g.row_bytes = k.row_bytes();
    if (g.layers != m.layers)
      fail("kv.layers",
           std::to_string(g.layers) + " differs from the model's " + std::to_string(m.layers));
    bounded(g.capacity, m.params.seq_length, std::int64_t{1} << 26, "kv.capacity");
    g.dtype = ir::DType::f32; // bundles written before the field existed hold f32 caches
    if (const auto* s = k.dtype()) {
      const auto d = ir::parse_dtype(s->string_view());
      if (!d || (*d != ir::DType::f32 && *d != ir::DType::f16 && *d != ir::DType::bf16 &&
                 *d != ir::DType::i8))
        fail("kv.dtype", "'" + s->str() + "' is not f32, f16, bf16 or i8");
      g.dtype = *d;
    }
    // A tensor-parallel bundle's cache holds one rank's key / value heads per position.
    const std::int64_t kv_heads = frontend::tp_kv_heads(m.kv_heads, m.tensor_parallel);
    if (g.row_bytes != memory::kv_row_bytes(g.dtype, kv_heads, m.head_dim))
      fail("kv.row_bytes",
           std::to_string(g.row_bytes) + " is not the " +
               std::to_string(memory::kv_row_bytes(g.dtype, kv_heads, m.head_dim)) + " bytes of " +
               (m.tensor_parallel > 1 ? "one rank's kv heads" : std::string("kv_heads")) +
               " x head_dim values in " + std::string(ir::name(g.dtype)));
    if (g.row_bytes > kMaxBytes / g.capacity / 2 / g.layers)
      fail("kv", "the cache would exceed 1 TiB");
  }

  void weights(const flatbuffers::Vector<flatbuffers::Offset<fb::Weight>>& ws,
               const std::shared_ptr<const MappedFile>& file, std::int64_t blob_offset) {
    std::string prev;
    for (flatbuffers::uoffset_t k = 0; k < ws.size(); ++k) {
      const fb::Weight& fw = *ws.Get(k);
      ir::Weight w;
      w.name = fw.name()->str();
      const std::string where = "weight @" + w.name;
      if (k > 0 && w.name <= prev)
        fail(where, "weights are not sorted by unique name");
      prev = w.name;
      w.type = codec::decode_type(fw.type(), where);
      for (const auto* fp : *fw.parts()) {
        ir::WeightPart p;
        p.role = fp->role()->str();
        auto d = ir::parse_dtype(fp->dtype()->string_view());
        if (!d)
          fail(where,
               "part '" + p.role + "' has unknown element type '" + fp->dtype()->str() + "'");
        p.dtype = *d;
        std::int64_t n = 1;
        for (std::int64_t s : *fp->shape()) {
          if (s < 0 || s > codec::kMaxElements || (s > 0 && n > codec::kMaxElements / s))
            fail(where, "part '" + p.role + "' has a negative or too large shape");
          n *= s;
          p.shape.push_back(s);
        }
        const std::uint64_t off = fp->offset(), size = fp->size();
        if (off % kBlobAlignment != 0 || off > static_cast<std::uint64_t>(blob_size) ||
            size > static_cast<std::uint64_t>(blob_size) - off)
          fail(where, "part '" + p.role + "' bytes [" + std::to_string(off) + ", +" +
                          std::to_string(size) + ") are not an aligned range of the " +
                          std::to_string(blob_size) + "-byte weight blob");
        if (static_cast<std::int64_t>(size) != ir::byte_size(p.dtype, n))
          fail(where, "part '" + p.role + "' is " + std::to_string(size) +
                          " bytes, its shape and type need " +
                          std::to_string(ir::byte_size(p.dtype, n)));
        p.bytes = file->bytes().subspan(static_cast<std::size_t>(blob_offset) + off, size);
        p.owner = file;
        w.parts.push_back(std::move(p));
      }
      // The same checks the executor makes when it loads a weight, done now so that open()
      // refuses a bad bundle instead of its first run.
      try {
        if (w.type.layout == ir::Layout::panels)
          (void)conversion::packed_view(w);
        else {
          const auto& d = w.part("data");
          if (d.dtype != w.type.dtype ||
              static_cast<std::int64_t>(d.bytes.size()) != w.type.byte_size())
            fail(where, "data part does not match the type " + w.type.str());
        }
      } catch (const Error& e) {
        fail(where, e.what());
      }
      out.weights_.push_back(std::move(w));
    }
  }

  codegen::TensorRef ref(const fb::Ref& r, const std::string& where) {
    codegen::TensorRef t;
    t.type = codec::decode_type(r.type(), where);
    codec::decode(*r.buffer(), t.buffer, where + ".buffer");
    if (r.weight() != nullptr)
      t.weight = r.weight()->str();
    return t;
  }

  std::vector<codegen::TensorRef> refs(const flatbuffers::Vector<flatbuffers::Offset<fb::Ref>>& v,
                                       const std::string& where) {
    std::vector<codegen::TensorRef> o;
    for (flatbuffers::uoffset_t i = 0; i < v.size(); ++i)
      o.push_back(ref(*v.Get(i), where + "[" + std::to_string(i) + "]"));
    return o;
  }

  codegen::Program function(const fb::Function& f) {
    codegen::Program p;
    p.name = f.name()->str();
    const std::string where = "@" + p.name;
    codec::decode(*f.info(), p.info, where + ".info");
    p.args = refs(*f.args(), where + ".args");
    p.results = refs(*f.results(), where + ".results");
    p.positions_arg = bounded(f.positions_arg(), -1, static_cast<std::int64_t>(p.args.size()) - 1,
                              where + ".positions");
    for (flatbuffers::uoffset_t k = 0; k < f.instrs()->size(); ++k) {
      const fb::Instr& fi = *f.instrs()->Get(k);
      const std::string iw = where + " instruction " + std::to_string(k);
      auto kind = ir::parse_op_name(fi.op()->string_view());
      if (!kind || ir::dialect_of(*kind) != ir::Dialect::tpu)
        fail(iw, "'" + fi.op()->str() + "' is not a Tpu op");
      codegen::Instr in;
      in.op = ir::make_op(*kind);
      std::visit([&](auto& op) { codec::decode_record(*fi.attrs(), op, iw + ".attrs", true); },
                 in.op);
      in.operands = refs(*fi.operands(), iw + ".operands");
      in.results = refs(*fi.results(), iw + ".results");
      codec::decode(*fi.plan(), in.plan, iw + ".plan");
      in.planned = fi.planned();
      in.where = fi.where() != nullptr ? fi.where()->str() : iw;
      p.instrs.push_back(std::move(in));
    }
    check_program(p);
    return p;
  }

  /// Every address the executor will form from `p` stays inside its region.
  void check_program(const codegen::Program& p) {
    const std::string where = "@" + p.name;
    if (!p.info.memory)
      fail(where, "has no memory plan");
    const ir::MemoryInfo& mem = *p.info.memory;
    bounded(mem.arena, 0, kMaxBytes, where + " arena");
    bounded(mem.local, 0, kMaxBytes, where + " local memory");
    const memory::KvGeometry& kv = out.kv_;
    if (mem.kv_row != 0 && (mem.kv_row != kv.row_bytes || mem.kv_capacity != kv.capacity))
      fail(where, "was planned for another KV cache geometry");
    const std::int64_t layer_bytes = kv.capacity * kv.row_bytes;
    auto check_ref = [&](const codegen::TensorRef& r, const std::string& w,
                         std::int64_t tile_rows) {
      const ir::Buffer& b = r.buffer;
      const std::int64_t need = r.type.byte_size();
      if (b.offset < 0 || b.size < 0 || b.offset > kMaxBytes || b.size > kMaxBytes)
        fail(w, "has a negative or huge buffer offset / size");
      auto within = [&](std::int64_t end, std::int64_t limit, const char* region) {
        if (end > limit)
          fail(w, std::string("bytes up to ") + std::to_string(end) + " exceed the " + region +
                      " of " + std::to_string(limit));
      };
      if (b.region != ir::Region::local && b.region != ir::Region::weight && b.size != need)
        fail(w, "buffer is " + std::to_string(b.size) + " bytes, its type " + r.type.str() +
                    " needs " + std::to_string(need));
      if (b.region != ir::Region::kv && b.pos_stride != 0)
        fail(w, "only KV buffers move with the position");
      switch (b.region) {
      case ir::Region::input:
        if (b.slot < 0 || b.slot >= static_cast<std::int64_t>(p.args.size()))
          fail(w,
               "names argument " + std::to_string(b.slot) + " of " + std::to_string(p.args.size()));
        within(b.offset + need, p.args[static_cast<std::size_t>(b.slot)].type.byte_size(),
               "argument");
        break;
      case ir::Region::output:
        if (b.slot < 0 || b.slot >= static_cast<std::int64_t>(p.results.size()))
          fail(w, "names result " + std::to_string(b.slot) + " of " +
                      std::to_string(p.results.size()));
        within(b.offset + need, p.results[static_cast<std::size_t>(b.slot)].type.byte_size(),
               "result");
        break;
      case ir::Region::arena:
        within(b.offset + need, mem.arena, "arena");
        break;
      case ir::Region::local:
        within(b.offset + b.size, mem.local, "local memory");
        if (tile_rows > 0 && codegen::rows_of(r.type) > 0 &&
            b.size <
                need / codegen::rows_of(r.type) * std::min(tile_rows, codegen::rows_of(r.type)))
          fail(w, "local buffer is smaller than one tile");
        break;
      case ir::Region::kv: {
        // A batched decode's [B, ...] KV value is one row per conversation, each in its own
        // cache at this offset: one row's bytes must fit.
        const std::int64_t batch = r.type.rank() == 4 ? r.type.shape[0] : 1;
        if (batch < 1 || need % batch != 0)
          fail(w, "KV buffer is not whole rows of its batch");
        const std::int64_t row_need = need / batch;
        if (b.pos_stride != 0) {
          if (b.pos_stride != kv.row_bytes || b.offset % layer_bytes + row_need > layer_bytes)
            fail(w, "moves with the position but is not rows of one layer's cache");
          within(b.offset - b.offset % layer_bytes + layer_bytes, kv.slot_bytes(), "KV cache");
        } else {
          within(b.offset + row_need, kv.slot_bytes(), "KV cache");
        }
        break;
      }
      case ir::Region::weight: {
        const ir::Weight* it = out.find_weight(r.weight);
        if (it == nullptr)
          fail(w, "reads weight @" + r.weight + " which the bundle does not hold");
        if (!(it->type == r.type))
          fail(w,
               "reads weight @" + r.weight + " as " + r.type.str() + ", it is " + it->type.str());
        break;
      }
      }
    };
    for (std::size_t i = 0; i < p.args.size(); ++i) {
      const auto& a = p.args[i];
      if (a.buffer.region != ir::Region::kv &&
          (a.buffer.region != ir::Region::input || a.buffer.slot != static_cast<std::int64_t>(i)))
        fail(where, "argument " + std::to_string(i) + " is not its own input or the KV cache");
      check_ref(a, where + " argument " + std::to_string(i), 0);
    }
    for (std::size_t i = 0; i < p.results.size(); ++i)
      check_ref(p.results[i], where + " result " + std::to_string(i), 0);
    std::int64_t group = -2, tile_rows = 0;
    std::set<std::int64_t> groups_seen;
    for (std::size_t k = 0; k < p.instrs.size(); ++k) {
      const codegen::Instr& in = p.instrs[k];
      const std::string iw = in.where;
      const ir::OpPlan& pl = in.plan;
      bounded(pl.group, -1, 1 << 20, iw + " plan.group");
      bounded(pl.tile.count, 1, 1 << 24, iw + " plan.tile.count");
      bounded(pl.tile.size, 0, 1 << 24, iw + " plan.tile.size");
      bounded(pl.split.parts, 1, 4096, iw + " plan.split.parts");
      // plan.local is the group's intermediate footprint as the tiler counted it, a budget the
      // executor subtracts from its per-core local memory (never an address): bounded by that
      // memory, max(target.local_memory, max_local), not by this function's placed peak, which
      // reuse can make smaller (tiles below max_input_length did).
      bounded(pl.local, 0, std::max(out.target_.local_memory, out.max_local_), iw + " plan.local");
      if (pl.group != group) {
        if (pl.group >= 0 && !groups_seen.insert(pl.group).second)
          fail(iw, "layer group " + std::to_string(pl.group) + " is not contiguous");
        group = pl.group;
        tile_rows = 0;
        if (pl.group >= 0 && pl.tile.dim == ir::SliceDim::rows && pl.tile.count > 1) {
          if (in.results.empty() || codegen::rows_of(in.results[0].type) <= 0 || pl.tile.size <= 0)
            fail(iw, "a row-tiled group must start with an op of [1, L, ...] rows");
          tile_rows = pl.tile.size;
        }
      }
      // Types: what the op infers from its operands must be what it declares.
      std::vector<ir::TensorType> ot;
      for (const auto& o : in.operands)
        ot.push_back(o.type);
      std::vector<ir::TensorType> rt;
      for (const auto& r : in.results)
        rt.push_back(r.type);
      try {
        const auto want = ir::infer_result_types(in.op, ot, nullptr);
        if (want != rt)
          fail(iw, "result types do not follow from the operands");
      } catch (const Error& e) {
        fail(iw, e.what());
      }
      for (std::size_t i = 0; i < in.operands.size(); ++i)
        check_ref(in.operands[i], iw + " operand " + std::to_string(i), tile_rows);
      for (std::size_t i = 0; i < in.results.size(); ++i)
        check_ref(in.results[i], iw + " result " + std::to_string(i), tile_rows);
    }
  }
};

std::shared_ptr<const Bundle> Bundle::open(const std::filesystem::path& path, FileAccess access) {
  auto file = MappedFile::open(path, access);
  return decode(file, 0, file->bytes().size(), path.string(), false);
}

std::shared_ptr<const Bundle> Bundle::decode(const std::shared_ptr<const MappedFile>& file,
                                             std::uint64_t base, std::uint64_t size,
                                             const std::string& name, bool nested) {
  const auto bytes =
      file->bytes().subspan(static_cast<std::size_t>(base), static_cast<std::size_t>(size));
  auto refuse = [&](const std::string& why) -> void {
    throw Error(ErrorKind::invalid_input, name, why);
  };
  if (bytes.size() < static_cast<std::size_t>(kHeaderBytes) ||
      std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    refuse("not a tpullm bundle (no TPULLMB header)");
  const Header h = Header::decode(bytes.first(kHeaderBytes));
  if (h.version != kFormatVersion)
    refuse("bundle format version " + std::to_string(h.version) + ", this tpullm reads version " +
           std::to_string(kFormatVersion) + " (recompile the model)");
  if (h.file_size != bytes.size())
    refuse("truncated or extended: the header says " + std::to_string(h.file_size) +
           " bytes, the file has " + std::to_string(bytes.size()));
  if (h.header_bytes != kHeaderBytes || h.meta_offset != static_cast<std::uint64_t>(kHeaderBytes) ||
      h.meta_size == 0 || h.meta_size > h.file_size - h.meta_offset ||
      h.blob_offset % kBlobAlignment != 0 || h.blob_offset < h.meta_offset + h.meta_size ||
      h.blob_offset > h.file_size || h.blob_size != h.file_size - h.blob_offset)
    refuse("corrupted header (sections do not tile the file)");
  const auto meta = bytes.subspan(h.meta_offset, h.meta_size);
  if (checksum(meta) != h.meta_checksum)
    refuse("corrupted metadata (checksum mismatch)");
  flatbuffers::Verifier verifier(reinterpret_cast<const std::uint8_t*>(meta.data()), meta.size(),
                                 64, 1u << 26);
  if (!fb::VerifyBundleBuffer(verifier))
    refuse("corrupted metadata (the FlatBuffers verifier rejects it)");
  const fb::Bundle& root = *fb::GetBundle(meta.data());
  auto b = std::make_shared<Bundle>();
  b->meta_checksum_ = h.meta_checksum;
  BundleReader rd{*b, static_cast<std::int64_t>(h.blob_size)};
  try {
    if (root.blob_size() != h.blob_size)
      fail("blob_size", "differs from the header's");
    rd.model(*root.model());
    rd.target(*root.target());
    rd.text(root.text());
    rd.kv(*root.kv());
    // Weight checksums: one per chunk, chunks of a sane power-of-two size.
    const std::uint64_t chunk = root.blob_chunk_bytes();
    if (root.blob_crc32c() == nullptr)
      fail("blob_crc32c", "the weight blob has no checksums (written by an older tpullm: "
                          "recompile the model)");
    if (chunk < (std::uint64_t{1} << 12) || chunk > (std::uint64_t{1} << 32) ||
        (chunk & (chunk - 1)) != 0)
      fail("blob_chunk_bytes", std::to_string(chunk) + " is not a power of two in [4 KiB, 4 GiB]");
    const std::uint64_t chunks = (h.blob_size + chunk - 1) / chunk;
    if (root.blob_crc32c()->size() != chunks)
      fail("blob_crc32c", std::to_string(root.blob_crc32c()->size()) + " checksums for " +
                              std::to_string(chunks) + " chunks of the weight blob");
    b->chunk_bytes_ = chunk;
    b->chunk_crcs_.assign(root.blob_crc32c()->begin(), root.blob_crc32c()->end());
    rd.weights(*root.weights(), file, static_cast<std::int64_t>(base + h.blob_offset));
    b->max_local_ =
        BundleReader::bounded(root.max_local(), 0, BundleReader::kMaxBytes, "max_local");
    std::set<std::string> names;
    for (const auto* f : *root.functions()) {
      b->programs_.push_back(rd.function(*f));
      if (!names.insert(b->programs_.back().name).second)
        fail("@" + b->programs_.back().name, "appears twice");
    }
  } catch (const DecodeError& e) {
    refuse("invalid bundle: " + e.what);
  }
  if (root.draft_size() != 0) {
    const std::uint64_t off = root.draft_offset(), n = root.draft_size();
    if (nested)
      refuse("invalid bundle: an embedded draft model embeds another");
    if (off % kBlobAlignment != 0 || off > h.blob_size || n > h.blob_size - off)
      refuse("invalid bundle: draft_offset / draft_size [" + std::to_string(off) + ", +" +
             std::to_string(n) + ") are not an aligned range of the " +
             std::to_string(h.blob_size) + "-byte weight blob");
    b->draft_ = decode(file, base + h.blob_offset + off, n, name + " (its draft model)", true);
    if (b->draft_->model().vocab != b->model_.vocab ||
        b->draft_->model().params.seq_length != b->model_.params.seq_length)
      refuse("invalid bundle: its draft model's vocabulary or sequence length differs from the "
             "model's");
  }
  b->file_bytes_ = static_cast<std::int64_t>(h.file_size);
  b->blob_bytes_ = static_cast<std::int64_t>(h.blob_size);
  b->max_arena_ = root.max_arena();
  b->max_local_ = root.max_local();
  b->lower_bound_ = root.arena_lower_bound();
  b->version_ = h.version;
  b->compiler_ = root.compiler() != nullptr ? root.compiler()->str() : "";
  b->path_ = name;
  b->identity_ = file->identity();
  b->blob_ = bytes.subspan(h.blob_offset, h.blob_size);
  b->file_ = file;
  return b;
}

WeightCheck Bundle::verify_weights(std::int64_t threads) const {
  return verify_weights(threads, {});
}

WeightCheck Bundle::verify_weights(std::int64_t threads,
                                   const std::function<bool(const ir::Weight&)>& which) const {
  const auto t0 = std::chrono::steady_clock::now();
  const auto chunks = static_cast<std::int64_t>(chunk_crcs_.size());
  check(threads >= 0 && threads <= 4096, ErrorKind::invalid_input, "threads",
        "must be in [0, 4096], got ", threads);
  // The chunks to read, in increasing order: all, or those holding a byte of a chosen weight.
  std::vector<std::int64_t> list;
  if (!which) {
    list.resize(static_cast<std::size_t>(chunks));
    for (std::int64_t k = 0; k < chunks; ++k)
      list[static_cast<std::size_t>(k)] = k;
  } else {
    std::vector<bool> used(static_cast<std::size_t>(chunks), false);
    for (const auto& w : weights_)
      if (which(w))
        for (const auto& p : w.parts) {
          if (p.bytes.empty())
            continue;
          const auto off = static_cast<std::uint64_t>(p.bytes.data() - blob_.data());
          const auto last = off + p.bytes.size() - 1;
          for (std::uint64_t k = off / chunk_bytes_; k <= last / chunk_bytes_ && k < used.size();
               ++k)
            used[k] = true;
        }
    for (std::int64_t k = 0; k < chunks; ++k)
      if (used[static_cast<std::size_t>(k)])
        list.push_back(k);
  }
  const auto listed = static_cast<std::int64_t>(list.size());
  const std::int64_t workers = std::max<std::int64_t>(
      1, std::min<std::int64_t>(threads > 0 ? threads : kernels::usable_cores(), listed));
  // Chunks handed out in increasing order; a worker stops at the lowest bad chunk seen so far,
  // so every chunk below the reported one has been checked, whatever the thread count.
  std::atomic<std::int64_t> next{0}, bad{chunks};
  std::atomic<std::int64_t> read_bytes{0};
  auto work = [&] {
    for (;;) {
      const std::int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= listed)
        return;
      const std::int64_t k = list[static_cast<std::size_t>(i)];
      if (k >= bad.load(std::memory_order_relaxed))
        return;
      const std::uint64_t begin = static_cast<std::uint64_t>(k) * chunk_bytes_;
      const std::uint64_t n = std::min<std::uint64_t>(chunk_bytes_, blob_.size() - begin);
      read_bytes.fetch_add(static_cast<std::int64_t>(n), std::memory_order_relaxed);
      if (crc32c(blob_.subspan(begin, n)) != chunk_crcs_[static_cast<std::size_t>(k)]) {
        std::int64_t seen = bad.load(std::memory_order_relaxed);
        while (k < seen && !bad.compare_exchange_weak(seen, k, std::memory_order_relaxed)) {
        }
      }
    }
  };
  {
    std::vector<std::jthread> pool;
    for (std::int64_t t = 1; t < workers; ++t)
      pool.emplace_back(work);
    work();
  }
  if (const std::int64_t k = bad.load(); k < chunks) {
    const std::uint64_t begin = static_cast<std::uint64_t>(k) * chunk_bytes_;
    const std::uint64_t n = std::min<std::uint64_t>(chunk_bytes_, blob_.size() - begin);
    std::string holder;
    for (const auto& w : weights_) {
      for (const auto& p : w.parts) {
        const auto off = static_cast<std::uint64_t>(p.bytes.data() - blob_.data());
        if (off < begin + n && off + p.bytes.size() > begin) {
          holder = ", which holds weight @" + w.name;
          break;
        }
      }
      if (!holder.empty())
        break;
    }
    throw Error(ErrorKind::invalid_input, path_,
                "corrupted weights: blob bytes [" + std::to_string(begin) + ", " +
                    std::to_string(begin + n) + ") fail their CRC-32C" + holder +
                    " (the file was damaged after it was compiled; recompile or copy it again)");
  }
  WeightCheck r;
  r.chunks = listed;
  r.bytes = read_bytes.load();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

namespace {

/// At most this many files are remembered (the oldest are dropped), and a record file larger
/// than kRecordMaxBytes is ignored (and rewritten).
constexpr std::size_t kRecordEntries = 512, kRecordMaxBytes = 64 << 10;

/// FNV-1a 64 over `bytes`, continuing from `h`.
std::uint64_t record_hash(std::string_view bytes, std::uint64_t h = 0xcbf29ce484222325ull) {
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

/// The record's key of `b` opened with identity `id`: 16 hex digits.
std::string record_key(const Bundle& b, const FileIdentity& id) {
  std::error_code ec;
  auto canonical = std::filesystem::absolute(b.path(), ec);
  if (!ec)
    canonical = std::filesystem::weakly_canonical(canonical, ec);
  std::string s = "tpullm-verified-v1 " + (ec ? b.path() : canonical.string());
  for (const std::int64_t v :
       {static_cast<std::int64_t>(id.device), static_cast<std::int64_t>(id.inode), id.size,
        id.mtime_ns, id.ctime_ns})
    s += " " + std::to_string(v);
  for (const std::uint32_t c : b.weight_checksums())
    s += " " + std::to_string(c);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(record_hash(s)));
  return hex;
}

/// The record's keys, oldest first; empty when it is missing, unreadable, too large or not a
/// regular file (a FIFO is refused without blocking). Lines that are not keys are dropped.
std::vector<std::string> read_record(const std::filesystem::path& file) {
  std::vector<std::string> keys;
  try {
    const std::string text = read_regular_file(file, kRecordMaxBytes);
    std::size_t i = 0;
    while (i < text.size()) {
      const std::size_t j = std::min(text.find('\n', i), text.size());
      const std::string_view line(text.data() + i, j - i);
      if (line.size() == 16 && line.find_first_not_of("0123456789abcdef") == line.npos)
        keys.emplace_back(line);
      i = j + 1;
    }
  } catch (const Error&) {
    keys.clear();
  }
  return keys;
}

/// Adds `key` to the record (written to a temporary file beside it, renamed over it); any
/// failure leaves the record as it was.
void remember(const std::filesystem::path& file, const std::string& key) noexcept {
  try {
    namespace fs = std::filesystem;
    std::vector<std::string> keys = read_record(file);
    keys.erase(std::remove(keys.begin(), keys.end(), key), keys.end());
    keys.push_back(key);
    if (keys.size() > kRecordEntries)
      keys.erase(keys.begin(), keys.end() - static_cast<std::ptrdiff_t>(kRecordEntries));
    std::string text;
    for (const auto& k : keys)
      text += k + "\n";
    std::error_code ec;
    fs::create_directories(file.parent_path(), ec);
    if (ec)
      return;
    std::string tmp = (file.parent_path() / ".verified-bundles.XXXXXX").string();
    const int fd = ::mkstemp(tmp.data());
    if (fd < 0)
      return;
    bool ok = true;
    for (std::size_t done = 0; ok && done < text.size();) {
      const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
      if (w < 0 && errno == EINTR)
        continue;
      ok = w > 0;
      done += ok ? static_cast<std::size_t>(w) : 0;
    }
    ok = ::close(fd) == 0 && ok;
    if (!ok || ::rename(tmp.c_str(), file.c_str()) != 0)
      ::unlink(tmp.c_str());
  } catch (...) { // NOLINT(bugprone-empty-catch): the record is only an optimisation
  }
}

std::int64_t wall_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

} // namespace

std::filesystem::path verified_record_path() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/')
    return std::filesystem::path(xdg) / "tpullm" / "verified-bundles";
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] == '/')
    return std::filesystem::path(home) / ".cache" / "tpullm" / "verified-bundles";
  return {};
}

WeightVerifyResult check_weights(const Bundle& b, WeightVerify how, std::int64_t threads) {
  WeightVerifyResult r;
  switch (how) {
  case WeightVerify::never:
    return r;
  case WeightVerify::always:
  case WeightVerify::remembered:
    break;
  }
  const std::filesystem::path record = verified_record_path();
  const std::string key = record.empty() ? std::string() : record_key(b, b.file_identity());
  if (how == WeightVerify::remembered && !key.empty()) {
    const auto keys = read_record(record);
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) {
      r.remembered = true;
      return r;
    }
  }
  const std::int64_t start = wall_clock_ns();
  r.check = b.verify_weights(threads);
  r.verified = true;
  // Remembered only when the file is the one that was opened, unchanged since (ctime moves on
  // every write), and was last changed well before the pass began.
  struct stat st {};
  if (!key.empty() && ::stat(b.path().c_str(), &st) == 0 &&
      file_identity(st) == b.file_identity() &&
      b.file_identity().ctime_ns < start - std::int64_t{2000000000})
    remember(record, key);
  return r;
}

} // namespace tpullm::bundle
