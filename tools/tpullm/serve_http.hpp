#pragma once
// The connection handling of `tpullm serve` around cpp-httplib (docs/serve.md, "Connections").
// httplib accepts; from then on a connection belongs to this server: one reader thread collects
// every request's header block with poll() (a client sending slowly costs no worker thread), and
// only a complete header block goes to a worker, which runs httplib's request parser and the
// routes over a stream of ours. That stream bounds the time of the whole request (headers and
// body) instead of each read, keeps bytes read ahead for the next request of the connection
// (pipelining), and answers a client that half-closed its side. Probes (GET /health, GET
// /metrics) have workers of their own, so they are answered while clients hold every other one.
// A connection that cannot be served (too many, every worker taken, shutting down, headers too
// large or too slow) gets a short HTTP error and is closed; none is dropped without an answer.
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <httplib.h>

namespace tpullm::cli::serve {

/// Bounds of the connection handling (docs/serve.md states them).
struct HttpLimits {
  /// The whole of one request, headers and body, from its first byte: past it the client gets
  /// 408 and the connection is closed.
  std::chrono::milliseconds request_time{10000};
  /// A kept-alive connection idle this long between requests is closed.
  std::chrono::milliseconds keep_alive{5000};
  /// One write of an answer (a client that reads nothing for this long is disconnected).
  std::chrono::milliseconds write_time{5000};
  std::size_t header_bytes = 64 << 10; ///< request line + headers; more gets 431
  /// Bytes a worker reads from the socket for one request (the body with its framing): past
  /// it a read fails, so no framing (a chunk-size line without end, tiny chunks) makes httplib
  /// buffer more than this, whatever the body bound of the route.
  std::size_t read_bytes = 4 << 20;
  /// Open at once; more get 503. httplib answers 500 on a socket number >= FD_SETSIZE (1024):
  /// this keeps them below it.
  std::size_t max_connections = 512;
  std::size_t requests_per_connection = 100; ///< then the connection is closed
  std::size_t workers = 8;                   ///< threads for every route
  std::size_t probe_workers = 2;             ///< threads for GET /health and GET /metrics only
  /// Complete requests that may wait for a busy worker; more get 503.
  std::size_t waiting = 64;
};

/// What a route's handler may ask of the connection it runs on (worker threads only).
struct ConnectionControl {
  /// Closes the connection after this answer (a body left unread, a refused request).
  static void close_after_answer();
  /// True when the current request's time bound passed while its body was being read.
  static bool request_timed_out();
  /// True when the current request's reads reached HttpLimits::read_bytes.
  static bool request_too_large();
};

/// See the file comment. open() (a port in use fails before anything is loaded), configure
/// routes and handlers as on httplib::Server, start(), listen_after_bind() (returns after
/// stop()), then finish().
class HttpServer : public httplib::Server {
public:
  /// Starts no thread yet (see start()); `limits.workers` is taken from start().
  explicit HttpServer(HttpLimits limits);
  ~HttpServer() override;
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// Binds `host`:`port` (0: any free port) with a listen backlog of SOMAXCONN, SO_REUSEADDR
  /// only (another server on the same port makes this fail) unless `reuse_port` (SO_REUSEPORT:
  /// several servers share the port). Returns the port, or -1 when it cannot listen.
  int open(const std::string& host, int port, bool reuse_port);
  /// Starts the reader thread and `workers` workers (plus the probes'). `refused(status, why)`
  /// is told of each connection answered outside httplib (a short 408, 431 or 503 and a close),
  /// for the log and the metrics. Call once, after open() and before listen_after_bind().
  void start(std::size_t workers, std::function<void(int, const std::string&)> refused);
  /// Shutdown, first step: stop reading new requests (a read in progress fails at once, a
  /// connection waiting for its headers gets 503 and is closed). Answers still being written
  /// go on. Any thread.
  void begin_stop();
  /// Shutdown, last step (after listen_after_bind() returned): waits up to `grace` for the
  /// workers, then closes every connection still open (a blocked read or write fails) and
  /// joins them.
  void finish(std::chrono::milliseconds grace);
  /// Connections open now (waiting for headers, kept alive, or being served).
  std::size_t open_connections() const { return open_.load(); }

  struct Connection;

private:
  bool process_and_close_socket(socket_t sock) override;
  class Pool;
  void adopt(std::unique_ptr<Connection> c);
  void collect();
  void serve(std::unique_ptr<Connection> c);
  /// A whole HTTP answer: `status`, OpenAI's error object with `why`, Connection: close.
  std::string canned(int status, const std::string& why) const;
  void refuse(Connection& c, int status, const std::string& why);
  void close_connection(std::unique_ptr<Connection> c, bool linger);

  HttpLimits limits_;
  std::function<void(int, const std::string&)> refused_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::size_t> open_{0};
  int wake_[2] = {-1, -1}; ///< a pipe that wakes the reader thread
  std::mutex m_;
  std::vector<std::unique_ptr<Connection>> incoming_; ///< for the reader thread
  std::set<int> active_;                              ///< sockets a worker is serving
  bool joined_ = false;                               ///< finish() joined the workers
  std::unique_ptr<Pool> workers_, probes_;
  std::thread reader_;
  bool finished_ = false;
};

/// `text` with every byte outside printable ASCII, and the backslash, written as \xHH, and cut
/// to `max_bytes` (then "..."): a client's bytes as they may reach a log line.
std::string log_escape(std::string_view text, std::size_t max_bytes = 256);

} // namespace tpullm::cli::serve
