// Out-of-line definitions of tpullm/frontend/safetensors_writer.hpp (compiled once into
// tpullm_core).
#include "tpullm/frontend/safetensors_writer.hpp"

namespace tpullm::frontend {

auto SafetensorsWriter::declare(const std::string& name, DType dtype,
                                std::vector<std::int64_t> shape) -> void {
  check(!started_, ErrorKind::internal, where(name), "declared after writing began");
  check(!name.empty() && name != "__metadata__", ErrorKind::invalid_input, path_.string(),
        "invalid tensor name '", name, "'");
  check(names_.insert(name).second, ErrorKind::invalid_input, where(name), "declared twice");
  std::uint64_t n = dtype_size(dtype);
  for (auto d : shape) {
    check(d >= 0, ErrorKind::invalid_input, where(name), "negative dimension in shape ",
          shape_str(shape));
    const auto p = checked_mul(n, static_cast<std::uint64_t>(d));
    check(p.has_value(), ErrorKind::invalid_input, where(name), "shape ", shape_str(shape),
          " overflows 64 bits");
    n = *p;
  }
  tensors_.push_back({name, dtype, std::move(shape), data_size_, data_size_ + n});
  data_size_ += n;
}

auto SafetensorsWriter::header() const -> std::string {
  nlohmann::json h = nlohmann::json::object();
  if (!metadata_.empty())
    h["__metadata__"] = metadata_;
  for (const auto& t : tensors_)
    h[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                 {"shape", t.shape},
                 {"data_offsets", {t.begin, t.end}}};
  std::string json = h.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  const std::uint64_t n = json.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + json;
}

auto SafetensorsWriter::write(std::string_view name, std::span<const std::byte> bytes) -> void {
  if (!started_)
    start();
  if (bytes.empty())
    return;
  skip_complete();
  check(current_ < tensors_.size(), ErrorKind::internal, where(std::string(name)),
        "written after every declared tensor is complete");
  Entry& t = tensors_[current_];
  check(t.name == name, ErrorKind::internal, where(std::string(name)),
        "written out of order: tensor '", t.name, "' is not complete yet");
  check(bytes.size() <= t.end - t.begin - t.written, ErrorKind::internal, where(t.name),
        bytes.size(), " more bytes than its remaining ", t.end - t.begin - t.written);
  put(bytes.data(), bytes.size());
  t.written += bytes.size();
}

auto SafetensorsWriter::finish() -> void {
  if (!started_)
    start();
  skip_complete();
  check(current_ == tensors_.size(), ErrorKind::internal,
        current_ < tensors_.size() ? where(tensors_[current_].name) : path_.string(),
        "finished before all its bytes were written");
  out_->commit();
}

auto SafetensorsWriter::start() -> void {
  started_ = true;
  out_.emplace(path_, options_);
  const std::string h = header();
  put(h.data(), h.size());
}

} // namespace tpullm::frontend
