// write_bundle: Programs and weights of a compiled model -> one bundle file (bundle.hpp).
#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>

#include "bundle_format.hpp"
#include "tpullm/bundle/bundle.hpp"
#include "tpullm/frontend/text_files.hpp"
#include "tpullm/frontend/model_desc.hpp"
#include "tpullm/frontend/tensor_parallel.hpp"
#include "tpullm/support/crc32c.hpp"
#include "tpullm/version.hpp"
#include "value_codec.hpp"

namespace tpullm::bundle {

namespace {

using codec::Builder;
namespace fb = ::tpullm::fbs;

/// Where one stored part lives in the blob.
struct Placed {
  std::span<const std::byte> bytes;
  std::uint64_t offset = 0;
};

/// Lays out the distinct weight parts in the blob: a part whose bytes are the same memory as,
/// or equal in content to, an earlier part is stored once.
class BlobLayout {
public:
  std::uint64_t place(std::span<const std::byte> bytes, WriteStats& st) {
    ++st.weight_parts;
    if (auto it = by_address_.find({bytes.data(), bytes.size()}); it != by_address_.end()) {
      st.deduped_bytes += static_cast<std::int64_t>(bytes.size());
      return parts_[it->second].offset;
    }
    const std::uint64_t h = content_hash(bytes);
    auto [lo, hi] = by_content_.equal_range(h);
    for (auto it = lo; it != hi; ++it) {
      const Placed& p = parts_[it->second];
      if (p.bytes.size() == bytes.size() &&
          std::memcmp(p.bytes.data(), bytes.data(), bytes.size()) == 0) {
        st.deduped_bytes += static_cast<std::int64_t>(bytes.size());
        by_address_.emplace(std::pair{bytes.data(), bytes.size()}, it->second);
        return p.offset;
      }
    }
    const std::uint64_t off = size_;
    size_ = align_up(size_ + bytes.size(), static_cast<std::uint64_t>(kBlobAlignment));
    by_address_.emplace(std::pair{bytes.data(), bytes.size()}, parts_.size());
    by_content_.emplace(h, parts_.size());
    parts_.push_back({bytes, off});
    ++st.unique_parts;
    return off;
  }
  std::uint64_t size() const { return size_; }
  const std::vector<Placed>& parts() const { return parts_; }

  /// CRC-32C of every `chunk`-byte chunk of the blob as it will be written (parts at their
  /// offsets, zero padding between them), without building the blob in memory.
  std::vector<std::uint32_t> chunk_crcs(std::uint64_t chunk) const {
    std::vector<std::uint32_t> crcs((size_ + chunk - 1) / chunk, 0);
    static const std::byte zeros[4096] = {};
    std::uint64_t at = 0; // bytes of the blob accounted for
    auto feed = [&](const std::byte* p, std::uint64_t n) {
      while (n > 0) {
        const std::uint64_t k = at / chunk, room = (k + 1) * chunk - at;
        const std::uint64_t take = std::min(n, room);
        crcs[k] = crc32c({p, static_cast<std::size_t>(take)}, crcs[k]);
        if (p != zeros)
          p += take;
        at += take;
        n -= take;
      }
    };
    auto pad_to = [&](std::uint64_t pos) {
      while (at < pos) {
        const std::uint64_t n = std::min<std::uint64_t>(pos - at, sizeof zeros);
        feed(zeros, n);
      }
    };
    for (const auto& part : parts_) {
      pad_to(part.offset);
      feed(part.bytes.data(), part.bytes.size());
    }
    pad_to(size_);
    return crcs;
  }

private:
  struct AddrHash {
    std::size_t operator()(const std::pair<const std::byte*, std::size_t>& k) const {
      return std::hash<const void*>()(k.first) ^ (k.second * 0x9e3779b97f4a7c15ull);
    }
  };
  /// Hash of the size and a sample of the bytes (at most 64 KiB read): only parts with equal
  /// hashes are compared in full.
  static std::uint64_t content_hash(std::span<const std::byte> b) {
    std::uint64_t h = 0xcbf29ce484222325ull ^ b.size();
    const std::size_t step = std::max<std::size_t>(1, b.size() / 65536);
    for (std::size_t i = 0; i < b.size(); i += step)
      h = (h ^ static_cast<std::uint64_t>(b[i])) * 0x100000001b3ull;
    return h;
  }
  std::map<std::pair<const std::byte*, std::size_t>, std::size_t> by_address_;
  std::unordered_multimap<std::uint64_t, std::size_t> by_content_;
  std::vector<Placed> parts_;
  std::uint64_t size_ = 0;
};

flatbuffers::Offset<fb::Ref> encode_ref(Builder& b, const codegen::TensorRef& r) {
  auto t = codec::encode_type(b, r.type);
  auto buf = codec::encode(b, r.buffer);
  auto w = r.weight.empty() ? 0 : b.CreateString(r.weight);
  return fb::CreateRef(b, t, buf, w);
}

flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::Ref>>>
encode_refs(Builder& b, const std::vector<codegen::TensorRef>& refs) {
  std::vector<flatbuffers::Offset<fb::Ref>> v;
  for (const auto& r : refs)
    v.push_back(encode_ref(b, r));
  return b.CreateVector(v);
}

flatbuffers::Offset<fb::Function> encode_program(Builder& b, const codegen::Program& p) {
  std::vector<flatbuffers::Offset<fb::Instr>> instrs;
  for (const auto& in : p.instrs) {
    auto name = b.CreateString(std::string(ir::op_name(in.kind())));
    auto attrs = std::visit([&](const auto& op) { return codec::encode_attrs(b, op); }, in.op);
    auto ops = encode_refs(b, in.operands);
    auto res = encode_refs(b, in.results);
    auto plan = codec::encode(b, in.plan);
    auto where = b.CreateString(in.where);
    instrs.push_back(fb::CreateInstr(b, name, attrs, ops, res, plan, in.planned, where));
  }
  auto name = b.CreateString(p.name);
  auto info = codec::encode(b, p.info);
  auto args = encode_refs(b, p.args);
  auto results = encode_refs(b, p.results);
  auto iv = b.CreateVector(instrs);
  return fb::CreateFunction(b, name, info, args, results, iv, p.positions_arg);
}

} // namespace

WriteStats write_bundle(const codegen::CompiledModel& model, const ModelInfo& info,
                        std::ostream& out, std::span<const std::byte> draft) {
  WriteStats st;
  // Every weight a program reads, by name (sorted: the order of the file never depends on
  // hash maps or on which module compiled first).
  std::map<std::string, const ir::Weight*> used;
  for (const auto& p : model.programs)
    for (const auto& in : p.instrs)
      for (const auto& r : in.operands)
        if (r.buffer.region == ir::Region::weight && !used.count(r.weight)) {
          const ir::Weight* w = nullptr;
          for (const auto& m : model.modules)
            if ((w = m.find_weight(r.weight)) != nullptr)
              break;
          check(w != nullptr && w->has_data(), ErrorKind::invalid_input, "@" + p.name,
                "reads weight @", r.weight, " which has no data in the compiled modules");
          used.emplace(r.weight, w);
        }

  Builder b(1 << 20);
  b.ForceDefaults(true);
  BlobLayout blob;
  // The blob holds a tensor-parallel rank's shards together (frontend::tp_weight_rank), after
  // the weights every rank reads, so that a rank's weight check reads its own chunks and no
  // other rank's; an ordinary bundle's order is the names'.
  std::vector<std::pair<std::int64_t, const std::string*>> order;
  for (const auto& [name, w] : used)
    order.emplace_back(frontend::tp_weight_rank(name), &name);
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::map<std::string_view, std::vector<std::uint64_t>> offsets;
  for (const auto& [rank, name] : order)
    for (const auto& part : used.at(*name)->parts)
      offsets[*name].push_back(blob.place(part.bytes, st));
  std::vector<flatbuffers::Offset<fb::Weight>> weights;
  for (const auto& [name, w] : used) {
    std::vector<flatbuffers::Offset<fb::WeightPart>> parts;
    const auto& at = offsets.at(name);
    for (std::size_t i = 0; i < w->parts.size(); ++i) {
      const auto& part = w->parts[i];
      const std::uint64_t off = at[i];
      auto role = b.CreateString(part.role);
      auto dt = b.CreateString(std::string(ir::name(part.dtype)));
      auto shape = b.CreateVector(part.shape);
      parts.push_back(fb::CreateWeightPart(b, role, dt, shape, off, part.bytes.size()));
    }
    auto n = b.CreateString(name);
    auto t = codec::encode_type(b, w->type);
    auto pv = b.CreateVector(parts);
    weights.push_back(fb::CreateWeight(b, n, t, pv));
  }
  // The draft bundle's bytes after every weight (a range of the blob like a weight part).
  std::uint64_t draft_offset = 0;
  if (!draft.empty()) {
    check(draft.size() >= static_cast<std::size_t>(kHeaderBytes) &&
              std::memcmp(draft.data(), kMagic, sizeof kMagic) == 0,
          ErrorKind::internal, "bundle", "the draft model to embed is not a bundle");
    WriteStats ignored;
    draft_offset = blob.place(draft, ignored);
  }
  std::vector<flatbuffers::Offset<fb::Function>> functions;
  for (const auto& p : model.programs)
    functions.push_back(encode_program(b, p));

  const auto& prm = info.params;
  auto fam = b.CreateString(info.family);
  auto dl = b.CreateVector(prm.decode_lengths());
  auto eos = b.CreateVector(info.eos_token_ids);
  auto mode = b.CreateString(info.mode);
  auto src = b.CreateString(info.source);
  const auto pl = prm.prefill_lengths(); // max_input_length first, then the shorter variants
  flatbuffers::Offset<flatbuffers::Vector<std::int64_t>> plv = 0;
  if (pl.size() > 1)
    plv = b.CreateVector(std::vector<std::int64_t>(pl.begin() + 1, pl.end()));
  auto m = fb::CreateModel(b, fam, info.layers, info.hidden, info.intermediate, info.heads,
                           info.kv_heads, info.head_dim, info.vocab, prm.seq_length,
                           prm.max_input_length, dl, prm.with_history, info.bos_token_id, eos, mode,
                           src, plv, info.tensor_parallel);
  std::vector<flatbuffers::Offset<flatbuffers::String>> dts;
  for (auto d : model.target.weight_dtypes)
    dts.push_back(b.CreateString(std::string(ir::name(d))));
  auto tn = b.CreateString(model.target.name);
  auto dtv = b.CreateVector(dts);
  auto isa = b.CreateString(host_isa());
  auto tg = fb::CreateTarget(b, tn, model.target.cores, model.target.local_memory,
                             model.target.alignment, dtv, isa);
  auto kv_dtype = b.CreateString(std::string(ir::name(model.kv.dtype)));
  auto kv = fb::CreateKvCache(b, model.kv.layers, model.kv.capacity, model.kv.row_bytes, kv_dtype);
  auto fv = b.CreateVector(functions);
  auto wv = b.CreateVector(weights);
  auto comp = b.CreateString("tpullm " + std::string(kVersionString));
  flatbuffers::Offset<fb::Text> text = 0;
  if (!info.text.empty()) {
    auto tj = b.CreateString(info.text.tokenizer_json);
    auto tc = b.CreateString(info.text.tokenizer_config_json);
    auto gc = b.CreateString(info.text.generation_config_json);
    text = fb::CreateText(b, tj, tc, gc);
  }
  auto crcs = b.CreateVector(blob.chunk_crcs(kWeightChunkBytes));
  // The fields in CreateBundle's order; the draft's only when there is one (so a bundle without
  // one is byte for byte what it was before the field existed).
  fb::BundleBuilder root_builder(b);
  if (!draft.empty()) {
    root_builder.add_draft_size(draft.size());
    root_builder.add_draft_offset(draft_offset);
  }
  root_builder.add_blob_chunk_bytes(kWeightChunkBytes);
  root_builder.add_arena_lower_bound(model.arena_lower_bound);
  root_builder.add_max_local(model.max_local);
  root_builder.add_max_arena(model.max_arena);
  root_builder.add_blob_size(blob.size());
  root_builder.add_text(text);
  root_builder.add_blob_crc32c(crcs);
  root_builder.add_compiler(comp);
  root_builder.add_weights(wv);
  root_builder.add_functions(fv);
  root_builder.add_kv(kv);
  root_builder.add_target(tg);
  root_builder.add_model(m);
  const auto root = root_builder.Finish();
  b.Finish(root, fb::BundleIdentifier());

  Header h;
  h.meta_offset = kHeaderBytes;
  h.meta_size = b.GetSize();
  h.blob_offset = align_up(h.meta_offset + h.meta_size, static_cast<std::uint64_t>(kBlobAlignment));
  h.blob_size = blob.size();
  h.file_size = h.blob_offset + h.blob_size;
  h.meta_checksum = checksum({reinterpret_cast<const std::byte*>(b.GetBufferPointer()),
                              static_cast<std::size_t>(b.GetSize())});

  static const char zeros[kBlobAlignment] = {};
  std::uint64_t at = 0;
  auto put = [&](const void* p, std::uint64_t n) {
    out.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
    check(static_cast<bool>(out), ErrorKind::io, "bundle", "write failed after ", at, " bytes");
    at += n;
  };
  auto pad_to = [&](std::uint64_t pos) {
    while (at < pos)
      put(zeros, std::min<std::uint64_t>(pos - at, sizeof zeros));
  };
  const auto hb = h.encode();
  put(hb.data(), hb.size());
  put(b.GetBufferPointer(), b.GetSize());
  pad_to(h.blob_offset);
  for (const auto& part : blob.parts()) {
    pad_to(h.blob_offset + part.offset);
    put(part.bytes.data(), part.bytes.size());
  }
  pad_to(h.file_size);
  out.flush();
  check(static_cast<bool>(out), ErrorKind::io, "bundle", "flush failed");
  st.file_bytes = static_cast<std::int64_t>(h.file_size);
  st.meta_bytes = static_cast<std::int64_t>(h.meta_size);
  st.blob_bytes = static_cast<std::int64_t>(h.blob_size);
  return st;
}

ModelInfo make_model_info(const frontend::ModelDesc& desc, const frontend::StageParams& params,
                          const std::string& mode) {
  ModelInfo i;
  i.family = std::string(frontend::family_name(desc.family));
  i.layers = desc.dims.layers;
  i.hidden = desc.dims.hidden;
  i.intermediate = desc.dims.intermediate;
  i.heads = desc.dims.heads;
  i.kv_heads = desc.dims.kv_heads;
  i.head_dim = desc.dims.head_dim;
  i.vocab = desc.dims.vocab;
  i.params = params;
  i.bos_token_id = desc.bos_token_id.value_or(-1);
  i.eos_token_ids = desc.eos_token_ids;
  i.mode = mode;
  i.source = desc.dir.filename().string();
  if (i.source.empty())
    i.source = desc.dir.parent_path().filename().string();
  i.text = desc.text ? *desc.text : frontend::read_text_files(desc.dir);
  frontend::check_text_files(i.text, i.vocab, desc.dir.string());
  return i;
}

std::string host_isa() {
#if defined(__x86_64__)
  return "x86_64";
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "unknown";
#endif
}

} // namespace tpullm::bundle
