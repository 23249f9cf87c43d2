// Host detection and JSON parsing of compilation targets (target/target.hpp).
#include "tpullm/target/target.hpp"

#include <algorithm>

#include <omp.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tpullm/support/error.hpp"
#include "tpullm/support/input_file.hpp"
#include "tpullm/support/json.hpp"

namespace tpullm::target {

namespace {
const std::vector<ir::DType> kCpuWeightTypes = {ir::DType::f32, ir::DType::bf16, ir::DType::f16,
                                                ir::DType::i8,  ir::DType::i4,   ir::DType::u4,
                                                ir::DType::u8,  ir::DType::i6,   ir::DType::u6};
}

bool Target::supports(ir::DType t) const {
  return std::find(weight_dtypes.begin(), weight_dtypes.end(), t) != weight_dtypes.end();
}

void Target::validate() const {
  check(cores >= 1 && cores <= 4096, ErrorKind::invalid_input, "target.cores",
        "must be in [1, 4096], got ", cores);
  check(local_memory >= 4096 && local_memory <= (std::int64_t{1} << 34), ErrorKind::invalid_input,
        "target.local_memory", "must be in [4096, 16 GiB], got ", local_memory);
  check(alignment >= 1 && alignment <= 4096 && (alignment & (alignment - 1)) == 0,
        ErrorKind::invalid_input, "target.alignment", "must be a power of two in [1, 4096], got ",
        alignment);
  check(!weight_dtypes.empty(), ErrorKind::invalid_input, "target.weight_dtypes",
        "must name at least one weight type");
}

std::string Target::to_json() const {
  nlohmann::ordered_json j;
  j["name"] = name;
  j["cores"] = cores;
  j["local_memory"] = local_memory;
  j["alignment"] = alignment;
  std::vector<std::string> dts;
  for (auto t : weight_dtypes)
    dts.emplace_back(ir::name(t));
  j["weight_dtypes"] = dts;
  return j.dump();
}

Target host_target() {
  Target t;
  t.name = "cpu";
  t.cores = std::max(1, omp_get_max_threads());
  const long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
  t.local_memory = l2 > 0 ? l2 : std::int64_t{1} << 20;
  t.alignment = 64;
  t.weight_dtypes = kCpuWeightTypes;
  return t;
}

Target target_from_json(const std::string& text, Target t) {
  const nlohmann::json j = parse_json(text, "target", "not valid JSON");
  check(j.is_object(), ErrorKind::invalid_input, "target", "must be a JSON object");
  for (const auto& [key, v] : j.items()) {
    const std::string where = "target." + key;
    auto integer = [&]() -> std::int64_t {
      check(v.is_number_integer(), ErrorKind::invalid_input, where, "must be an integer, got ",
            v.dump());
      return v.get<std::int64_t>();
    };
    if (key == "name") {
      check(v.is_string(), ErrorKind::invalid_input, where, "must be a string");
      t.name = v.get<std::string>();
    } else if (key == "cores") {
      t.cores = integer();
    } else if (key == "local_memory") {
      t.local_memory = integer();
    } else if (key == "alignment") {
      t.alignment = integer();
    } else if (key == "weight_dtypes") {
      check(v.is_array(), ErrorKind::invalid_input, where, "must be an array of dtype names");
      t.weight_dtypes.clear();
      for (const auto& e : v) {
        check(e.is_string(), ErrorKind::invalid_input, where, "entries must be dtype names");
        auto d = ir::parse_dtype(e.get<std::string>());
        check(d.has_value(), ErrorKind::invalid_input, where, "unknown dtype '",
              e.get<std::string>(), "'");
        t.weight_dtypes.push_back(*d);
      }
    } else {
      throw_error(ErrorKind::invalid_input, where,
                  "unknown key (known: name, cores, local_memory, alignment, weight_dtypes)");
    }
  }
  t.validate();
  return t;
}

Target load_target(const std::filesystem::path& file, Target base) {
  // A regular file of at most 1 MiB: a FIFO or a device is refused at once, never read.
  const std::string text = read_regular_file(file, std::size_t{1} << 20);
  try {
    return target_from_json(text, std::move(base));
  } catch (const Error& e) {
    throw e.within(file.string());
  }
}

} // namespace tpullm::target
