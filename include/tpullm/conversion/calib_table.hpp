#pragma once
/// The calibration table of `--mode int8 --act-quant static` (what `tpullm calibrate` writes and
/// the lowering reads): per input of each linear the int8 mode quantizes, the ranges the float
/// model reached on sample prompts.
///
/// JSON (format_version 1):
///   {"format_version": 1, "model": {"architecture": "llama", "layers": 2, "hidden": 64,
///    "intermediate": 176, "vocab": 256}, "method": "max" | "percentile" | "kl",
///    "samples": 4, "tokens": 256,
///    "inputs": [{"name": "layers.0.q", "min": -3.1, "max": 2.9, "absmax": 3.1,
///                "threshold": 3.1, "channel_absmax": [K floats]}, ...]}
/// `name` is the Top weight name of the linear reading the input (layers.{i}.q / k / v / o /
/// gate / up / down; gate and up read the MLP's input, down the SwiGLU activation). `threshold`
/// is the clipping range |x| <= threshold the method chose (max: absmax). channel_absmax[j] is
/// max |x[., j]| over every row seen (SmoothQuant's statistic), before any smoothing.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace tpullm::conversion {

/// Statistics of one quantized op input.
struct CalibEntry {
  std::string name;       ///< Top weight name of the linear (layers.0.q, ...)
  float min = 0, max = 0; ///< smallest / largest element seen
  float absmax = 0;       ///< max |x|
  float threshold = 0;    ///< clipping range of the method, 0 < t <= absmax (or 0 = absmax)
  std::vector<float> channel_absmax; ///< [K]: max |x[., j]| per input channel
};

/// The model a table was measured on (compile refuses a table of another model).
struct CalibModel {
  std::string architecture; ///< config.json model_type family, e.g. "llama"
  std::int64_t layers = 0, hidden = 0, intermediate = 0, vocab = 0;
  friend bool operator==(const CalibModel&, const CalibModel&) = default;
};

/// A whole calibration table.
struct CalibTable {
  static constexpr std::int64_t kFormatVersion = 1;
  CalibModel model;
  std::string method = "max"; ///< max, percentile or kl
  std::int64_t samples = 0;   ///< prompts run
  std::int64_t tokens = 0;    ///< rows seen per input
  std::vector<CalibEntry> inputs;
  /// The entry of linear `name`, or nullptr.
  const CalibEntry* find(std::string_view name) const;
};

/// Parses a table. Throws Error(invalid_input) prefixed by `where` (the file) for malformed JSON,
/// a wrong format_version, a missing or mistyped member, non-finite or inconsistent values
/// (min > max, absmax != max(|min|, |max|) beyond rounding, threshold outside (0, absmax] (0
/// only for an all-zero input), a
/// channel absmax above absmax or negative), an empty or duplicated name.
CalibTable parse_calib_table(std::string_view text, const std::string& where);

/// The JSON text of `t` (deterministic: members in a fixed order, floats printed exactly).
std::string format_calib_table(const CalibTable& t);

/// Reads and parses `path` (Error(invalid_input) naming it when it cannot be read).
CalibTable load_calib_table(const std::filesystem::path& path);

/// Throws Error(invalid_input) naming `where` unless the table was measured on `m`.
void check_calib_model(const CalibTable& t, const CalibModel& m, const std::string& where);

} // namespace tpullm::conversion
