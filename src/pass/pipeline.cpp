// Out-of-line definitions of tpullm/pass/pipeline.hpp (compiled once into tpullm_core).
#include "tpullm/pass/pipeline.hpp"

namespace tpullm::pass {

std::string pipeline_entry_text(std::string_view name, const std::vector<OptionText>& opts) {
  std::string s(name);
  if (opts.empty())
    return s;
  s += "{";
  for (std::size_t i = 0; i < opts.size(); ++i)
    append_item(s, i ? "," : "", opts[i].key + "=" + opts[i].value);
  return s + "}";
}

PipelineEntry bind_pass(std::string_view name, const std::vector<OptionText>& options, int column) {
  const PassInfo* info = find_pass(name);
  if (!info) {
    std::string known;
    for (const auto& p : pass_registry())
      append_item(known, ", ", p.name);
    throw PipelineError("unknown pass '" + std::string(name) + "' (passes: " + known + ")", column);
  }
  PipelineEntry e;
  e.info = info;
  e.options = options;
  e.text = pipeline_entry_text(name, options);
  try {
    e.run = info->bind(options);
  } catch (const OptionError& err) {
    throw PipelineError(err.what(), err.column() ? err.column() : column);
  } catch (const PipelineError&) {
    throw;
  } catch (const Error& err) {
    // What the pass derives from its options when bound (e.g. lower-to-tpu's plan) refused them.
    throw PipelineError(
        "pass '" + std::string(name) +
            "': " + (err.where().empty() ? err.message() : err.where() + ": " + err.message()),
        column);
  }
  return e;
}

std::vector<PipelineEntry> parse_pipeline(std::string_view text) {
  std::size_t pos = 0;
  auto col = [&](std::size_t p) { return static_cast<int>(p) + 1; };
  auto skip_ws = [&] {
    while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos])))
      ++pos;
  };
  auto ident = [&](const char* what) {
    skip_ws();
    const std::size_t start = pos;
    while (pos < text.size() && (std::isalnum(static_cast<unsigned char>(text[pos])) ||
                                 text[pos] == '-' || text[pos] == '_'))
      ++pos;
    if (pos == start) {
      const std::string got =
          pos < text.size() ? "'" + std::string(1, text[pos]) + "'" : "end of pipeline";
      throw PipelineError(std::string("expected ") + what + ", got " + got, col(pos));
    }
    return std::string(text.substr(start, pos - start));
  };
  std::vector<PipelineEntry> out;
  skip_ws();
  if (pos == text.size())
    return out;
  while (true) {
    skip_ws();
    const int name_col = col(pos);
    const std::string name = ident("a pass name");
    std::vector<OptionText> opts;
    skip_ws();
    if (pos < text.size() && text[pos] == '{') {
      const std::size_t open = pos++;
      skip_ws();
      if (pos < text.size() && text[pos] == '}') {
        ++pos;
      } else {
        while (true) {
          skip_ws();
          OptionText o;
          o.key_column = col(pos);
          o.key = ident("an option name");
          skip_ws();
          if (pos >= text.size() || text[pos] != '=')
            throw PipelineError("expected '=' after option '" + o.key + "'", col(pos));
          ++pos;
          skip_ws();
          o.value_column = col(pos);
          const std::size_t start = pos;
          while (pos < text.size() && text[pos] != ',' && text[pos] != '}' && text[pos] != '{')
            ++pos;
          std::size_t end = pos;
          while (end > start && std::isspace(static_cast<unsigned char>(text[end - 1])))
            --end;
          o.value = std::string(text.substr(start, end - start));
          opts.push_back(std::move(o));
          if (pos < text.size() && text[pos] == ',') {
            ++pos;
            continue;
          }
          if (pos < text.size() && text[pos] == '}') {
            ++pos;
            break;
          }
          throw PipelineError("expected ',' or '}' to close the options of '" + name +
                                  "' opened at column " + std::to_string(col(open)),
                              col(pos));
        }
      }
    }
    out.push_back(bind_pass(name, opts, name_col));
    skip_ws();
    if (pos == text.size())
      return out;
    if (text[pos] != ',')
      throw PipelineError("expected ',' between passes, got '" + std::string(1, text[pos]) + "'",
                          col(pos));
    ++pos;
  }
}

auto Pipeline::text() const -> std::string {
  std::string s;
  for (const auto& e : entries_)
    append_item(s, ",", e.text);
  return s;
}

} // namespace tpullm::pass
