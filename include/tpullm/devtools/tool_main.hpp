#pragma once
/// The top of every tpullm command-line tool: no exception, however unexpected, ends in
/// std::terminate / abort. run_tool() runs the tool's body and turns
///   OutputError (an output could not be written)   -> one line, ExitCodes::output_error (1)
///   tpullm::Error (unusable input, refused output)  -> one message, ExitCodes::error
///   std::bad_alloc                                  -> "out of memory", ExitCodes::internal (2)
///   any other exception                             -> "internal error: ...", ExitCodes::internal
/// and checks that standard output was written completely (flush_stdout) before a success is
/// reported. It also installs a terminate handler (an exception escaping a noexcept function or
/// a thread still ends with one line and ExitCodes::internal, never an abort) and the SIGBUS
/// handler of mapped inputs (support/mapped_file.hpp) and the signal handler that removes the
/// temporary files of an interrupted run (support/temp_registry.hpp). A std::filesystem error
/// (a path the system refuses: no permission, too long, not a directory) is a one-line reason
/// with ExitCodes::error, like any unusable input.

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <new>
#include <string>
#include <string_view>

#include "tpullm/support/error.hpp"
#include "tpullm/support/mapped_file.hpp"
#include "tpullm/support/output_file.hpp"
#include "tpullm/support/temp_registry.hpp"

namespace tpullm {

/// Exit statuses run_tool() maps outcomes to.
struct ExitCodes {
  int error = 2;        ///< a tpullm::Error (unusable input, refused option or output path)
  int output_error = 1; ///< an OutputError: a write, flush or close of an output failed
  int internal = 2;     ///< anything else (a bug, or out of memory)
};

namespace detail {

inline char g_tool_program[128] = "tpullm";
inline int g_tool_internal_exit = 2;

/// `text` on one line: newlines become "; ".
std::string one_line(std::string_view text);

void report_line(std::string_view message) noexcept;

[[noreturn]] void on_terminate() noexcept;

} // namespace detail

/// Runs `body` (a callable returning the exit status) as described at the top of this file.
/// `program` prefixes every message ("tpullm verify: ..."). Never throws.
template <class F>
int run_tool(std::string_view program, F&& body, ExitCodes codes = {}) noexcept {
  const std::size_t n = std::min(program.size(), sizeof detail::g_tool_program - 1);
  std::memcpy(detail::g_tool_program, program.data(), n);
  detail::g_tool_program[n] = '\0';
  detail::g_tool_internal_exit = codes.internal;
  std::set_terminate(&detail::on_terminate);
  install_mapped_file_fault_handler(detail::g_tool_program);
  temp_registry::install_signal_cleanup();
  try {
    const int rc = body();
    flush_stdout();
    return rc;
  } catch (const OutputError& e) {
    detail::report_line(e.what());
    return codes.output_error;
  } catch (const Error& e) {
    detail::report_line(e.what());
    return codes.error;
  } catch (const std::filesystem::filesystem_error& e) {
    std::string where = e.path1().string();
    detail::report_line((where.empty() ? std::string("file system") : where) + ": " +
                        detail::one_line(e.code().message()));
    return codes.error;
  } catch (const std::bad_alloc&) {
    detail::report_line("out of memory (the input or the options ask for more memory than is "
                        "available)");
    return codes.internal;
  } catch (const std::exception& e) {
    detail::report_line("internal error: " + detail::one_line(e.what()));
    return codes.internal;
  } catch (...) {
    detail::report_line("internal error: unknown exception");
    return codes.internal;
  }
}

} // namespace tpullm
