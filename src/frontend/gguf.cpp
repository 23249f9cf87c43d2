// Out-of-line definitions of tpullm/frontend/gguf.hpp (compiled once into tpullm_core).
#include "tpullm/frontend/gguf.hpp"

#include "tpullm/support/checked.hpp"
#include "tpullm/support/input_file.hpp"
#include "tpullm/support/utf8.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <utility>

namespace tpullm::frontend {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader assumes a little-endian host");

std::string_view gguf_value_type_name(GgufValueType t) noexcept {
  switch (t) {
  case GgufValueType::u8:
    return "u8";
  case GgufValueType::i8:
    return "i8";
  case GgufValueType::u16:
    return "u16";
  case GgufValueType::i16:
    return "i16";
  case GgufValueType::u32:
    return "u32";
  case GgufValueType::i32:
    return "i32";
  case GgufValueType::f32:
    return "f32";
  case GgufValueType::boolean:
    return "bool";
  case GgufValueType::string:
    return "string";
  case GgufValueType::array:
    return "array";
  case GgufValueType::u64:
    return "u64";
  case GgufValueType::i64:
    return "i64";
  case GgufValueType::f64:
    return "f64";
  }
  return "unknown";
}

namespace gguf_read {

constexpr std::uint32_t kMaxValueTypeId = static_cast<std::uint32_t>(GgufValueType::f64);

/// Fewest bytes one stored element of type `t` takes (an array: its type and count).
std::uint64_t min_stored_bytes(GgufValueType t) {
  switch (t) {
  case GgufValueType::u8:
  case GgufValueType::i8:
  case GgufValueType::boolean:
    return 1;
  case GgufValueType::u16:
  case GgufValueType::i16:
    return 2;
  case GgufValueType::u32:
  case GgufValueType::i32:
  case GgufValueType::f32:
    return 4;
  case GgufValueType::u64:
  case GgufValueType::i64:
  case GgufValueType::f64:
  case GgufValueType::string:
    return 8;
  case GgufValueType::array:
    return 12;
  }
  return 1;
}

bool is_integer(GgufValueType t) {
  switch (t) {
  case GgufValueType::u8:
  case GgufValueType::i8:
  case GgufValueType::u16:
  case GgufValueType::i16:
  case GgufValueType::u32:
  case GgufValueType::i32:
  case GgufValueType::u64:
  case GgufValueType::i64:
    return true;
  case GgufValueType::f32:
  case GgufValueType::f64:
  case GgufValueType::boolean:
  case GgufValueType::string:
  case GgufValueType::array:
    return false;
  }
  return false;
}

/// "a u32", "an i32", "an array of string", "an array of arrays" (for "holds ..." messages).
std::string describe(const GgufValue& v) {
  if (v.is_array())
    return v.elem_type == GgufValueType::array
               ? std::string("an array of arrays")
               : str_cat("an array of ", gguf_value_type_name(v.elem_type));
  const std::string_view n = gguf_value_type_name(v.type);
  return str_cat(n.front() == 'i' || n.front() == 'f' ? "an " : "a ", n);
}

/// Sequential little-endian reads over the file with every bound checked.
class Cursor {
public:
  explicit Cursor(std::span<const std::byte> file) : file_(file) {}

  std::uint64_t pos() const { return pos_; }
  std::uint64_t remaining() const { return file_.size() - pos_; }

  /// Throws unless `n` more bytes are there; `where` / `what` name what is being read.
  void need(std::uint64_t n, const std::string& where, std::string_view what) const {
    if (n > remaining())
      throw_error(ErrorKind::invalid_input, where, "truncated file: ", what, " needs ", n,
                  " bytes at byte ", pos_, " but the file ends at byte ", file_.size());
  }

  template <class T>
  T read(const std::string& where, std::string_view what) {
    need(sizeof(T), where, what);
    T v;
    std::memcpy(&v, file_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  /// A GGUF string (u64 length + bytes), checked against kGgufMaxString and for UTF-8.
  std::string_view read_string(const std::string& where, std::string_view what) {
    const auto n = read<std::uint64_t>(where, what);
    check(n <= kGgufMaxString, ErrorKind::invalid_input, where, what, " of ", n,
          " bytes is longer than the ", kGgufMaxString, "-byte limit");
    need(n, where, what);
    const std::string_view s(reinterpret_cast<const char*>(file_.data() + pos_),
                             static_cast<std::size_t>(n));
    const auto bad = find_invalid_utf8(s);
    check(!bad, ErrorKind::invalid_input, where, what, " is not valid UTF-8 (byte ",
          pos_ + bad.value_or(0), " of the file)");
    pos_ += n;
    return s;
  }

private:
  std::span<const std::byte> file_;
  std::uint64_t pos_ = 0;
};

/// Reads one scalar of type `t` (not array).
GgufScalar read_scalar(Cursor& c, GgufValueType t, const std::string& where,
                       std::string_view what) {
  switch (t) {
  case GgufValueType::u8:
    return std::int64_t{c.read<std::uint8_t>(where, what)};
  case GgufValueType::i8:
    return std::int64_t{c.read<std::int8_t>(where, what)};
  case GgufValueType::u16:
    return std::int64_t{c.read<std::uint16_t>(where, what)};
  case GgufValueType::i16:
    return std::int64_t{c.read<std::int16_t>(where, what)};
  case GgufValueType::u32:
    return std::int64_t{c.read<std::uint32_t>(where, what)};
  case GgufValueType::i32:
    return std::int64_t{c.read<std::int32_t>(where, what)};
  case GgufValueType::u64:
    return c.read<std::uint64_t>(where, what);
  case GgufValueType::i64:
    return c.read<std::int64_t>(where, what);
  case GgufValueType::f32:
    return double{c.read<float>(where, what)};
  case GgufValueType::f64:
    return c.read<double>(where, what);
  case GgufValueType::boolean: {
    const auto b = c.read<std::uint8_t>(where, what);
    check(b <= 1, ErrorKind::invalid_input, where, "bool ", what, " is ", int{b},
          ", neither 0 nor 1");
    return b == 1;
  }
  case GgufValueType::string:
    return std::string(c.read_string(where, what));
  case GgufValueType::array:
    break;
  }
  throw_error(ErrorKind::internal, where, "read_scalar called for an array");
}

/// Reads a stored value type id and checks it.
GgufValueType read_type(Cursor& c, const std::string& where, std::string_view what) {
  const auto id = c.read<std::uint32_t>(where, what);
  check(id <= kMaxValueTypeId, ErrorKind::invalid_input, where, "unknown ", what, " ", id,
        " (GGUF defines 0 to ", kMaxValueTypeId, ")");
  return static_cast<GgufValueType>(id);
}

/// Reads an array's element type, count and elements (`depth` 1 inside an array of arrays).
GgufValue read_array(Cursor& c, const std::string& where, int depth) {
  GgufValue v;
  v.type = GgufValueType::array;
  v.elem_type = read_type(c, where, "array element type");
  check(v.elem_type != GgufValueType::array || depth == 0, ErrorKind::invalid_input, where,
        "arrays nested more than one level deep");
  const auto n = c.read<std::uint64_t>(where, "array length");
  check(n <= kGgufMaxArray, ErrorKind::invalid_input, where, "array of ", n,
        " elements is longer than the ", kGgufMaxArray, "-element limit");
  // n <= 2^24 and each element takes at most 12 bytes: no overflow.
  const std::uint64_t least = n * min_stored_bytes(v.elem_type);
  check(least <= c.remaining(), ErrorKind::invalid_input, where, "truncated file: array of ", n,
        " ", gguf_value_type_name(v.elem_type), " needs at least ", least, " bytes at byte ",
        c.pos(), " but only ", c.remaining(), " remain");
  if (v.elem_type == GgufValueType::array) {
    v.nested.reserve(static_cast<std::size_t>(n));
    for (std::uint64_t i = 0; i < n; ++i)
      v.nested.push_back(read_array(c, where, depth + 1));
    return v;
  }
  v.array.reserve(static_cast<std::size_t>(n));
  std::uint64_t i = 0;
  try {
    for (; i < n; ++i)
      v.array.push_back(read_scalar(c, v.elem_type, where, "value"));
  } catch (const Error& e) {
    throw Error(e.kind(), e.where(), str_cat("array element ", i, ": ", e.message()));
  }
  return v;
}

} // namespace gguf_read

std::int64_t GgufTensor::numel() const noexcept {
  std::int64_t n = 1;
  for (std::int64_t d : ne)
    n *= d;
  return n;
}

std::int64_t GgufTensor::rows() const noexcept {
  std::int64_t n = 1;
  for (std::size_t i = 1; i < ne.size(); ++i)
    n *= ne[i];
  return n;
}

auto GgufFile::open(const std::filesystem::path& path, FileAccess access) -> GgufFile {
  auto file = MappedFile::open(path, access);
  const auto bytes = file->bytes();
  return parse(bytes, std::move(file), path.string());
}

bool GgufFile::looks_like_gguf(const std::filesystem::path& path) noexcept {
  try {
    UniqueFd fd = open_regular_file(path);
    char magic[4] = {};
    std::size_t got = 0;
    while (got < 4) {
      const ssize_t r = ::read(fd.get(), magic + got, 4 - got);
      if (r < 0 && errno == EINTR)
        continue;
      if (r <= 0)
        return false;
      got += static_cast<std::size_t>(r);
    }
    return std::memcmp(magic, "GGUF", 4) == 0;
  } catch (...) {
    return false;
  }
}

auto GgufFile::parse(std::span<const std::byte> file, std::shared_ptr<const void> keepalive,
                     std::string source) -> GgufFile {
  using namespace gguf_read;
  GgufFile g;
  g.source_ = std::move(source);
  const std::string& src = g.source_;
  Cursor c(file);

  // Header.
  check(file.size() >= 4 && std::memcmp(file.data(), "GGUF", 4) == 0, ErrorKind::invalid_input, src,
        "not a GGUF file (it does not start with the magic \"GGUF\")");
  c.read<std::uint32_t>(src, "magic");
  const auto version = c.read<std::uint32_t>(src, "version");
  const std::uint32_t swapped = ((version & 0xFFu) << 24) | ((version & 0xFF00u) << 8) |
                                ((version >> 8) & 0xFF00u) | (version >> 24);
  if (version != 1 && version != 2 && version != 3 && swapped >= 1 && swapped <= 3)
    throw_error(ErrorKind::unsupported, src, "big-endian GGUF file (version ", swapped,
                " stored big-endian); only little-endian GGUF files are read");
  if (version == 1)
    throw_error(ErrorKind::unsupported, src,
                "GGUF version 1 (llama.cpp before August 2023) is not supported; convert the "
                "model again with a current llama.cpp (versions 2 and 3 are read)");
  check(version == 2 || version == 3, ErrorKind::unsupported, src, "GGUF version ", version,
        " is not supported (versions 2 and 3 are read)");
  g.version_ = version;
  const auto n_tensors = c.read<std::uint64_t>(src, "tensor count");
  const auto n_kv = c.read<std::uint64_t>(src, "metadata key count");
  check(n_tensors <= kGgufMaxTensors, ErrorKind::invalid_input, src, "tensor count ", n_tensors,
        " exceeds the limit of ", kGgufMaxTensors);
  check(n_kv <= kGgufMaxKeys, ErrorKind::invalid_input, src, "metadata key count ", n_kv,
        " exceeds the limit of ", kGgufMaxKeys);
  // Fewest bytes: a key is a non-empty string, a type and a value of >= 1 byte; a tensor info a
  // non-empty name, n_dims, one dimension, a type and an offset. Both counts are bounded above.
  const std::uint64_t least = n_kv * (8 + 1 + 4 + 1) + n_tensors * (8 + 1 + 4 + 8 + 4 + 8);
  check(least <= c.remaining(), ErrorKind::invalid_input, src, "truncated file: ", n_kv,
        " metadata keys and ", n_tensors, " tensor infos need at least ", least,
        " bytes after the header but only ", c.remaining(), " remain");

  // Metadata.
  for (std::uint64_t i = 0; i < n_kv; ++i) {
    const std::string kw = str_cat(src, ": metadata key #", i);
    const std::string_view key = c.read_string(kw, "key");
    check(!key.empty(), ErrorKind::invalid_input, kw, "empty key");
    const std::string w = str_cat(src, ": key '", key, "'");
    check(!g.kv_.contains(key), ErrorKind::invalid_input, w, "duplicate key");
    const GgufValueType type = read_type(c, w, "value type");
    GgufValue v;
    if (type == GgufValueType::array) {
      v = read_array(c, w, 0);
    } else {
      v.type = type;
      v.scalar = read_scalar(c, type, w, "value");
    }
    g.kv_.emplace(std::string(key), std::move(v));
  }

  // Alignment.
  if (const GgufValue* a = g.find("general.alignment")) {
    const std::string w = str_cat(src, ": key 'general.alignment'");
    check(!a->is_array() && is_integer(a->type), ErrorKind::invalid_input, w, "holds ",
          describe(*a), ", not an integer");
    const auto* i = std::get_if<std::int64_t>(&a->scalar);
    const auto* u = std::get_if<std::uint64_t>(&a->scalar);
    const std::uint64_t al = i ? (*i > 0 ? static_cast<std::uint64_t>(*i) : 0) : (u ? *u : 0);
    check(al >= 1 && al <= kGgufMaxAlignment && std::has_single_bit(al), ErrorKind::invalid_input,
          w, "alignment ", i ? str_cat(*i) : str_cat(u ? *u : 0), " is not a power of two in [1, ",
          kGgufMaxAlignment, "]");
    g.alignment_ = al;
  }

  // Tensor infos (n_tensors was checked against the bytes left, so reserving is bounded).
  g.tensors_.reserve(static_cast<std::size_t>(n_tensors));
  std::vector<std::uint64_t> sizes;
  sizes.reserve(static_cast<std::size_t>(n_tensors));
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    const std::string tw0 = str_cat(src, ": tensor #", i);
    const std::string_view name = c.read_string(tw0, "name");
    check(!name.empty(), ErrorKind::invalid_input, tw0, "empty tensor name");
    GgufTensor t;
    t.name = std::string(name);
    t.source = src;
    const std::string tw = t.where();
    check(!g.by_name_.contains(name), ErrorKind::invalid_input, tw, "duplicate tensor name");
    const auto n_dims = c.read<std::uint32_t>(tw, "dimension count");
    check(n_dims >= 1 && n_dims <= kGgufMaxDims, ErrorKind::invalid_input, tw, n_dims,
          " dimensions (1 to ", kGgufMaxDims, " are allowed)");
    std::int64_t numel = 1, rows = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const auto ne = c.read<std::uint64_t>(tw, "dimension");
      check(ne <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
            ErrorKind::invalid_input, tw, "dimension ne[", d, "] = ", ne, " is out of range");
      t.ne.push_back(static_cast<std::int64_t>(ne));
      const auto p = tpullm::checked_mul(numel, static_cast<std::int64_t>(ne));
      const auto r = d == 0 ? std::optional<std::int64_t>(1)
                            : tpullm::checked_mul(rows, static_cast<std::int64_t>(ne));
      check(p.has_value() && r.has_value(), ErrorKind::invalid_input, tw,
            "element count overflows 64 bits");
      numel = *p;
      rows = *r;
    }
    const auto type_id = c.read<std::uint32_t>(tw, "ggml type");
    const auto info = conversion::ggml_type_info(type_id);
    check(info.has_value(), ErrorKind::unsupported, tw, "unknown ggml type id ", type_id);
    t.type = info->type;
    const auto row = conversion::ggml_row_bytes(t.type, t.ne[0]);
    check(row.has_value(), ErrorKind::invalid_input, tw, "a row of ne[0] = ", t.ne[0],
          " elements is not a whole number of ", info->name, " blocks of ", info->block_elems);
    const auto nbytes =
        tpullm::checked_mul(static_cast<std::uint64_t>(*row), static_cast<std::uint64_t>(rows));
    check(nbytes.has_value(), ErrorKind::invalid_input, tw, "byte size overflows 64 bits");
    t.offset = c.read<std::uint64_t>(tw, "data offset");
    check(t.offset % g.alignment_ == 0, ErrorKind::invalid_input, tw, "data offset ", t.offset,
          " is not a multiple of the alignment ", g.alignment_);
    g.by_name_.emplace(t.name, g.tensors_.size());
    g.tensors_.push_back(std::move(t));
    sizes.push_back(*nbytes);
  }

  // Data region: after the tensor infos, padded to the alignment.
  const std::uint64_t info_end = c.pos();
  const std::uint64_t data_start =
      (info_end + g.alignment_ - 1) / g.alignment_ * g.alignment_; // info_end < 2^63
  const std::uint64_t data_size = data_start <= file.size() ? file.size() - data_start : 0;
  const std::span<const std::byte> data = data_start <= file.size()
                                              ? file.subspan(static_cast<std::size_t>(data_start))
                                              : std::span<const std::byte>();

  struct Extent {
    std::uint64_t begin, end;
    std::size_t index;
  };
  std::vector<Extent> extents;
  extents.reserve(g.tensors_.size());
  for (std::size_t i = 0; i < g.tensors_.size(); ++i) {
    GgufTensor& t = g.tensors_[i];
    const std::uint64_t nbytes = sizes[i];
    const auto end = tpullm::checked_add(t.offset, nbytes);
    check(end.has_value() && *end <= data_size, ErrorKind::invalid_input, t.where(), "data [",
          t.offset, ", +", nbytes, ") runs past the end of the file (data region of ", data_size,
          " bytes at byte ", data_start, "; truncated file?)");
    t.bytes = data.subspan(static_cast<std::size_t>(t.offset), static_cast<std::size_t>(nbytes));
    t.keepalive = keepalive;
    if (nbytes > 0)
      extents.push_back({t.offset, *end, i});
  }
  std::sort(extents.begin(), extents.end(), [](const Extent& x, const Extent& y) {
    return x.begin != y.begin ? x.begin < y.begin : x.end < y.end;
  });
  for (std::size_t k = 1; k < extents.size(); ++k) {
    const Extent& p = extents[k - 1];
    const Extent& x = extents[k];
    check(x.begin >= p.end, ErrorKind::invalid_input, src, "tensors '", g.tensors_[p.index].name,
          "' [", p.begin, ", ", p.end, ") and '", g.tensors_[x.index].name, "' [", x.begin, ", ",
          x.end, ") overlap");
  }
  g.keepalive_ = std::move(keepalive);
  return g;
}

auto GgufFile::find(std::string_view key) const -> const GgufValue* {
  const auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

auto GgufFile::find_tensor(std::string_view name) const -> const GgufTensor* {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

namespace gguf_read {

[[noreturn]] void wrong_type(const std::string& source, std::string_view key, const GgufValue& v,
                             std::string_view wanted) {
  throw_error(ErrorKind::invalid_input, str_cat(source, ": key '", key, "'"), "holds ", describe(v),
              ", not ", wanted);
}

std::optional<std::int64_t> scalar_int(const GgufScalar& s) {
  if (const auto* i = std::get_if<std::int64_t>(&s))
    return *i;
  if (const auto* u = std::get_if<std::uint64_t>(&s))
    if (*u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return static_cast<std::int64_t>(*u);
  return std::nullopt;
}

double scalar_number(const GgufScalar& s) {
  if (const auto* d = std::get_if<double>(&s))
    return *d;
  if (const auto* i = std::get_if<std::int64_t>(&s))
    return static_cast<double>(*i);
  if (const auto* u = std::get_if<std::uint64_t>(&s))
    return static_cast<double>(*u);
  return 0.0;
}

bool is_number(GgufValueType t) {
  return is_integer(t) || t == GgufValueType::f32 || t == GgufValueType::f64;
}

} // namespace gguf_read

auto GgufFile::get_string(std::string_view key) const -> std::optional<std::string> {
  using namespace gguf_read;
  const GgufValue* v = find(key);
  if (!v)
    return std::nullopt;
  if (v->is_array() || v->type != GgufValueType::string)
    wrong_type(source_, key, *v, "a string");
  return std::get<std::string>(v->scalar);
}

auto GgufFile::get_int(std::string_view key) const -> std::optional<std::int64_t> {
  using namespace gguf_read;
  const GgufValue* v = find(key);
  if (!v)
    return std::nullopt;
  if (v->is_array() || !is_integer(v->type))
    wrong_type(source_, key, *v, "an integer");
  const auto i = scalar_int(v->scalar);
  // Not check(): its arguments are evaluated first, and std::get<u64> of an int64 scalar throws.
  if (!i)
    throw_error(ErrorKind::invalid_input, str_cat(source_, ": key '", key, "'"), "value ",
                std::get<std::uint64_t>(v->scalar), " does not fit a signed 64-bit integer");
  return i;
}

auto GgufFile::get_float(std::string_view key) const -> std::optional<double> {
  using namespace gguf_read;
  const GgufValue* v = find(key);
  if (!v)
    return std::nullopt;
  if (v->is_array() || !is_number(v->type))
    wrong_type(source_, key, *v, "a number");
  return scalar_number(v->scalar);
}

auto GgufFile::get_bool(std::string_view key) const -> std::optional<bool> {
  using namespace gguf_read;
  const GgufValue* v = find(key);
  if (!v)
    return std::nullopt;
  if (v->is_array() || v->type != GgufValueType::boolean)
    wrong_type(source_, key, *v, "a bool");
  return std::get<bool>(v->scalar);
}

auto GgufFile::get_string_array(std::string_view key) const
    -> std::optional<std::vector<std::string>> {
  using namespace gguf_read;
  const GgufValue* v = find(key);
  if (!v)
    return std::nullopt;
  if (!v->is_array() || v->elem_type != GgufValueType::string)
    wrong_type(source_, key, *v, "an array of string");
  std::vector<std::string> out;
  out.reserve(v->array.size());
  for (const GgufScalar& s : v->array)
    out.push_back(std::get<std::string>(s));
  return out;
}

auto GgufFile::get_int_array(std::string_view key) const
    -> std::optional<std::vector<std::int64_t>> {
  using namespace gguf_read;
  const GgufValue* v = find(key);
  if (!v)
    return std::nullopt;
  if (!v->is_array() || !is_integer(v->elem_type))
    wrong_type(source_, key, *v, "an array of integers");
  std::vector<std::int64_t> out;
  out.reserve(v->array.size());
  for (std::size_t i = 0; i < v->array.size(); ++i) {
    const auto x = scalar_int(v->array[i]);
    if (!x) // not check(): std::get<u64> of an int64 element would throw
      throw_error(ErrorKind::invalid_input, str_cat(source_, ": key '", key, "'"), "element ", i,
                  " = ", std::get<std::uint64_t>(v->array[i]),
                  " does not fit a signed 64-bit integer");
    out.push_back(*x);
  }
  return out;
}

auto GgufFile::get_float_array(std::string_view key) const -> std::optional<std::vector<double>> {
  using namespace gguf_read;
  const GgufValue* v = find(key);
  if (!v)
    return std::nullopt;
  if (!v->is_array() || !is_number(v->elem_type))
    wrong_type(source_, key, *v, "an array of numbers");
  std::vector<double> out;
  out.reserve(v->array.size());
  for (const GgufScalar& s : v->array)
    out.push_back(scalar_number(s));
  return out;
}

} // namespace tpullm::frontend
