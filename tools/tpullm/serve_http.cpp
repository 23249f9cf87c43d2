// Connection handling of `tpullm serve` around cpp-httplib (serve_http.hpp).
#include "serve_http.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "serve_api.hpp"

namespace tpullm::cli::serve {

using clock_type = std::chrono::steady_clock;

/// One client connection: its socket, the bytes read and not yet parsed, and where its current
/// request stands.
struct HttpServer::Connection {
  int fd = -1;
  std::string buf;                 ///< bytes read from the socket; buf[off..] not yet consumed
  std::size_t off = 0;             ///< first unconsumed byte of buf
  bool started = false;            ///< the current request's first byte has arrived
  clock_type::time_point deadline; ///< its whole-request bound (valid when started)
  clock_type::time_point since;    ///< idle since (keep-alive, valid when !started)
  std::size_t served = 0;          ///< requests answered on this connection
  bool close_after = false;        ///< a handler asked to close after its answer
  bool timed_out = false;          ///< the request bound passed during a read
  bool too_large = false;          ///< the request's reads reached HttpLimits::read_bytes
  std::size_t received = 0;        ///< bytes a worker read from the socket for this request
  bool eof = false;                ///< the client closed its sending side
  bool lingering = false;          ///< answered and half-closed: draining until linger_until
  clock_type::time_point linger_until;

  std::size_t avail() const { return buf.size() - off; }
  void compact() {
    if (off > 0 && off * 2 >= buf.size()) {
      buf.erase(0, off);
      off = 0;
    }
  }
  /// The unconsumed bytes hold a whole header block (httplib ends it at an empty CRLF line).
  bool headers_complete() const {
    const std::string_view v(buf.data() + off, avail());
    return v.starts_with("\r\n") || v.find("\n\r\n") != std::string_view::npos;
  }
  /// GET /health or GET /metrics (the probe routes, answered by their own workers).
  bool is_probe() const {
    const std::string_view v(buf.data() + off, avail());
    for (std::string_view route : {"/health", "/metrics"})
      if (v.starts_with("GET ") && v.substr(4).starts_with(route)) {
        const auto rest = v.substr(4 + route.size());
        if (!rest.empty() && (rest[0] == ' ' || rest[0] == '?'))
          return true;
      }
    return false;
  }
};

namespace {

thread_local HttpServer::Connection* current = nullptr;

int remaining_ms(clock_type::time_point until, int cap) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(until - clock_type::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, cap));
}

std::string status_text(int status) {
  switch (status) {
  case 400:
    return "Bad Request";
  case 408:
    return "Request Timeout";
  case 431:
    return "Request Header Fields Too Large";
  case 503:
    return "Service Unavailable";
  default:
    return "Error";
  }
}

/// httplib's Stream over a Connection: reads bounded by the request's deadline (and failing at
/// once when the server stops), bytes read ahead kept in the connection, writes bounded per call.
class ConnStream final : public httplib::Stream {
public:
  ConnStream(HttpServer::Connection& c, const std::atomic<bool>& stopping,
             std::chrono::milliseconds write_time, std::size_t read_bytes)
      : c_(c), stopping_(stopping), write_time_(write_time), read_bytes_(read_bytes) {}

  bool is_readable() const override { return c_.avail() > 0 || ready(POLLIN, 0); }
  bool is_writable() const override {
    pollfd p{c_.fd, POLLOUT, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & POLLOUT) && !(p.revents & (POLLERR | POLLNVAL));
  }

  ssize_t read(char* ptr, std::size_t size) override {
    if (c_.avail() == 0) {
      c_.buf.clear();
      c_.off = 0;
      if (c_.eof)
        return 0;
      for (;;) {
        if (stopping_)
          return -1;
        if (clock_type::now() >= c_.deadline) {
          c_.timed_out = true;
          return -1;
        }
        if (ready(POLLIN, remaining_ms(c_.deadline, 100)))
          break;
      }
      if (c_.received >= read_bytes_) {
        c_.too_large = true;
        return -1;
      }
      char chunk[16384];
      const ssize_t n = ::recv(c_.fd, chunk, std::min(sizeof chunk, read_bytes_ - c_.received), 0);
      if (n == 0)
        c_.eof = true;
      if (n <= 0)
        return n;
      c_.received += static_cast<std::size_t>(n);
      c_.buf.assign(chunk, static_cast<std::size_t>(n));
    }
    const std::size_t n = std::min(size, c_.avail());
    std::memcpy(ptr, c_.buf.data() + c_.off, n);
    c_.off += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, std::size_t size) override {
    const auto until = clock_type::now() + write_time_;
    while (!ready(POLLOUT, remaining_ms(until, 100)))
      if (clock_type::now() >= until)
        return -1;
    return ::send(c_.fd, ptr, size, MSG_NOSIGNAL);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address(::getpeername, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address(::getsockname, ip, port);
  }
  socket_t socket() const override { return c_.fd; }

private:
  /// poll() for `events` up to `ms`: true when the socket is ready or failed (the next recv or
  /// send then says which), false when the time ran out.
  bool ready(short events, int ms) const {
    pollfd p{c_.fd, events, 0};
    return ::poll(&p, 1, ms) > 0;
  }
  template <class F>
  void address(F f, std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    ip.clear();
    port = 0;
    if (f(c_.fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      return;
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (::getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof host, serv, sizeof serv,
                      NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
      ip = host;
      port = std::atoi(serv);
    }
  }

  HttpServer::Connection& c_;
  const std::atomic<bool>& stopping_;
  std::chrono::milliseconds write_time_;
  std::size_t read_bytes_;
};

} // namespace

void ConnectionControl::close_after_answer() {
  if (current)
    current->close_after = true;
}

bool ConnectionControl::request_timed_out() {
  return current && current->timed_out;
}

bool ConnectionControl::request_too_large() {
  return current && current->too_large;
}

/// A fixed set of threads taking connections with a whole header block from a queue.
class HttpServer::Pool {
public:
  Pool(std::size_t n, std::function<void(std::unique_ptr<Connection>)> run) : run_(std::move(run)) {
    for (std::size_t i = 0; i < n; ++i)
      threads_.emplace_back([this] { work(); });
  }
  ~Pool() { join(); }
  /// Queues `c` unless `waiting` connections already wait for a busy worker (then `c` stays).
  bool offer(std::unique_ptr<Connection>& c, std::size_t waiting) {
    {
      std::lock_guard lock(m_);
      if (stop_ || q_.size() >= idle_ + waiting)
        return false;
      q_.push_back(std::move(c));
    }
    cv_.notify_one();
    return true;
  }
  /// The threads serve what is queued, then exit.
  void join() {
    {
      std::lock_guard lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_)
      if (t.joinable())
        t.join();
  }

private:
  void work() {
    for (;;) {
      std::unique_ptr<Connection> c;
      {
        std::unique_lock lock(m_);
        ++idle_;
        cv_.wait(lock, [&] { return stop_ || !q_.empty(); });
        --idle_;
        if (q_.empty())
          return;
        c = std::move(q_.front());
        q_.pop_front();
      }
      run_(std::move(c));
    }
  }

  std::function<void(std::unique_ptr<Connection>)> run_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Connection>> q_;
  std::size_t idle_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

HttpServer::HttpServer(HttpLimits limits) : limits_(limits) {
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error("tpullm serve: pipe2 failed");
  // httplib's accept loop only hands each socket over (process_and_close_socket).
  new_task_queue = [] { return new httplib::ThreadPool(1); };
  set_keep_alive_max_count(limits_.requests_per_connection);
  set_keep_alive_timeout(
      std::chrono::duration_cast<std::chrono::seconds>(limits_.keep_alive).count());
}

void HttpServer::start(std::size_t workers, std::function<void(int, const std::string&)> refused) {
  limits_.workers = workers;
  refused_ = std::move(refused);
  auto run = [this](std::unique_ptr<Connection> c) { serve(std::move(c)); };
  workers_ = std::make_unique<Pool>(limits_.workers, run);
  probes_ = std::make_unique<Pool>(limits_.probe_workers, run);
  reader_ = std::thread([this] { collect(); });
}

HttpServer::~HttpServer() {
  begin_stop();
  finish(std::chrono::milliseconds(0));
  ::close(wake_[0]);
  ::close(wake_[1]);
}

int HttpServer::open(const std::string& host, int port, bool reuse_port) {
  set_socket_options([reuse_port](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (reuse_port)
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEPORT, &yes, sizeof yes);
  });
  const int bound = port == 0 ? bind_to_any_port(host) : (bind_to_port(host, port) ? port : -1);
  if (bound <= 0)
    return -1;
  // httplib listens with a backlog of 5: connections beyond it were reset under a burst. A
  // second listen() on a listening socket sets its backlog.
  if (::listen(svr_sock_, SOMAXCONN) != 0)
    return -1;
  return bound;
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  if (stopping_) { // accepted while stopping (the reader thread may be gone): 503 and close
    const std::string out = canned(503, "the server is shutting down");
    [[maybe_unused]] const auto n =
        ::send(sock, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return true;
  }
  auto c = std::make_unique<Connection>();
  c->fd = sock;
  c->since = clock_type::now();
  c->served = 0;
  ++open_;
  {
    std::lock_guard lock(m_);
    incoming_.push_back(std::move(c));
  }
  const char x = 0;
  [[maybe_unused]] const auto w = ::write(wake_[1], &x, 1);
  return true;
}

void HttpServer::adopt(std::unique_ptr<Connection> c) {
  {
    std::lock_guard lock(m_);
    incoming_.push_back(std::move(c));
  }
  const char x = 0;
  [[maybe_unused]] const auto w = ::write(wake_[1], &x, 1);
}

std::string HttpServer::canned(int status, const std::string& why) const {
  std::string code = status == 408   ? "request_timeout"
                     : status == 431 ? "headers_too_large"
                     : status == 503 ? (stopping_ ? "shutting_down" : "server_busy")
                                     : "bad_request";
  const std::string body = error_body(
      ApiError{status, why, status == 503 ? "server_error" : "invalid_request_error", "", code});
  return "HTTP/1.1 " + std::to_string(status) + " " + status_text(status) +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n" + (status == 503 ? "Retry-After: 1\r\n" : "") + "\r\n" + body;
}

void HttpServer::refuse(Connection& c, int status, const std::string& why) {
  const std::string out = canned(status, why);
  [[maybe_unused]] const auto n = ::send(c.fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  // Half-close and read what the client still sends for a moment: closing with unread bytes
  // would reset the connection and could destroy the answer before the client reads it.
  ::shutdown(c.fd, SHUT_WR);
  c.lingering = true;
  c.linger_until = clock_type::now() + std::chrono::seconds(1);
  if (refused_)
    refused_(status, why);
}

void HttpServer::close_connection(std::unique_ptr<Connection> c, bool linger) {
  if (linger && !stopping_) {
    ::shutdown(c->fd, SHUT_WR);
    c->lingering = true;
    c->linger_until = clock_type::now() + std::chrono::seconds(1);
    adopt(std::move(c));
    return;
  }
  ::shutdown(c->fd, SHUT_RDWR);
  ::close(c->fd);
  --open_;
}

void HttpServer::collect() {
  std::vector<std::unique_ptr<Connection>> conns;
  std::vector<pollfd> fds;
  auto drop = [&](std::unique_ptr<Connection>& c) {
    ::shutdown(c->fd, SHUT_RDWR);
    ::close(c->fd);
    --open_;
    c.reset();
  };
  // A connection whose unconsumed bytes hold a header block goes to a worker (false: refused).
  auto dispatch = [&](std::unique_ptr<Connection>& c) {
    if (!c->headers_complete())
      return;
    const bool probe = c->is_probe();
    if ((probe ? probes_ : workers_)->offer(c, probe ? limits_.max_connections : limits_.waiting))
      return;
    refuse(*c, 503, "every HTTP worker is busy; retry later");
  };
  for (;;) {
    const bool stopping = stopping_;
    {
      std::vector<std::unique_ptr<Connection>> in;
      {
        std::lock_guard lock(m_);
        in.swap(incoming_);
      }
      for (auto& c : in) {
        if (c->lingering) {
          conns.push_back(std::move(c));
          continue;
        }
        const bool fresh = c->served == 0 && !c->started && c->buf.empty();
        if (stopping) {
          refuse(*c, 503, "the server is shutting down");
        } else if (fresh && open_.load() > limits_.max_connections) {
          refuse(*c, 503, "too many open connections; retry later");
        } else {
          if (!c->started && c->avail() > 0) { // pipelined: the next request is already here
            c->started = true;
            c->deadline = clock_type::now() + limits_.request_time;
          }
          dispatch(c);
        }
        if (c)
          conns.push_back(std::move(c));
      }
    }
    if (stopping) { // answer what was started, close the idle ones, then leave
      for (auto& c : conns)
        if (!c->lingering && c->started)
          refuse(*c, 503, "the server is shutting down");
      for (auto& c : conns)
        drop(c);
      return;
    }
    fds.assign(1, pollfd{wake_[0], POLLIN, 0});
    for (const auto& c : conns)
      fds.push_back(pollfd{c->fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 100);
    if (fds[0].revents & POLLIN) {
      char sink[256];
      while (::read(wake_[0], sink, sizeof sink) > 0) {
      }
    }
    const auto now = clock_type::now();
    for (std::size_t i = 0; i < conns.size(); ++i) {
      auto& c = conns[i];
      const short ev = fds[i + 1].revents;
      char chunk[16384];
      if (c->lingering) {
        ssize_t n = 1;
        if (ev)
          n = ::recv(c->fd, chunk, sizeof chunk, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN) || now >= c->linger_until)
          drop(c);
        continue;
      }
      if (ev) {
        const ssize_t n = ::recv(c->fd, chunk, sizeof chunk, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
          if (c->avail() > 0 && n == 0) // half-closed inside its headers: say why
            refuse(*c, 400, "the connection closed before the request's headers ended");
          else
            drop(c);
          continue;
        }
        if (n > 0) {
          if (!c->started) {
            c->started = true;
            c->deadline = now + limits_.request_time;
          }
          c->compact();
          c->buf.append(chunk, static_cast<std::size_t>(n));
          dispatch(c);
          if (!c)
            continue;
          if (c->lingering)
            continue;
          if (c->avail() > limits_.header_bytes) {
            refuse(*c, 431,
                   "the request line and headers exceed " + std::to_string(limits_.header_bytes) +
                       " bytes");
            continue;
          }
        }
      }
      if (c->started && now >= c->deadline)
        refuse(*c, 408,
               "the request's headers did not arrive within " +
                   std::to_string(limits_.request_time.count() / 1000) + " s");
      else if (!c->started && now - c->since >= limits_.keep_alive)
        drop(c);
    }
    std::erase_if(conns, [](const auto& c) { return !c; });
  }
}

void HttpServer::serve(std::unique_ptr<Connection> c) {
  {
    std::lock_guard lock(m_);
    active_.insert(c->fd);
  }
  c->close_after = false;
  c->timed_out = false;
  c->too_large = false;
  c->received = 0;
  const bool last = stopping_ || ++c->served >= limits_.requests_per_connection;
  bool closed = false;
  bool ok = false;
  {
    ConnStream strm(*c, stopping_, limits_.write_time, limits_.read_bytes);
    current = c.get();
    try {
      ok = process_request(strm, last, closed, nullptr);
    } catch (...) { // httplib's own failures (out of memory): this connection ends
      ok = false;
    }
    current = nullptr;
  }
  {
    std::lock_guard lock(m_);
    active_.erase(c->fd);
  }
  if (ok && !closed && !last && !c->close_after && !c->eof && !stopping_) {
    c->started = false;
    c->since = clock_type::now();
    adopt(std::move(c));
    return;
  }
  const bool linger = c->close_after && !c->eof;
  close_connection(std::move(c), linger);
}

void HttpServer::begin_stop() {
  stopping_ = true;
  const char x = 0;
  [[maybe_unused]] const auto w = ::write(wake_[1], &x, 1);
}

void HttpServer::finish(std::chrono::milliseconds grace) {
  if (finished_)
    return;
  finished_ = true;
  begin_stop();
  if (reader_.joinable())
    reader_.join();
  // Workers end their answers (the scheduler has answered its jobs); past the grace period,
  // every socket still served is shut down so that no read or write can block the exit.
  std::thread force([this, grace] {
    const auto until = clock_type::now() + grace;
    while (clock_type::now() < until) {
      {
        std::lock_guard lock(m_);
        if (joined_)
          return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::lock_guard lock(m_);
    for (int fd : active_)
      ::shutdown(fd, SHUT_RDWR);
  });
  if (workers_)
    workers_->join();
  if (probes_)
    probes_->join();
  {
    std::lock_guard lock(m_);
    joined_ = true;
  }
  force.join();
  std::vector<std::unique_ptr<Connection>> left;
  {
    std::lock_guard lock(m_);
    left.swap(incoming_);
  }
  for (auto& c : left) {
    ::shutdown(c->fd, SHUT_RDWR);
    ::close(c->fd);
    --open_;
  }
}

std::string log_escape(std::string_view text, std::size_t max_bytes) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (i == max_bytes) {
      out += "...";
      break;
    }
    const auto b = static_cast<unsigned char>(text[i]);
    if (b < 0x20 || b >= 0x7f || b == '\\') {
      out += "\\x";
      out += hex[b >> 4];
      out += hex[b & 15];
    } else {
      out += static_cast<char>(b);
    }
  }
  return out;
}

} // namespace tpullm::cli::serve
