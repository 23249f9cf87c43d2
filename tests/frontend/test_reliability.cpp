// Reliability of the support and frontend layers: readers refuse special files without
// blocking, outputs are atomic and every write is checked, a truncated mapping is a clean error,
// the tools' top level never aborts, goldens and tolerances must be finite, import and verify
// share one validation of quantized checkpoints, and memory is estimated before it is used.
#include "frontend_test_util.hpp"

#include "../cli/hostile.hpp"
#include "tpullm/frontend/goldens.hpp"
#include "tpullm/frontend/memory_estimate.hpp"
#include "tpullm/frontend/model_desc.hpp"
#include "tpullm/ir/text/parser.hpp"
#include "tpullm/support/input_file.hpp"
#include "tpullm/support/mapped_file.hpp"
#include "tpullm/support/output_file.hpp"
#include "tpullm/support/temp_file.hpp"
#include "tpullm/devtools/tool_main.hpp"
#include "tpullm/target/target.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <thread>

using namespace tpullm;
using namespace tpullm::frontend;
using namespace fe_test;
using Catch::Contains;
using KvDType = tpullm::ir::DType;

namespace {

/// Every entry name in `dir` (to see that no temporary file was left behind).
std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

/// Runs `body` in a child process with stderr captured; returns {exit status or -signal, stderr}.
template <class F>
std::pair<int, std::string> in_child(F&& body) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    ::dup2(fds[1], STDERR_FILENO);
    body();
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string err;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    err.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status), err};
}

/// Captures std::cerr while alive.
struct CaptureCerr {
  std::ostringstream text;
  std::streambuf* old = std::cerr.rdbuf(text.rdbuf());
  ~CaptureCerr() { std::cerr.rdbuf(old); }
};

} // namespace

TEST_CASE("readers refuse FIFOs, directories and devices without blocking", "[reliability]") {
  TempDir t;
  REQUIRE(::mkfifo((t / "fifo").c_str(), 0644) == 0);
  REQUIRE_THROWS_WITH(open_regular_file(t / "fifo"), Contains("is a FIFO (named pipe)"));
  REQUIRE_THROWS_WITH(MappedFile::open(t / "fifo"), Contains("is a FIFO"));
  REQUIRE_THROWS_WITH(SafetensorsFile::open(t / "fifo"), Contains("is a FIFO"));
  REQUIRE_THROWS_WITH(load_goldens(t / "fifo"), Contains("is a FIFO"));
  REQUIRE_THROWS_WITH(read_text_file(t / "fifo"), Contains("is a FIFO"));
  REQUIRE_THROWS_WITH(ir::text::parse_file(t / "fifo"), Contains("is a FIFO"));
  REQUIRE_THROWS_WITH(target::load_target(t / "fifo"), Contains("is a FIFO"));
  REQUIRE_THROWS_WITH(open_regular_file(t.path), Contains("is a directory"));
  REQUIRE_THROWS_WITH(read_regular_file("/dev/null"), Contains("is a character device"));
  // A checkpoint directory whose model.safetensors is a FIFO.
  TinyModel m;
  m.write(t / "model");
  fs::remove(t / "model" / "model.safetensors");
  REQUIRE(::mkfifo((t / "model" / "model.safetensors").c_str(), 0644) == 0);
  REQUIRE_THROWS_WITH(load_model(t / "model"), Contains("model.safetensors: is a FIFO"));
  // Regular files (also through a symlink) read as before; the size cap is enforced.
  write_file(t / "a.txt", "hello");
  fs::create_symlink(t / "a.txt", t / "link.txt");
  CHECK(read_regular_file(t / "link.txt") == "hello");
  REQUIRE_THROWS_WITH(read_regular_file(t / "a.txt", 4), Contains("larger than the 4-byte limit"));
}

TEST_CASE("FileAccess::read copies the file, immune to later truncation", "[reliability]") {
  TempDir t;
  const std::string content(100000, 'x');
  write_file(t / "f.bin", content);
  auto mapped = MappedFile::open(t / "f.bin");
  auto copied = MappedFile::open(t / "f.bin", FileAccess::read);
  CHECK(mapped->is_mapped());
  CHECK_FALSE(copied->is_mapped());
  REQUIRE(copied->size() == content.size());
  CHECK(reinterpret_cast<std::uintptr_t>(copied->bytes().data()) % 4096 == 0);
  REQUIRE(::truncate((t / "f.bin").c_str(), 0) == 0);
  CHECK(static_cast<char>(copied->bytes().back()) == 'x'); // no SIGBUS: private memory
}

TEST_CASE("a mapped file truncated while in use is one line and exit 2, not a crash",
          "[reliability][sigbus]") {
  TempDir t;
  write_file(t / "model.safetensors", std::string(1 << 20, 'x'));
  const fs::path path = t / "model.safetensors";
  auto [code, err] = in_child([&] {
    install_mapped_file_fault_handler("tpullm verify");
    auto f = MappedFile::open(path);
    if (::truncate(path.c_str(), 0) != 0)
      ::_exit(3);
    volatile std::byte b = f->bytes()[f->size() - 1]; // past the new end: SIGBUS
    (void)b;
    ::_exit(0); // not reached
  });
  CHECK(code == 2);
  CHECK_THAT(err, Contains("tpullm verify: I/O error: " + path.string() +
                           ": the file was truncated or changed while in use"));
  CHECK_THAT(err, Contains("rerun, or rerun with --no-mmap")); // every command that maps takes it
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  // The same with FileAccess::read (--no-mmap): the run does not notice.
  write_file(path, std::string(1 << 20, 'x'));
  auto [code2, err2] = in_child([&] {
    install_mapped_file_fault_handler("tpullm verify");
    auto f = MappedFile::open(path, FileAccess::read);
    if (::truncate(path.c_str(), 0) != 0)
      ::_exit(3);
    ::_exit(static_cast<char>(f->bytes()[f->size() - 1]) == 'x' ? 0 : 4);
  });
  CHECK(code2 == 0);
  CHECK(err2.empty());
}

TEST_CASE("OutputFile replaces its target only on commit", "[reliability][output]") {
  TempDir t;
  const fs::path target = t / "out.tir";
  write_file(target, "old");
  ::chmod(target.c_str(), 0640);
  {
    OutputFile f(target);
    f.write("new ");
    f.stream() << "contents " << 42;
    CHECK(read_file(target) == "old"); // nothing visible before commit
    CHECK(fs::exists(f.staging_path()));
    CHECK(f.staging_path().parent_path() == target.parent_path());
    f.commit();
    CHECK(f.committed());
  }
  CHECK(read_file(target) == "new contents 42");
  CHECK((fs::status(target).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
  CHECK(listing(t.path) == std::vector<std::string>{"out.tir"});
  {
    OutputFile f(target);
    f.write("half a result");
  } // no commit: discarded
  CHECK(read_file(target) == "new contents 42");
  CHECK(listing(t.path) == std::vector<std::string>{"out.tir"});
  // A new file in a new place.
  OutputFile n(t / "fresh.tir");
  n.write("x");
  n.commit();
  CHECK(read_file(t / "fresh.tir") == "x");
  // Moving an output keeps one owner of the staged file.
  OutputFile a(t / "moved.tir");
  a.write("y");
  OutputFile b = std::move(a);
  b.commit();
  CHECK(read_file(t / "moved.tir") == "y");
  CHECK(listing(t.path) == std::vector<std::string>{"fresh.tir", "moved.tir", "out.tir"});
}

TEST_CASE("OutputFile refuses targets it would damage", "[reliability][output]") {
  TempDir t;
  write_file(t / "real.tir", "precious");
  fs::create_symlink(t / "real.tir", t / "link.tir");
  fs::create_symlink(t / "nowhere", t / "dangling.tir");
  fs::create_directories(t / "dir");
  REQUIRE_THROWS_WITH(OutputFile(t / "link.tir"), Contains("symbolic link to a regular file"));
  REQUIRE_THROWS_WITH(OutputFile(t / "dangling.tir"), Contains("symbolic link to nothing"));
  REQUIRE_THROWS_WITH(OutputFile(t / "dir"), Contains("is a directory"));
  REQUIRE_THROWS_AS(OutputFile(t / "missing" / "x.tir"), OutputError);
  CHECK(read_file(t / "real.tir") == "precious");
  CHECK(fs::is_symlink(t / "link.tir"));
  CHECK(listing(t.path) == std::vector<std::string>{"dangling.tir", "dir", "link.tir", "real.tir"});
}

TEST_CASE("OutputFile checks every write: /dev/full fails, /dev/null works",
          "[reliability][output]") {
  {
    OutputFile f("/dev/full");
    CHECK(f.staging_path().empty()); // a device is written directly
    REQUIRE_THROWS_WITH(f.write(std::string(1 << 17, 'x')),
                        Contains("/dev/full: write failed: No space left on device"));
  }
  {
    OutputFile f("/dev/full");
    f.stream() << "small"; // buffered: the failure surfaces at commit
    REQUIRE_THROWS_AS(f.commit(), OutputError);
  }
  OutputFile n("/dev/null");
  n.write("discarded");
  n.commit();
  CHECK(n.committed());
}

TEST_CASE("standard output on a full disk is an error", "[reliability][output]") {
  std::cout.flush();
  std::fflush(stdout);
  const int saved = ::dup(STDOUT_FILENO);
  const int full = ::open("/dev/full", O_WRONLY);
  REQUIRE((saved >= 0 && full >= 0));
  ::dup2(full, STDOUT_FILENO);
  std::string error;
  try {
    write_stdout(std::string(1 << 17, 'x'));
    flush_stdout();
  } catch (const OutputError& e) {
    error = e.what();
  }
  std::cout.clear();
  std::clearerr(stdout);
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  ::close(full);
  CHECK_THAT(error, Contains("<stdout>: write failed: No space left on device"));
}

TEST_CASE("OutputDirectory swaps a finished directory in, or leaves the old one",
          "[reliability][output]") {
  TempDir t;
  const fs::path out = t / "out";
  {
    OutputDirectory d(out, ".marker");
    auto f = d.file("a.tir");
    f.write("A1");
    f.commit();
    CHECK_FALSE(fs::exists(out)); // nothing visible before commit
    d.commit();
  }
  CHECK(read_file(out / "a.tir") == "A1");
  CHECK(fs::exists(out / ".marker"));
  // Stale files of an earlier output disappear; a link planted in it is not written through.
  write_file(t / "victim", "victim");
  write_file(out / "stale.tir", "stale");
  fs::create_symlink(t / "victim", out / "b.tir");
  {
    OutputDirectory d(out, ".marker");
    auto f = d.file("b.tir");
    f.write("B2");
    f.commit();
    d.commit();
  }
  CHECK(read_file(t / "victim") == "victim");
  CHECK_FALSE(fs::is_symlink(out / "b.tir"));
  CHECK(read_file(out / "b.tir") == "B2");
  CHECK_FALSE(fs::exists(out / "stale.tir"));
  CHECK_FALSE(fs::exists(out / "a.tir"));
  // A failure (no commit) leaves the previous output whole and no staging directory.
  {
    OutputDirectory d(out, ".marker");
    auto f = d.file("b.tir");
    f.write("half");
    f.commit();
  }
  CHECK(read_file(out / "b.tir") == "B2");
  CHECK(listing(t.path) == std::vector<std::string>{"out", "victim"});
  // Refusals: a directory of other files, a symlink, a file, odd names.
  fs::create_directories(t / "mine");
  write_file(t / "mine" / "notes.txt", "keep");
  REQUIRE_THROWS_WITH(OutputDirectory(t / "mine", ".marker"),
                      Contains("is not an earlier output of this command"));
  fs::create_directory_symlink(t / "out", t / "out-link");
  REQUIRE_THROWS_WITH(OutputDirectory(t / "out-link", ".marker"), Contains("symbolic link"));
  REQUIRE_THROWS_WITH(OutputDirectory(t / "victim", ".marker"), Contains("not a directory"));
  OutputDirectory d(t / "new" / "nested", ".marker");
  REQUIRE_THROWS_AS(d.file("../escape"), Error);
  REQUIRE_THROWS_AS(d.file(".marker"), Error);
  CHECK(read_file(t / "mine" / "notes.txt") == "keep");
  // An empty existing directory may be used.
  fs::create_directories(t / "empty");
  OutputDirectory e(t / "empty/", ".marker");
  e.commit();
  CHECK(fs::exists(t / "empty" / ".marker"));
}

TEST_CASE("run_tool turns every exception into one line and an exit status", "[reliability]") {
  const ExitCodes codes{7, 5, 9};
  struct Case {
    std::function<int()> body;
    int code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[]() -> int { throw Error(ErrorKind::invalid_input, "x.json", "bad"); }, 7,
       "prog: invalid input: x.json: bad\n"},
      {[]() -> int { throw OutputError("out.tir", "write failed: No space left on device"); }, 5,
       "prog: I/O error: out.tir: write failed: No space left on device\n"},
      {[]() -> int { throw std::bad_alloc(); }, 9, "prog: out of memory"},
      {[]() -> int { throw std::out_of_range("vector::_M_range_check\nsecond line"); }, 9,
       "prog: internal error: vector::_M_range_check; second line\n"},
      {[]() -> int { throw 42; }, 9, "prog: internal error: unknown exception\n"},
      {[]() -> int { return 3; }, 3, ""},
  };
  for (const auto& c : cases) {
    CaptureCerr cap;
    const int rc = run_tool("prog", c.body, codes);
    const std::string err = cap.text.str();
    CHECK(rc == c.code);
    if (c.message.empty())
      CHECK(err.empty());
    else
      CHECK_THAT(err, Contains(c.message));
    CHECK(std::count(err.begin(), err.end(), '\n') <= 1);
  }
  // An exception escaping a noexcept function ends in the terminate handler: one line, exit 9.
  auto [code, err] = in_child([&] {
    run_tool(
        "prog",
        [] {
          std::thread([] { throw std::logic_error("thrown on a thread"); }).join();
          return 0;
        },
        codes);
  });
  CHECK(code == 9);
  CHECK_THAT(err, Contains("prog: internal error: thrown on a thread"));
}

TEST_CASE("goldens must be finite and --rel-tol finite and > 0", "[reliability][goldens]") {
  TempDir t;
  hostile::write_goldens_with(model_dir("llama-gqa"), t / "inf.safetensors", INFINITY);
  hostile::write_goldens_with(model_dir("llama-gqa"), t / "nan.safetensors", NAN);
  REQUIRE_THROWS_WITH(load_goldens(t / "inf.safetensors"),
                      Contains("a.prefill_logits': element [0, 0] is inf: goldens must be finite"));
  REQUIRE_THROWS_WITH(load_goldens(t / "nan.safetensors"), Contains("is nan"));
  for (double bad : {0.0, -1.0, double(INFINITY), double(NAN)})
    REQUIRE_THROWS_WITH(check_rel_tol(bad), Contains("--rel-tol: must be a finite number > 0"));
  check_rel_tol(1e-4);
  // compare_logits never passes on a non-finite golden, whoever built it.
  GoldenLogits g{1, 2, {1.0f, NAN}};
  CHECK(std::isnan(g.max_abs()));
  REQUIRE_THROWS_AS(compare_logits(std::vector<float>{1.0f, 0.0f}, g), Error);
  GoldenLogits ok{1, 2, {1.0f, 2.0f}};
  REQUIRE_THROWS_AS(compare_logits(std::vector<float>{1.0f, 2.0f}, ok, INFINITY), Error);
}

TEST_CASE("one validation of quantized checkpoints for import and verify",
          "[reliability][model_desc]") {
  TempDir t;
  SECTION("GPTQ scales must be F16") {
    hostile::write_bf16_scales_model(model_dir("llama-gqa-gptq-g32"), t / "m");
    REQUIRE_THROWS_WITH(load_model(t / "m"), Contains("dtype BF16 is not supported for gptq "
                                                      "scales (F16 only)"));
  }
  SECTION("AWQ scales must be F16") {
    hostile::write_bf16_scales_model(model_dir("qwen2-tied-bias-awq-g32"), t / "m");
    REQUIRE_THROWS_WITH(load_model(t / "m"), Contains("(F16 only)"));
  }
  SECTION("GPTQ v1 zero points must fit in 4 bits after the +1") {
    TinyModel m;
    m.make_gptq(false);
    for (auto& [name, e] : m.tensors)
      if (name.find(".qzeros") != std::string::npos)
        std::fill(e.bytes.begin(), e.bytes.end(), static_cast<char>(0xff)); // nibbles 15
    m.write(t / "m");
    REQUIRE_THROWS_WITH(load_model(t / "m"), Contains("zero point 16"));
  }
  SECTION("the group size must divide K") {
    TinyModel m;
    m.make_gptq(false, false, 8);
    m.config["quantization_config"]["group_size"] = 12;
    m.write(t / "m");
    REQUIRE_THROWS_WITH(load_model(t / "m"),
                        Contains("group_size 12 does not divide in_features 16"));
  }
  SECTION("a valid checkpoint still loads") {
    CHECK(load_model(model_dir("llama-gqa-gptq-g32")).layers.size() == 3);
  }
}

TEST_CASE("memory is estimated up front and a huge --seq-length is refused",
          "[reliability][memory]") {
  TempDir t;
  TinyModel m;
  m.config["max_position_embeddings"] = 2147483648LL;
  m.write(t / "m");
  const ModelDesc d = load_model(t / "m");
  StageParams p;
  const double limit = 8.0 * (1ull << 30); // as if the machine had 8 GiB
  // The defaults fit easily.
  for (auto w : {Workload::build, Workload::interpret, Workload::run})
    check_memory(estimate_memory(d, p, w), p, d, limit);
  p.seq_length = 2147483648LL;
  const auto e = estimate_memory(d, p, Workload::build);
  CHECK(e.seq_length > limit);
  REQUIRE_THROWS_WITH(check_memory(e, p, d, limit),
                      Contains("--seq-length: this run needs about") &&
                          Contains("lower --seq-length (2147483648)"));
  p.seq_length = 1 << 22;
  p.max_input_length = 1 << 21;
  REQUIRE_THROWS_WITH(check_memory(estimate_memory(d, p, Workload::interpret), p, d, limit),
                      Contains("--max-input-length"));
  // Interpreting holds f64 copies of the weights per block module.
  StageParams small;
  const auto b = estimate_memory(d, small, Workload::build);
  const auto i = estimate_memory(d, small, Workload::interpret);
  CHECK(b.weights == 0);
  CHECK(i.weights > 8.0 * 2 * 16 * 16 * 3); // at least the layers' linears in f64
  CHECK(estimate_memory(d, small, Workload::build, FileAccess::read).weights > 0);
  // Running compiled programs holds the KV cache: it grows with --seq-length.
  StageParams longer = small;
  longer.seq_length = small.seq_length * 4;
  CHECK(estimate_memory(d, longer, Workload::run).seq_length >
        estimate_memory(d, small, Workload::run).seq_length +
            2.0 * 2 * 3 * small.seq_length * 8 * 4);
  CHECK(memory_limit_bytes() > 0);
}

namespace {

/// Llama-3.2-1B's shapes on a tiny model's description.
void llama_3_2_1b_dims(ModelDesc& d) {
  d.dims.hidden = 2048;
  d.dims.intermediate = 8192;
  d.dims.layers = 16;
  d.dims.heads = 32;
  d.dims.kv_heads = 8;
  d.dims.head_dim = 64;
  d.dims.vocab = 128256;
}

} // namespace

// A run whose f32 KV cache does not fit but whose 16-bit one would is refused naming
// --kv-dtype f16 and both figures; one where only int8 fits names int8; one that fits no way
// gets the plain refusal.
TEST_CASE("a KV cache too large names the smaller dtype that fits", "[reliability][memory]") {
  TempDir t;
  TinyModel m;
  m.config["max_position_embeddings"] = 1 << 24;
  m.write(t / "m");
  ModelDesc d = load_model(t / "m");
  d.dims.head_dim = 64; // the tiny model's 4 would make an int8 row (4 + 4 bytes) an f16 one
  StageParams p;
  p.seq_length = 1 << 22;
  p.decode_chunk = 0;
  const double f32 = estimate_memory(d, p, Workload::run, FileAccess::map, KvDType::f32).total();
  const double f16 = estimate_memory(d, p, Workload::run, FileAccess::map, KvDType::f16).total();
  REQUIRE(f16 < f32);
  CHECK_NOTHROW(check_run_memory(d, p, FileAccess::map, KvDType::f32, f32));
  REQUIRE_THROWS_WITH(check_run_memory(d, p, FileAccess::map, KvDType::f32, (f16 + f32) / 2),
                      Contains("--seq-length: this run needs about") &&
                          Contains("with a 32-bit KV cache of 4194304 positions") &&
                          Contains("--kv-dtype f16 (or bf16) halves the cache and needs about"));
  CHECK_NOTHROW(check_run_memory(d, p, FileAccess::map, KvDType::f16, (f16 + f32) / 2));
  // below the f16 figure only int8 fits: both wider caches are told so; below int8's, nothing
  const double int8 = estimate_memory(d, p, Workload::run, FileAccess::map, KvDType::i8).total();
  REQUIRE(int8 < f16);
  for (KvDType t : {KvDType::f32, KvDType::f16})
    REQUIRE_THROWS_WITH(
        check_run_memory(d, p, FileAccess::map, t, (int8 + f16) / 2),
        Contains("--kv-dtype int8 stores a byte per value") &&
            Contains(t == KvDType::f32 ? "with a 32-bit KV cache" : "with a 16-bit KV cache"));
  CHECK_NOTHROW(check_run_memory(d, p, FileAccess::map, KvDType::i8, (int8 + f16) / 2));
  for (KvDType t : {KvDType::f32, KvDType::f16, KvDType::i8})
    REQUIRE_THROWS_WITH(check_run_memory(d, p, FileAccess::map, t, int8 * 0.9),
                        Contains("lower --seq-length") && !Contains("--kv-dtype"));
}

// Issue 38's case: Llama-3.2-1B's shapes at 128k positions on a 24 GiB machine. The KV cache
// is 32 KiB per token in f16 (4 GiB), 8 GiB in f32, 2.1 GiB in int8, beside 2.5 GB of bf16
// weights (mapped): the run fits with any dtype; at 512k positions only f16 or int8 would, at
// 1M only int8, and the refusals say so.
TEST_CASE("Llama-3.2-1B at 128k positions fits a 24 GiB machine", "[reliability][memory]") {
  TempDir t;
  TinyModel m;
  m.config["max_position_embeddings"] = 1 << 20;
  m.write(t / "m");
  ModelDesc d = load_model(t / "m");
  llama_3_2_1b_dims(d);
  StageParams p;
  p.seq_length = 131072;
  const double limit = 24.0 * (1ull << 30);
  const auto f16 = estimate_memory(d, p, Workload::run, FileAccess::map, KvDType::f16);
  const auto f32 = estimate_memory(d, p, Workload::run, FileAccess::map, KvDType::f32);
  CHECK(f32.seq_length - f16.seq_length >= 4.0 * (1ull << 30)); // the cache's second half
  CHECK_NOTHROW(check_run_memory(d, p, FileAccess::map, KvDType::f16, limit));
  CHECK_NOTHROW(check_run_memory(d, p, FileAccess::map, KvDType::f32, limit));
  CHECK_NOTHROW(check_run_memory(d, p, FileAccess::map, KvDType::i8, limit));
  p.seq_length = 524288;
  CHECK_NOTHROW(check_run_memory(d, p, FileAccess::map, KvDType::f16, limit));
  REQUIRE_THROWS_WITH(check_run_memory(d, p, FileAccess::map, KvDType::f32, limit),
                      Contains("--kv-dtype f16 (or bf16) halves the cache"));
  // at 2^20 positions an f16 cache is 32 GiB; an int8 one (8 heads x (64 + 4) bytes per layer,
  // key and value: 17 KiB per token) is 17 GiB, which fits beside the weights
  p.seq_length = 1 << 20;
  REQUIRE_THROWS_WITH(check_run_memory(d, p, FileAccess::map, KvDType::f16, limit),
                      Contains("--kv-dtype int8 stores a byte per value"));
  CHECK_NOTHROW(check_run_memory(d, p, FileAccess::map, KvDType::i8, limit));
}

// calibrate widens the weights into a bounded store a layer at a time: its estimate holds the
// store, not the interpreter's f64 copy of every weight per module, so a 1B model is not refused
// on a 24 GiB machine (it was: "needs about 42.3 GiB").
TEST_CASE("calibrate's memory estimate holds its weight store, not every weight in f64",
          "[reliability][memory]") {
  TempDir t;
  TinyModel m;
  m.write(t / "m");
  ModelDesc d = load_model(t / "m");
  StageParams p;
  const double gib = double(1ull << 30);
  const double layer = 8 * frontend::detail::max_layer_elements(d);
  CHECK(layer > 0);
  // the budget when it is the larger, else the sessions' layers at once
  CHECK(estimate_calibrate_memory(d, p, FileAccess::map, 1, gib).weights == gib);
  CHECK(estimate_calibrate_memory(d, p, FileAccess::map, 3, 0).weights == 3 * layer);
  CHECK(estimate_calibrate_memory(d, p, FileAccess::read, 1, gib).weights > gib);
  // each session has its own caches and activations
  const auto one = estimate_calibrate_memory(d, p, FileAccess::map, 1, gib);
  const auto two = estimate_calibrate_memory(d, p, FileAccess::map, 2, gib);
  CHECK(two.seq_length == 2 * one.seq_length);
  CHECK(two.max_input_length == 2 * one.max_input_length);
  // Llama-3.2-1B's shapes: interpreting wants far more than 24 GiB, calibrating about 1.3 GiB.
  llama_3_2_1b_dims(d);
  const double limit = 24 * gib;
  REQUIRE_THROWS_WITH(check_memory(estimate_memory(d, p, Workload::interpret), p, d, limit),
                      Contains("this run needs about"));
  const auto c = estimate_calibrate_memory(d, p, FileAccess::map, 1, gib);
  CHECK(c.total() < 2 * gib);
  CHECK_NOTHROW(check_memory(c, p, d, limit));
}

// Issue 19: a signal ends a writing process without leaving its temporary files. A child
// process stages a file, a directory of files and a TemporaryFile, then is killed by each
// signal the registry handles; the parent checks how it died and that only the old outputs
// remain.
TEST_CASE("a signal removes every staged output and the process dies of it", "[reliability]") {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) {
    TempDir t;
    write_file(t / "old.txt", "old\n");
    fs::create_directories(t / "olddir");
    write_file(t / "olddir" / "kept.txt", "kept\n");
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      temp_registry::install_signal_cleanup();
      OutputFile f(t / "old.txt");
      f.write("new, not committed\n");
      OutputDirectory d(t / "newdir", ".marker");
      for (const char* name : {"a", "b", "c"}) {
        auto g = d.file(name);
        g.write("x");
        g.commit(); // into the staging directory, which stays registered
      }
      TemporaryFile tmp(t.path, "tmp-", ".x");
      ::raise(sig);
      ::_exit(99); // not reached: the handler re-raises with the default action
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    INFO("signal " << sig);
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == sig);
    CHECK(listing(t.path) == std::vector<std::string>{"old.txt", "olddir"});
    CHECK(read_file(t / "old.txt") == "old\n");
    CHECK(listing(t / "olddir") == std::vector<std::string>{"kept.txt"});
  }
}

// A signal another thread takes (a compile or OpenMP worker) is cleaned up after by the thread
// that installed the handler, so it waits for that thread's commit: the child blocks the
// signals as a commit does, a second thread raises SIGINT at itself, and the main thread must
// still find its staged file and finish the commit before the process dies of the signal.
TEST_CASE("a signal taken by another thread waits for the main thread's commit", "[reliability]") {
  TempDir t;
  write_file(t / "old.txt", "old\n");
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    temp_registry::install_signal_cleanup();
    OutputFile f(t / "old.txt");
    f.write("new\n");
    {
      SignalBlock commit;
      std::thread([] {
        sigset_t set;      // a worker inherits the block: this one lifts it, as a pool started
        sigemptyset(&set); // before the commit would not have it
        sigaddset(&set, SIGINT);
        ::pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
        ::raise(SIGINT);
      }).join();
      if (!fs::exists(f.staging_path()))
        ::_exit(98); // the handler ran on the other thread and removed the staged file
      f.commit();
    }
    ::_exit(99); // not reached: the pending signal ends the process when the block ends
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGINT);
  CHECK(listing(t.path) == std::vector<std::string>{"old.txt"});
  CHECK(read_file(t / "old.txt") == "new\n");
}

TEST_CASE("an output FIFO without a reader is refused, with one it is written", "[reliability]") {
  TempDir t;
  REQUIRE(::mkfifo((t / "fifo").c_str(), 0644) == 0);
  REQUIRE_THROWS_WITH(OutputFile(t / "fifo"), Contains("that nothing reads"));
  std::string got;
  std::thread reader([&] {
    std::ifstream in(t / "fifo", std::ios::binary); // blocks until the writer opens
    got.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  });
  // Wait for the reader to open its end, then write.
  for (int i = 0; i < 200; ++i) {
    try {
      OutputFile f(t / "fifo");
      f.write("through the pipe");
      f.commit();
      break;
    } catch (const Error&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  reader.join();
  CHECK(got == "through the pipe");
}

TEST_CASE("output names no file can have are refused before anything is created", "[reliability]") {
  TempDir t;
  REQUIRE_THROWS_WITH(OutputFile(""), Contains("the output path is empty"));
  REQUIRE_THROWS_WITH(OutputFile(t / std::string(300, 'x')), Contains("longer than 255"));
  REQUIRE_THROWS_WITH(OutputFile(t.path / "dir" / ""), Contains("names a directory"));
  REQUIRE_THROWS_WITH(OutputFile(t / (std::string(300, 'd') + "/x")),
                      Contains("cannot be used as an output path"));
  CHECK(listing(t.path).empty());
}

TEST_CASE("TemporaryFile is private, unpredictable and removes only itself", "[reliability]") {
  TempDir t;
  write_file(t / "tmp-precious.x", "not ours\n");
  fs::path a, b;
  {
    TemporaryFile one(t.path, "tmp-", ".x"), two(t.path, "tmp-", ".x");
    a = one.path();
    b = two.path();
    CHECK(a != b);
    CHECK(fs::exists(a));
    CHECK((fs::status(a).permissions() & fs::perms::all) ==
          (fs::perms::owner_read | fs::perms::owner_write));
  }
  CHECK(!fs::exists(a));
  CHECK(!fs::exists(b));
  CHECK(read_file(t / "tmp-precious.x") == "not ours\n");
  ::setenv("TMPDIR", (t / "missing").c_str(), 1);
  REQUIRE_THROWS_WITH(temp_directory(), Contains("TMPDIR"));
  ::unsetenv("TMPDIR");
}
