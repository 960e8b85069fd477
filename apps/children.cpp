#include "apps/children.hpp"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include "apps/node.hpp"

namespace swarm {

std::string self_exe() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

pid_t spawn_child(const std::vector<std::string>& args, const std::string& output) {
  std::vector<char*> argv;
  for (const auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent)  // the launcher died between fork and prctl
      std::_Exit(1);
    if (!output.empty())
      if (const int fd = ::open(output.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644); fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
        ::close(fd);
      }
    ::execv(argv[0], argv.data());
    std::perror("swarm: exec");
    std::_Exit(127);
  }
  return pid;
}

int wait_for_port(const std::string& file, pid_t coordinator) {
  for (int i = 0; i < 300 && !stop_requested; ++i) {
    std::ifstream in(file);
    int port = 0;
    if (in >> port && port > 0)
      return port;
    int status = 0;
    if (::waitpid(coordinator, &status, WNOHANG) == coordinator)
      return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return 0;
}

namespace {

/// SIGTERM to the children of roles `which` (etcd members: `etcd`), SIGKILL to those alive 10 s later.
void stop_children(children_map& children, std::set<role> which, const std::shared_ptr<spdlog::logger>& log,
                   bool etcd = false) {
  std::set<pid_t> targets;
  for (const auto& [pid, c] : children)
    if (c.etcd == etcd && (etcd || which.count(c.which)))
      targets.insert(pid);
  for (pid_t pid : targets)
    ::kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!targets.empty()) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      targets.erase(pid);
      children.erase(pid);
      continue;
    }
    if (pid < 0)
      break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (pid_t p : targets) {
        log->warn("{} (pid {}) ignored SIGTERM; killing it", children[p].name, p);
        ::kill(p, SIGKILL);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

void stop_all(children_map& children, const std::shared_ptr<spdlog::logger>& log) {
  stop_children(children, {role::trainer}, log);  // their microbatches in flight finish on live servers
  std::set<role> rest;
  for (const auto& [pid, c] : children)
    rest.insert(c.which);
  rest.erase(role::coordinator);
  stop_children(children, rest, log);
  stop_children(children, {role::coordinator}, log);
  stop_children(children, {}, log, true);
}

int free_tcp_port(const std::string& host) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = 0;
  if (fd < 0 || ::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    if (fd >= 0)
      ::close(fd);
    return 0;
  }
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace swarm
