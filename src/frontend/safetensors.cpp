// Out-of-line definitions of tpullm/frontend/safetensors.hpp (compiled once into tpullm_core).
#include "tpullm/frontend/safetensors.hpp"
#include "tpullm/support/json.hpp"

namespace tpullm::frontend {

std::optional<DType> parse_dtype(std::string_view s) noexcept {
  for (DType t : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i64, DType::i32,
                  DType::i16, DType::i8, DType::u8, DType::boolean})
    if (dtype_name(t) == s)
      return t;
  return std::nullopt;
}

std::string shape_str(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i)
      s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

auto TensorView::to_f32() const -> std::vector<float> {
  const std::size_t n = static_cast<std::size_t>(numel());
  std::vector<float> out(n);
  switch (dtype) {
  case DType::f32:
    if (n)
      std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  case DType::f16:
    for (std::size_t i = 0; i < n; ++i)
      out[i] = f16_to_f32(load<std::uint16_t>(i));
    return out;
  case DType::bf16:
    for (std::size_t i = 0; i < n; ++i)
      out[i] = bf16_to_f32(load<std::uint16_t>(i));
    return out;
  case DType::f64:
    for (std::size_t i = 0; i < n; ++i)
      out[i] = static_cast<float>(load<double>(i));
    return out;
  case DType::i64:
  case DType::i32:
  case DType::i16:
  case DType::i8:
  case DType::u8:
  case DType::boolean:
    break;
  }
  throw_error(ErrorKind::unsupported, where(), "cannot convert ", dtype_name(dtype),
              " to f32 (only F32, F16, BF16, F64)");
}

auto TensorView::to_i64() const -> std::vector<std::int64_t> {
  const std::size_t n = static_cast<std::size_t>(numel());
  std::vector<std::int64_t> out(n);
  switch (dtype) {
  case DType::i64:
    for (std::size_t i = 0; i < n; ++i)
      out[i] = load<std::int64_t>(i);
    return out;
  case DType::i32:
    for (std::size_t i = 0; i < n; ++i)
      out[i] = load<std::int32_t>(i);
    return out;
  case DType::i16:
    for (std::size_t i = 0; i < n; ++i)
      out[i] = load<std::int16_t>(i);
    return out;
  case DType::i8:
    for (std::size_t i = 0; i < n; ++i)
      out[i] = load<std::int8_t>(i);
    return out;
  case DType::u8:
  case DType::boolean:
    for (std::size_t i = 0; i < n; ++i)
      out[i] = load<std::uint8_t>(i);
    return out;
  case DType::f64:
  case DType::f32:
  case DType::f16:
  case DType::bf16:
    break;
  }
  throw_error(ErrorKind::unsupported, where(), "cannot convert ", dtype_name(dtype),
              " to an integer type");
}

auto TensorView::to_i32() const -> std::vector<std::int32_t> {
  if (dtype == DType::i32)
    return copy_as<std::int32_t>();
  const std::vector<std::int64_t> wide = to_i64();
  std::vector<std::int32_t> out(wide.size());
  for (std::size_t i = 0; i < wide.size(); ++i) {
    check(wide[i] >= std::numeric_limits<std::int32_t>::min() &&
              wide[i] <= std::numeric_limits<std::int32_t>::max(),
          ErrorKind::invalid_input, where(), "element ", i, " = ", wide[i],
          " does not fit in int32");
    out[i] = static_cast<std::int32_t>(wide[i]);
  }
  return out;
}

} // namespace tpullm::frontend

namespace tpullm::frontend::detail {

nlohmann::json parse_json_strict(std::string_view text, const std::string& where) {
  std::vector<std::set<std::string>> keys;
  std::string dup;
  nlohmann::json::parser_callback_t cb = [&](int, nlohmann::json::parse_event_t ev,
                                             nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    switch (ev) {
    case E::object_start:
      keys.emplace_back();
      break;
    case E::object_end:
      if (!keys.empty())
        keys.pop_back();
      break;
    case E::key:
      if (!keys.empty() && parsed.is_string()) {
        const auto& k = parsed.get_ref<const std::string&>();
        if (!keys.back().insert(k).second && dup.empty())
          dup = k;
      }
      break;
    case E::array_start:
    case E::array_end:
    case E::value:
      break;
    }
    return true;
  };
  nlohmann::json j = parse_json(text, where, "invalid JSON", cb);
  check(dup.empty(), ErrorKind::invalid_input, where, "invalid JSON: duplicate key '", dup, "'");
  return j;
}

std::optional<std::uint64_t> json_uint(const nlohmann::json& v) {
  if (v.is_number_unsigned())
    return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0)
    return static_cast<std::uint64_t>(v.get<std::int64_t>());
  return std::nullopt;
}

} // namespace tpullm::frontend::detail

namespace tpullm::frontend {

auto SafetensorsFile::parse(std::span<const std::byte> file, std::shared_ptr<const void> keepalive,
                            std::string source) -> SafetensorsFile {
  SafetensorsFile st;
  st.source_ = std::move(source);
  const std::string& where = st.source_;
  check(file.size() >= 8, ErrorKind::invalid_input, where, "file is ", file.size(),
        " bytes, too small for the 8-byte header length");
  std::uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  check(n <= kMaxSafetensorsHeader, ErrorKind::invalid_input, where, "header length ", n,
        " is larger than the ", kMaxSafetensorsHeader, "-byte limit");
  check(n <= file.size() - 8, ErrorKind::invalid_input, where, "header length ", n,
        " exceeds the file size (", file.size(), " bytes; truncated file?)");
  check(n >= 2, ErrorKind::invalid_input, where, "header length ", n, " is too small");
  const std::string_view text(reinterpret_cast<const char*>(file.data() + 8),
                              static_cast<std::size_t>(n));
  const nlohmann::json header = detail::parse_json_strict(text, where + ": header");
  check(header.is_object(), ErrorKind::invalid_input, where, "header is not a JSON object but a ",
        header.type_name());
  const auto data = file.subspan(static_cast<std::size_t>(8 + n));
  st.data_size_ = data.size();

  struct Extent {
    std::uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Extent> extents;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      st.parse_metadata(entry);
      continue;
    }
    const std::string tw = str_cat(where, ": tensor '", name, "'");
    check(!name.empty(), ErrorKind::invalid_input, where, "empty tensor name in header");
    check(entry.is_object(), ErrorKind::invalid_input, tw, "header entry is not an object");
    const auto dt = entry.find("dtype");
    const auto sh = entry.find("shape");
    const auto off = entry.find("data_offsets");
    check(dt != entry.end() && dt->is_string(), ErrorKind::invalid_input, tw,
          "missing or non-string \"dtype\"");
    check(sh != entry.end() && sh->is_array(), ErrorKind::invalid_input, tw,
          "missing or non-array \"shape\"");
    check(off != entry.end() && off->is_array() && off->size() == 2, ErrorKind::invalid_input, tw,
          "\"data_offsets\" must be an array [begin, end]");
    const std::string& dts = dt->get_ref<const std::string&>();
    const auto dtype = parse_dtype(dts);
    check(dtype.has_value(), ErrorKind::unsupported, tw, "unsupported dtype '", dts,
          "' (supported: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");

    TensorView v;
    v.name = name;
    v.dtype = *dtype;
    v.source = where;
    v.keepalive = keepalive;
    std::uint64_t numel = 1;
    for (const auto& d : *sh) {
      const auto dim = detail::json_uint(d);
      check(dim.has_value() &&
                *dim <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
            ErrorKind::invalid_input, tw, "shape entry ", d.dump(),
            " is not a non-negative integer");
      const auto p = checked_mul(numel, *dim);
      check(p.has_value(), ErrorKind::invalid_input, tw, "shape ", sh->dump(),
            " has more elements than fit in 64 bits");
      numel = *p;
      v.shape.push_back(static_cast<std::int64_t>(*dim));
    }
    const auto nbytes = checked_mul(numel, dtype_size(*dtype));
    check(nbytes.has_value(), ErrorKind::invalid_input, tw, "byte size of shape ", sh->dump(),
          " x ", dts, " overflows 64 bits");
    const auto b = detail::json_uint((*off)[0]);
    const auto e = detail::json_uint((*off)[1]);
    check(b.has_value() && e.has_value(), ErrorKind::invalid_input, tw, "data_offsets ",
          off->dump(), " are not non-negative integers");
    check(*e >= *b, ErrorKind::invalid_input, tw, "data_offsets ", off->dump(), ": end < begin");
    check(*e <= data.size(), ErrorKind::invalid_input, tw, "data_offsets ", off->dump(),
          " run past the data region of ", data.size(), " bytes");
    check(*e - *b == *nbytes, ErrorKind::invalid_input, tw, "data_offsets ", off->dump(), " hold ",
          *e - *b, " bytes but shape ", shape_str(v.shape), " x ", dts, " needs ", *nbytes);
    v.bytes = data.subspan(static_cast<std::size_t>(*b), static_cast<std::size_t>(*nbytes));
    auto [it, inserted] = st.tensors_.emplace(name, std::move(v));
    check(inserted, ErrorKind::invalid_input, tw, "duplicate tensor name");
    extents.push_back({*b, *e, &it->first});
  }
  std::sort(extents.begin(), extents.end(), [](const Extent& x, const Extent& y) {
    return x.begin != y.begin ? x.begin < y.begin : x.end < y.end;
  });
  const Extent* prev = nullptr;
  for (const Extent& x : extents) {
    if (x.begin == x.end)
      continue; // empty tensors occupy no bytes
    if (prev)
      check(x.begin >= prev->end, ErrorKind::invalid_input, where, "tensors '", *prev->name, "' [",
            prev->begin, ", ", prev->end, ") and '", *x.name, "' [", x.begin, ", ", x.end,
            ") overlap");
    prev = &x;
  }
  st.keepalive_ = std::move(keepalive);
  return st;
}

auto SafetensorsFile::names() const -> std::vector<std::string> {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& kv : tensors_)
    out.push_back(kv.first);
  return out;
}

auto SafetensorsFile::at(std::string_view name) const -> const TensorView& {
  const TensorView* v = find(name);
  if (!v)
    throw_error(ErrorKind::invalid_input, source_, "tensor '", name, "' not found");
  return *v;
}

auto SafetensorsFile::parse_metadata(const nlohmann::json& m) -> void {
  check(m.is_object(), ErrorKind::invalid_input, source_, "\"__metadata__\" is not a JSON object");
  for (const auto& [k, v] : m.items()) {
    check(v.is_string(), ErrorKind::invalid_input, source_, "\"__metadata__\" value for '", k,
          "' is not a string");
    metadata_[k] = v.get<std::string>();
  }
}

std::string read_text_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw_error(ErrorKind::io, path.string(), "no such file");
  return read_regular_file(path, kMaxTextFileBytes);
}

auto Checkpoint::open(const std::filesystem::path& path, FileAccess access) -> Checkpoint {
  namespace fs = std::filesystem;
  std::error_code ec;
  Checkpoint ck;
  ck.dir_ = path;
  ck.access_ = access;
  if (fs::exists(path, ec) && !fs::is_directory(path, ec)) {
    ck.dir_ = path.parent_path();
    ck.add_single(SafetensorsFile::open(path, access));
    return ck;
  }
  check(fs::is_directory(path, ec), ErrorKind::io, path.string(),
        "checkpoint directory does not exist");
  const fs::path index = path / "model.safetensors.index.json";
  const fs::path single = path / "model.safetensors";
  if (fs::exists(index, ec) || fs::is_symlink(index, ec)) {
    ck.open_index(index);
    return ck;
  }
  check(fs::exists(single, ec) || fs::is_symlink(single, ec), ErrorKind::io, path.string(),
        "no model.safetensors or model.safetensors.index.json in checkpoint directory");
  ck.add_single(SafetensorsFile::open(single, access));
  return ck;
}

auto Checkpoint::names() const -> std::vector<std::string> {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& kv : index_)
    out.push_back(kv.first);
  return out;
}

auto Checkpoint::at(std::string_view name) const -> const TensorView& {
  const TensorView* v = find(name);
  if (!v)
    throw_error(ErrorKind::invalid_input, dir_.string(), "tensor '", name,
                "' not found in checkpoint");
  return *v;
}

auto Checkpoint::open_index(const std::filesystem::path& index) -> void {
  namespace fs = std::filesystem;
  const std::string where = index.string();
  const nlohmann::json j = detail::parse_json_strict(read_text_file(index), where);
  check(j.is_object(), ErrorKind::invalid_input, where, "index is not a JSON object");
  const auto wm = j.find("weight_map");
  check(wm != j.end() && wm->is_object(), ErrorKind::invalid_input, where,
        "missing or non-object \"weight_map\"");
  check(!wm->empty(), ErrorKind::invalid_input, where, "\"weight_map\" is empty");
  std::map<std::string, std::size_t> shard_of_file;
  std::vector<std::pair<std::string, std::size_t>> mapped;
  for (const auto& [name, file] : wm->items()) {
    check(file.is_string(), ErrorKind::invalid_input, where, "weight_map entry for '", name,
          "' is not a string");
    const std::string& fname = file.get_ref<const std::string&>();
    const fs::path fp(fname);
    check(!fname.empty() && fp.filename() == fp && fname != "." && fname != "..",
          ErrorKind::invalid_input, where, "weight_map entry for '", name, "' names '", fname,
          "', which is not a plain file name in the checkpoint directory");
    auto it = shard_of_file.find(fname);
    if (it == shard_of_file.end()) {
      const fs::path shard_path = dir_ / fp;
      try {
        shards_.push_back(SafetensorsFile::open(shard_path, access_));
      } catch (const Error& e) {
        throw Error(e.kind(), e.where(),
                    str_cat(e.message(), " (shard listed in ", where, " for tensor '", name, "')"));
      }
      it = shard_of_file.emplace(fname, shards_.size() - 1).first;
    }
    mapped.emplace_back(name, it->second);
  }
  // Only the tensors named by weight_map are visible (as in transformers).
  for (const auto& [name, si] : mapped) {
    const TensorView* v = shards_[si].find(name);
    check(v != nullptr, ErrorKind::invalid_input, where, "tensor '", name, "' is mapped to shard '",
          shards_[si].source(), "' but that shard has no such tensor");
    index_.emplace(name, *v);
  }
}

} // namespace tpullm::frontend
