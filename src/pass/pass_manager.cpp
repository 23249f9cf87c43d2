// Out-of-line definitions of tpullm/pass/pass_manager.hpp (compiled once into tpullm_core).
#include "tpullm/pass/pass_manager.hpp"

namespace tpullm::pass {

auto PassFailure::join(const std::vector<DiagnosticError>& d) -> std::string {
  std::string s;
  for (const auto& e : d)
    append_item(s, "\n", e.what());
  return s;
}

auto PassManager::add(std::string name, std::function<void(ir::Module&)> fn) -> PassManager& {
  PipelineEntry e;
  e.text = std::move(name);
  e.run = [fn = std::move(fn)](ir::Module& m, const PassContext&) { fn(m); };
  add_entry(std::move(e));
  return *this;
}

auto PassManager::pipeline() const -> std::string {
  std::string s;
  for (const auto& e : entries_)
    append_item(s, ",", e.text);
  return s;
}

auto PassManager::run(ir::Module& m) -> void {
  using clock = std::chrono::steady_clock;
  if (config_.verify_each)
    check(m, "", "input IR does not verify: ");
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    PipelineEntry& e = entries_[i];
    const auto t0 = clock::now();
    try {
      e.run(m, config_.context);
    } catch (const DiagnosticError& err) {
      throw PassFailure(
          name_of(e),
          {DiagnosticError(err.location(), "pass '" + name_of(e) + "' failed: " + err.message())});
    } catch (const Error& err) {
      const std::string what =
          err.where().empty() ? err.message() : err.where() + ": " + err.message();
      throw PassFailure(name_of(e),
                        {DiagnosticError(Location{}, "pass '" + name_of(e) + "' failed: " + what)});
    } catch (const std::exception& err) {
      throw PassFailure(name_of(e), {DiagnosticError(Location{}, "pass '" + name_of(e) +
                                                                     "' failed: " + err.what())});
    }
    const auto t1 = clock::now();
    if (config_.verify_each)
      check(m, name_of(e), "after pass '" + name_of(e) + "': ");
    const auto t2 = clock::now();
    if (config_.timing) {
      timings_[i].seconds += std::chrono::duration<double>(t1 - t0).count();
      timings_[i].verify_seconds += std::chrono::duration<double>(t2 - t1).count();
    }
    if (prints_after(e)) {
      std::ostream& os = config_.print_stream ? *config_.print_stream : std::cerr;
      os << "// ----- IR after pass '" << e.text << "' -----\n" << ir::text::print_module(m);
    }
  }
}

auto PassManager::print_timing(std::ostream& os) const -> void {
  double total = 0, verify = 0;
  for (const auto& t : timings_) {
    total += t.seconds + t.verify_seconds;
    verify += t.verify_seconds;
  }
  auto row = [&](double s, const std::string& what) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "  %10.6f  %5.1f%%  ", s, total > 0 ? 100.0 * s / total : 0.0);
    os << buf << what << "\n";
  };
  os << "===== pass timing (wall clock) =====\n";
  os << "    seconds     share  pass\n";
  for (const auto& t : timings_)
    row(t.seconds, t.pass);
  if (config_.verify_each)
    row(verify, "(verifier, after each pass)");
  row(total, "total");
}

auto PassManager::prints_after(const PipelineEntry& e) const -> bool {
  const auto& pa = config_.print_after;
  return std::find(pa.begin(), pa.end(), "all") != pa.end() ||
         std::find(pa.begin(), pa.end(), name_of(e)) != pa.end() ||
         std::find(pa.begin(), pa.end(), e.text) != pa.end();
}

auto PassManager::check(const ir::Module& m, const std::string& pass, const std::string& prefix)
    -> void {
  auto errs = ir::verify_module(m);
  if (errs.empty())
    return;
  std::vector<DiagnosticError> out;
  for (const auto& e : errs)
    out.emplace_back(e.location(), prefix + e.message());
  throw PassFailure(pass, std::move(out));
}

} // namespace tpullm::pass
