// Decoders: see decoder.hpp.
#include "decoder.hpp"

#include "normalizer.hpp"
#include "unicode.hpp"

namespace tpullm::text::detail {
namespace {

void parse_into(const json& j, const std::string& path, Decoder& d, int depth) {
  const std::string type = type_of(j, path);
  if (type == "Sequence") {
    const json& list = sequence_list(j, "decoders", path, depth, d.steps.size());
    for (std::size_t i = 0; i < list.size(); ++i)
      parse_into(list[i], path + ".decoders[" + std::to_string(i) + "]", d, depth + 1);
  } else if (type == "ByteLevel") {
    d.steps.emplace_back(ByteLevelDecode{});
  } else if (type == "Replace") {
    d.steps.emplace_back(ReplaceDecode{pattern_field(j, path), str_field(j, "content", path)});
  } else if (type == "ByteFallback") {
    d.steps.emplace_back(ByteFallbackDecode{});
  } else if (type == "Fuse") {
    d.steps.emplace_back(FuseDecode{});
  } else if (type == "Strip") {
    StripDecode s;
    const std::string c = str_field(j, "content", path);
    std::size_t i = 0;
    if (c.empty() || (s.content = next_code_point(c, i), i != c.size()))
      bad_field(path + ".content", "expected one character");
    const json &start = member(j, "start"), &stop = member(j, "stop");
    if (!start.is_number_unsigned() || !stop.is_number_unsigned())
      bad_field(path, "start and stop must be unsigned integers");
    s.start = start.get<std::size_t>();
    s.stop = stop.get<std::size_t>();
    d.steps.emplace_back(s);
  } else {
    unsupported_type("decoder", type);
  }
}

// "<0xNN>" -> the byte, as HF parses it (u8::from_str_radix of the two characters).
int fallback_byte(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>')
    return -1;
  int v = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = t[static_cast<std::size_t>(k)];
    int d = -1;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else if (c == '+' && k == 3)
      continue; // Rust's from_str_radix takes a leading '+'
    if (d < 0)
      return -1;
    v = v * 16 + d;
  }
  return v;
}

void byte_level(std::vector<std::string>& tokens) {
  std::string bytes;
  for (const std::string& t : tokens) {
    const std::size_t mark = bytes.size();
    bool all = true;
    for (std::size_t i = 0; i < t.size();) {
      const int b = byte_of_char(next_code_point(t, i));
      if (b < 0) {
        all = false;
        break;
      }
      bytes += static_cast<char>(b);
    }
    if (!all) {
      bytes.resize(mark);
      bytes += t;
    }
  }
  tokens.assign(1, lossy_utf8(bytes));
}

void byte_fallback(std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string run;
  std::size_t run_len = 0;
  const auto flush = [&] {
    if (run_len == 0)
      return;
    if (lossy_utf8(run) == run) {
      out.push_back(run);
    } else {
      for (std::size_t k = 0; k < run_len; ++k)
        out.emplace_back(kReplacementChar);
    }
    run.clear();
    run_len = 0;
  };
  for (std::string& t : tokens) {
    const int b = fallback_byte(t);
    if (b >= 0) {
      run += static_cast<char>(b);
      ++run_len;
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  tokens.swap(out);
}

void strip(std::vector<std::string>& tokens, const StripDecode& s) {
  for (std::string& t : tokens) {
    std::vector<std::pair<std::size_t, char32_t>> cps; // (byte offset, code point)
    for (std::size_t i = 0; i < t.size();) {
      const std::size_t at = i;
      cps.emplace_back(at, next_code_point(t, i));
    }
    std::size_t a = 0, z = cps.size();
    for (std::size_t k = 0; k < s.start && a < cps.size() && cps[a].second == s.content; ++k)
      ++a;
    for (std::size_t k = 0; k < s.stop && z > a && cps[z - 1].second == s.content; ++k)
      --z;
    const std::size_t from = a < cps.size() ? cps[a].first : t.size();
    const std::size_t to = z < cps.size() ? cps[z].first : t.size();
    t = t.substr(from, to - from);
  }
}

} // namespace

std::string Decoder::decode(std::vector<std::string> tokens) const {
  if (!present) {
    std::string out;
    for (std::size_t i = 0; i < tokens.size(); ++i)
      out += (i ? " " : "") + tokens[i];
    return out;
  }
  for (const auto& step : steps)
    std::visit(Overload{[&](const ByteLevelDecode&) { byte_level(tokens); },
                        [&](const ReplaceDecode& r) {
                          for (std::string& t : tokens)
                            t = replace_all(r.pattern, t, r.content);
                        },
                        [&](const ByteFallbackDecode&) { byte_fallback(tokens); },
                        [&](const FuseDecode&) {
                          std::string all;
                          for (const std::string& t : tokens)
                            all += t;
                          tokens.assign(1, std::move(all));
                        },
                        [&](const StripDecode& s) { strip(tokens, s); }},
               step);
  std::string out;
  for (const std::string& t : tokens)
    out += t;
  return out;
}

std::string Decoder::raw_bytes(std::string t) const {
  for (const auto& step : steps)
    std::visit(Overload{[&](const ByteLevelDecode&) {
                          std::string bytes;
                          for (std::size_t i = 0; i < t.size();) {
                            const int b = byte_of_char(next_code_point(t, i));
                            if (b < 0)
                              return; // a token with other characters keeps its own bytes
                            bytes += static_cast<char>(b);
                          }
                          t.swap(bytes);
                        },
                        [&](const ReplaceDecode& r) { t = replace_all(r.pattern, t, r.content); },
                        [&](const ByteFallbackDecode&) {
                          if (const int b = fallback_byte(t); b >= 0)
                            t.assign(1, static_cast<char>(b));
                        },
                        [&](const FuseDecode&) {}, [&](const StripDecode&) {}},
               step);
  return t;
}

Decoder parse_decoder(const json& j) {
  Decoder d;
  if (!j.is_null()) {
    d.present = true;
    parse_into(j, "decoder", d, 1);
  }
  return d;
}

} // namespace tpullm::text::detail
