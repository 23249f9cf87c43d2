#pragma once
/// Threads as the ranks of a multi-process run, for the pipeline and tensor-parallel tests
/// (test_layer_pipeline.cpp, test_tensor_parallel.cpp): a PipelineLink over in-process
/// mailboxes (all-reduce: the link's default, over send / recv), and stages that fail on purpose.

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "tpullm/runtime/layer_pipeline.hpp"
#include "tpullm/runtime/stages.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm_test {

using namespace tpullm;

/// In-process mailboxes: one FIFO per (from, to) pair.
struct ThreadHub {
  std::mutex m;
  std::condition_variable cv;
  std::map<std::pair<int, int>, std::deque<std::vector<std::byte>>> boxes;
};

/// A PipelineLink between threads of one process.
class ThreadLink : public runtime::PipelineLink {
public:
  ThreadLink(ThreadHub& hub, int rank, int ranks) : hub_(hub), rank_(rank), ranks_(ranks) {}
  int rank() const override { return rank_; }
  int ranks() const override { return ranks_; }
  void send(int to, std::span<const std::byte> bytes) override {
    {
      std::lock_guard lock(hub_.m);
      hub_.boxes[{rank_, to}].emplace_back(bytes.begin(), bytes.end());
    }
    hub_.cv.notify_all();
  }
  std::size_t recv(int from, std::span<std::byte> buffer) override {
    std::unique_lock lock(hub_.m);
    auto& box = hub_.boxes[{from, rank_}];
    hub_.cv.wait(lock, [&] { return !box.empty(); });
    auto msg = std::move(box.front());
    box.pop_front();
    check(msg.size() <= buffer.size(), ErrorKind::io, "thread link", "message too large");
    std::memcpy(buffer.data(), msg.data(), msg.size());
    return msg.size();
  }

private:
  ThreadHub& hub_;
  int rank_, ranks_;
};

/// Stages that throw on their `fail_at`-th run (counting from 1), else run `inner`.
struct FailingStages : runtime::Stages {
  runtime::Stages& inner;
  int fail_at, runs = 0;
  FailingStages(runtime::Stages& s, int at) : inner(s), fail_at(at) {}
  runtime::StageHandle resolve(const std::string& name) override { return inner.resolve(name); }
  void run(runtime::StageHandle h, std::span<const runtime::ConstBytes> in,
           std::span<const runtime::MutBytes> out) override {
    if (++runs == fail_at)
      throw Error(ErrorKind::unsupported, "test", "a layer that fails on purpose");
    inner.run(h, in, out);
  }
  void run_on(runtime::StageHandle h, std::span<const runtime::ConstBytes> in,
              std::span<const runtime::MutBytes> out,
              std::span<const std::int32_t> slots) override {
    if (++runs == fail_at)
      throw Error(ErrorKind::unsupported, "test", "a layer that fails on purpose");
    inner.run_on(h, in, out, slots);
  }
  void run(const std::string& name, std::span<const runtime::ConstBytes> in,
           std::span<const runtime::MutBytes> out) override {
    inner.run(name, in, out);
  }
  bool has_function(const std::string& name) const override { return inner.has_function(name); }
  bool owns_kv_cache() const override { return true; }
};

} // namespace tpullm_test
