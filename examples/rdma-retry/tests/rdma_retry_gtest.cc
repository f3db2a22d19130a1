// GoogleTest suite of rdma_retry on ibemu: IBEMU_GTEST_MAIN() gives this
// binary a private emulated fabric (ibemu0 and ibemu1, one port each), and
// each test runs the real program, server on ibemu0 and client on ibemu1,
// while it steers the fabric: a lossy link, a pulled cable.
//
// The tests launch the program rather than call its functions: its exit
// codes and messages are what its users see, so they are what is tested.
// The children inherit this process's emulation environment (LD_PRELOAD of
// ibemu's shim, ...), which run_under_fabric() set before the tests began.
#include <arpa/inet.h>
#include <fcntl.h>
#include <ibemu/gtest_fabric.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using ibemu::testing::fabric;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kExitRetryExceeded = 3;  // rdma_retry's code for IBV_WC_RETRY_EXC_ERR
constexpr int kExitSetup = 1;

// A TCP port nobody listens on now, for the connection exchange.
int free_tcp_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// One run of rdma_retry with its stdout and stderr in one pipe. Killed if
// a test ends while it still runs.
class Program {
 public:
  Program(std::vector<std::string> args, std::vector<std::string> extra_env = {}) {
    args.insert(args.begin(), RDMA_RETRY_BIN);
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (char** e = environ; *e; ++e) envp.push_back(*e);
    for (auto& e : extra_env) envp.push_back(e.data());
    envp.push_back(nullptr);

    // Close-on-exec, so that the other program started later does not hold
    // this one's pipe open; dup2 gives the child its stdout and stderr.
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
    if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), envp.data()) != 0) {
      pid_ = -1;
      output_ = std::string("could not start ") + argv[0];
    }
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    out_fd_ = fds[0];
  }

  ~Program() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(out_fd_);
  }

  // Reads output until it contains `text` or the program closes it; false
  // if `text` did not show up within `limit`.
  bool wait_for_output(const std::string& text, std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    while (output_.find(text) == std::string::npos) {
      if (Clock::now() > deadline || !read_some(deadline)) return false;
    }
    return true;
  }

  // The exit status once the program ended; -1 if it was killed by a
  // signal or ran past `limit` (it is killed then).
  int wait(std::chrono::milliseconds limit = 60s) {
    if (pid_ < 0) return -1;  // never started, or already waited for
    const auto deadline = Clock::now() + limit;
    while (read_some(deadline)) {
    }
    // Its output can end a moment before the process does.
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        pid_ = -1;
        return -1;
      }
      std::this_thread::sleep_for(1ms);
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  const std::string& output() const { return output_; }

 private:
  // Appends what the pipe holds; false at end of output or past deadline.
  bool read_some(Clock::time_point deadline) {
    pollfd p{out_fd_, POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (poll(&p, 1, std::max<int>(0, left.count())) <= 0) return false;
    char buf[4096];
    const ssize_t n = read(out_fd_, buf, sizeof(buf));
    if (n <= 0) return false;
    output_.append(buf, n);
    return true;
  }

  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string output_;
};

// A server on ibemu0 and its client on ibemu1, with the same extra options.
struct Pair {
  explicit Pair(std::vector<std::string> options, std::vector<std::string> env = {})
      : port(std::to_string(free_tcp_port())),
        server(with(options, {"-d", "ibemu0", "-p", port}), env),
        // The client retries its TCP connect until the server listens.
        client(with(options, {"-d", "ibemu1", "-p", port, "localhost"}), env) {}

  static std::vector<std::string> with(std::vector<std::string> a,
                                       const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  std::string port;
  Program server, client;
};

TEST(RdmaRetry, WritesAndVerifiesEveryMessage) {
  Pair run({"-n", "50", "-s", "8192"});
  EXPECT_EQ(run.client.wait(), 0) << run.client.output();
  EXPECT_EQ(run.server.wait(), 0) << run.server.output();
  EXPECT_NE(run.client.output().find("50 messages of 8192 bytes written and verified"),
            std::string::npos)
      << run.client.output();
}

TEST(RdmaRetry, SurvivesALossyLink) {
  auto link_fault_drops = [] {
    // Counted at the sending port: the client's requests at ibemu1, the
    // server's ACKs and READ responses at ibemu0.
    return fabric().port("ibemu0", 1).link_fault_drops +
           fabric().port("ibemu1", 1).link_fault_drops;
  };
  const uint64_t dropped_before = link_fault_drops();
  // 5% of the packets of the server's link are lost, requests and ACKs
  // alike. A short ACK timeout (-t 10: about 4 ms) keeps the retransmissions
  // quick; the program must not notice them.
  ibemu::testing::ScopedFaults lossy("ibemu0", 1, {.drop_pct = 5, .seed = 7});
  Pair run({"-n", "200", "-s", "8192", "-t", "10"});
  EXPECT_EQ(run.client.wait(), 0) << run.client.output();
  EXPECT_EQ(run.server.wait(), 0) << run.server.output();
  // A packet was lost and yet every message arrived: RC resent it.
  EXPECT_GT(link_fault_drops(), dropped_before) << "nothing was lost: the test proved nothing";
}

TEST(RdmaRetry, ReportsRetryExceededWhenThePeersLinkGoesDown) {
  // IBA's exact retry timing: the error after retry_cnt + 1 ACK timeouts
  // (8 x 16 ms here) instead of after ibemu's 10 s stall tolerance.
  Pair run({"-n", "100000000", "-t", "12"}, {"IBEMU_STALL_TOLERANCE_MS=0"});
  ASSERT_TRUE(run.client.wait_for_output("connected", 30s)) << run.client.output();
  // Well into the transfer: the server's port has seen some of it.
  const uint64_t seen = fabric().port("ibemu0", 1).packets_in;
  const auto deadline = Clock::now() + 10s;
  while (fabric().port("ibemu0", 1).packets_in < seen + 200 && Clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  int client_status;
  {
    ibemu::testing::ScopedLinkDown cable("ibemu0", 1);  // the server's cable
    client_status = run.client.wait(30s);
  }
  EXPECT_EQ(client_status, kExitRetryExceeded) << run.client.output();
  EXPECT_NE(run.client.output().find("transport retry counter exceeded"), std::string::npos)
      << run.client.output();
  // The client closed its TCP connection on the way out: the server ends too.
  EXPECT_EQ(run.server.wait(10s), kExitSetup) << run.server.output();
  EXPECT_EQ(fabric().port("ibemu0", 1).state, "ACTIVE");  // plugged back for the next test
}

}  // namespace

// Two devices of one port each are all the tests need; fewer ports start faster.
IBEMU_GTEST_MAIN({.devices = 2, .ports = 1})
