// Blocking sockets with length-prefixed messages; one connection per non-zero rank to rank 0.
// Small and synchronous on purpose: it runs once at start-up and at a few barriers.
#include "calibrate/rendezvous.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace meshplan::calibrate {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("calibrate rendezvous: " + what + (errno != 0 ? std::string(": ") + std::strerror(errno) : ""));
}

void send_all(int fd, const void* data, std::size_t n) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) fail("send failed");
    p += k;
    n -= static_cast<std::size_t>(k);
  }
}

void recv_all(int fd, void* data, std::size_t n) {
  auto* p = static_cast<std::uint8_t*>(data);
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0) {
      errno = 0;
      fail("peer closed the connection");
    }
    if (k < 0) fail("recv failed");
    p += k;
    n -= static_cast<std::size_t>(k);
  }
}

void send_message(int fd, const std::vector<std::uint8_t>& m) {
  const std::uint64_t n = m.size();
  send_all(fd, &n, sizeof n);
  if (n > 0) send_all(fd, m.data(), m.size());
}

std::vector<std::uint8_t> recv_message(int fd) {
  std::uint64_t n = 0;
  recv_all(fd, &n, sizeof n);
  if (n > (1u << 26)) {
    errno = 0;
    fail("message too large (corrupt stream?)");
  }
  std::vector<std::uint8_t> m(n);
  if (n > 0) recv_all(fd, m.data(), m.size());
  return m;
}

int parse_int(const std::string& s, const std::string& name) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || end == s.c_str() || v < 0 || v > 1'000'000)
    throw std::runtime_error("calibrate rendezvous: " + name + "=" + s + " is not a non-negative integer");
  return static_cast<int>(v);
}

std::string get(const std::map<std::string, std::string>& env, const std::string& k) {
  auto it = env.find(k);
  return it == env.end() ? std::string() : it->second;
}

void set_timeouts(int fd, std::chrono::seconds timeout) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count());
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  std::string first;
  int depth = 0;
  for (char c : nodelist) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) break;
    first += c;
  }
  const std::size_t open = first.find('[');
  if (open == std::string::npos) return first;
  std::string range = first.substr(open + 1);
  const std::size_t cut = range.find_first_of(",-]");
  return first.substr(0, open) + range.substr(0, cut);
}

std::map<std::string, std::string> process_environment(const std::vector<std::string>& names) {
  std::map<std::string, std::string> env;
  for (const std::string& n : names)
    if (const char* v = std::getenv(n.c_str())) env[n] = v;
  return env;
}

std::optional<RendezvousConfig> rendezvous_from_env(const std::map<std::string, std::string>& env) {
  RendezvousConfig c;
  if (!get(env, "WORLD_SIZE").empty() && !get(env, "RANK").empty()) {
    c.launcher = "torchrun";
    c.world_size = parse_int(get(env, "WORLD_SIZE"), "WORLD_SIZE");
    c.rank = parse_int(get(env, "RANK"), "RANK");
    c.local_rank = get(env, "LOCAL_RANK").empty() ? 0 : parse_int(get(env, "LOCAL_RANK"), "LOCAL_RANK");
    c.master_addr = get(env, "MASTER_ADDR");
    if (c.master_addr.empty()) throw std::runtime_error("calibrate rendezvous: RANK/WORLD_SIZE set but MASTER_ADDR is not");
  } else if (!get(env, "SLURM_NTASKS").empty() && !get(env, "SLURM_PROCID").empty()) {
    c.launcher = "srun";
    c.world_size = parse_int(get(env, "SLURM_NTASKS"), "SLURM_NTASKS");
    c.rank = parse_int(get(env, "SLURM_PROCID"), "SLURM_PROCID");
    c.local_rank = get(env, "SLURM_LOCALID").empty() ? 0 : parse_int(get(env, "SLURM_LOCALID"), "SLURM_LOCALID");
    c.master_addr = get(env, "MASTER_ADDR");
    if (c.master_addr.empty()) c.master_addr = first_slurm_host(get(env, "SLURM_JOB_NODELIST"));
    if (c.master_addr.empty())
      throw std::runtime_error("calibrate rendezvous: srun without MASTER_ADDR or SLURM_JOB_NODELIST");
  } else {
    return std::nullopt;
  }
  if (!get(env, "MASTER_PORT").empty()) c.master_port = parse_int(get(env, "MASTER_PORT"), "MASTER_PORT");
  if (c.world_size <= 1) return std::nullopt;
  if (c.rank >= c.world_size) throw std::runtime_error("calibrate rendezvous: rank >= world size");
  return c;
}

Rendezvous::Rendezvous(const RendezvousConfig& cfg) : cfg_(cfg) {
  const auto deadline = std::chrono::steady_clock::now() + cfg_.timeout;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(cfg_.master_port);
  if (cfg_.rank == 0) {
    hints.ai_flags = AI_PASSIVE;
    if (::getaddrinfo(nullptr, port.c_str(), &hints, &res) != 0 || res == nullptr) fail("getaddrinfo for listen");
    listen_fd_ = ::socket(res->ai_family, res->ai_socktype, res->ai_protocol);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (listen_fd_ < 0 || ::bind(listen_fd_, res->ai_addr, res->ai_addrlen) != 0 ||
        ::listen(listen_fd_, cfg_.world_size) != 0) {
      ::freeaddrinfo(res);
      fail("cannot listen on port " + port);
    }
    ::freeaddrinfo(res);
    set_timeouts(listen_fd_, cfg_.timeout);
    peers_.assign(static_cast<std::size_t>(cfg_.world_size), -1);
    for (int accepted = 1; accepted < cfg_.world_size; ++accepted) {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) fail("accept (waited for " + std::to_string(cfg_.world_size - accepted) + " more ranks)");
      set_timeouts(fd, cfg_.timeout);
      std::int32_t r = -1;
      recv_all(fd, &r, sizeof r);
      if (r <= 0 || r >= cfg_.world_size || peers_[static_cast<std::size_t>(r)] >= 0) {
        ::close(fd);
        errno = 0;
        fail("bad or duplicate rank " + std::to_string(r));
      }
      peers_[static_cast<std::size_t>(r)] = fd;
    }
  } else {
    if (::getaddrinfo(cfg_.master_addr.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr)
      fail("cannot resolve MASTER_ADDR " + cfg_.master_addr);
    int fd = -1;
    // Rank 0 may still be starting: retry until the deadline.
    while (true) {
      fd = ::socket(res->ai_family, res->ai_socktype, res->ai_protocol);
      if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) break;
      if (fd >= 0) ::close(fd);
      if (std::chrono::steady_clock::now() > deadline) {
        ::freeaddrinfo(res);
        fail("cannot connect to " + cfg_.master_addr + ":" + port);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ::freeaddrinfo(res);
    set_timeouts(fd, cfg_.timeout);
    const std::int32_t r = cfg_.rank;
    send_all(fd, &r, sizeof r);
    peers_ = {fd};
  }
}

Rendezvous::~Rendezvous() {
  for (int fd : peers_)
    if (fd >= 0) ::close(fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

std::vector<std::uint8_t> Rendezvous::broadcast(const std::vector<std::uint8_t>& payload) {
  if (cfg_.rank == 0) {
    for (std::size_t i = 1; i < peers_.size(); ++i) send_message(peers_[i], payload);
    return payload;
  }
  return recv_message(peers_[0]);
}

std::vector<std::string> Rendezvous::all_gather(const std::string& mine) {
  std::vector<std::string> all(static_cast<std::size_t>(cfg_.world_size));
  if (cfg_.rank == 0) {
    all[0] = mine;
    for (std::size_t i = 1; i < peers_.size(); ++i) {
      const auto m = recv_message(peers_[i]);
      all[i].assign(m.begin(), m.end());
    }
    std::vector<std::uint8_t> packed;
    for (const std::string& s : all) {
      const std::uint64_t n = s.size();
      const auto* p = reinterpret_cast<const std::uint8_t*>(&n);
      packed.insert(packed.end(), p, p + sizeof n);
      packed.insert(packed.end(), s.begin(), s.end());
    }
    broadcast(packed);
    return all;
  }
  send_message(peers_[0], std::vector<std::uint8_t>(mine.begin(), mine.end()));
  const auto packed = recv_message(peers_[0]);
  std::size_t at = 0;
  for (std::string& s : all) {
    std::uint64_t n = 0;
    if (at + sizeof n > packed.size()) fail("truncated all_gather");
    std::memcpy(&n, packed.data() + at, sizeof n);
    at += sizeof n;
    if (at + n > packed.size()) fail("truncated all_gather");
    s.assign(packed.begin() + static_cast<std::ptrdiff_t>(at), packed.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
  return all;
}

void Rendezvous::barrier() { all_gather(std::string()); }

}  // namespace meshplan::calibrate
