#include "tools/dot_render.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <vector>

extern char** environ;

namespace kiln::tools {
namespace {

using Clock = std::chrono::steady_clock;

std::string Seconds(double s) {
  std::ostringstream out;
  out << s << " s";
  return out.str();
}

// The child's end of each stream: DOT in on stdin (a socket, so that a write
// after dot has died fails with EPIPE instead of raising SIGPIPE), SVG out on
// stdout, stderr dropped. Its own process group, so a kill reaches whatever
// it started.
int Spawn(const std::string& program, int stdin_fd, int stdout_fd, pid_t* pid) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, stdin_fd, 0);
  posix_spawn_file_actions_adddup2(&actions, stdout_fd, 1);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> argv = {const_cast<char*>(program.c_str()), const_cast<char*>("-Tsvg"), nullptr};
  const int err = posix_spawnp(pid, program.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  return err;
}

int MillisLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(left);
}

// Feeds `dot` to `in_fd` and collects `out_fd` until the child closes its
// stdout or the deadline passes. True when the output ended in time.
bool Exchange(const std::string& dot, int in_fd, int out_fd, Clock::time_point deadline, std::string* out) {
  ::fcntl(in_fd, F_SETFL, O_NONBLOCK);
  ::fcntl(out_fd, F_SETFL, O_NONBLOCK);
  size_t written = 0;
  char buf[1 << 16];
  bool ended = false;
  while (!ended) {
    const int left = MillisLeft(deadline);
    if (left == 0) break;
    pollfd fds[2] = {{out_fd, POLLIN, 0}, {in_fd, POLLOUT, 0}};
    const int n = ::poll(fds, in_fd >= 0 ? 2 : 1, left);
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    if (in_fd >= 0 && (fds[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t w = ::send(in_fd, dot.data() + written, dot.size() - written, MSG_NOSIGNAL);
      if (w > 0) written += static_cast<size_t>(w);
      // All sent (the child sees end of input), or the child stopped reading.
      if (written == dot.size() || (w < 0 && errno != EAGAIN && errno != EINTR)) {
        ::close(in_fd);
        in_fd = -1;
      }
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t r = ::read(out_fd, buf, sizeof buf);
      if (r > 0) out->append(buf, static_cast<size_t>(r));
      ended = r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR);
    }
  }
  if (in_fd >= 0) ::close(in_fd);
  return ended;
}

// The child's exit status, or -1 when it is still running at the deadline.
int WaitUntil(pid_t pid, Clock::time_point deadline) {
  while (true) {
    int status = 0;
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (done < 0 && errno != EINTR) return 255;
    if (MillisLeft(deadline) == 0) return -1;
    ::usleep(2000);
  }
}

}  // namespace

DotRender RenderDotSvg(const std::string& dot, const DotBudget& budget) {
  DotRender r;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::microseconds(static_cast<int64_t>(budget.seconds * 1e6));
  int in[2], out[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) != 0) {
    r.note = std::string("could not run Graphviz: socketpair: ") + std::strerror(errno);
    return r;
  }
  if (::pipe2(out, O_CLOEXEC) != 0) {
    r.note = std::string("could not run Graphviz: pipe: ") + std::strerror(errno);
    ::close(in[0]);
    ::close(in[1]);
    return r;
  }
  pid_t pid = 0;
  const int err = Spawn(budget.program, in[1], out[1], &pid);
  ::close(in[1]);
  ::close(out[1]);
  if (err != 0) {
    ::close(in[0]);
    ::close(out[0]);
    r.not_installed = err == ENOENT;
    r.note = err == ENOENT ? "Graphviz is not installed (no `" + budget.program + "` on PATH)"
                           : "could not run `" + budget.program + "`: " + std::strerror(err);
    return r;
  }
  std::string svg;
  const bool ended = Exchange(dot, in[0], out[0], deadline, &svg);
  ::close(out[0]);
  const int code = ended ? WaitUntil(pid, deadline) : -1;
  if (code < 0) {
    // Out of time: stop the child (and anything it started) and reap it.
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    r.timed_out = true;
    r.note = "Graphviz (`" + budget.program + "`) did not finish drawing within " + Seconds(budget.seconds) +
             " and was stopped";
    return r;
  }
  const size_t start = svg.find("<svg");
  if (code != 0 || start == std::string::npos) {
    r.note = "Graphviz (`" + budget.program + "`) failed (exit status " + std::to_string(code) + ")";
    return r;
  }
  r.svg = svg.substr(start);
  return r;
}

std::vector<DotRender> RenderAllDotSvg(const std::vector<std::string>& dots, const DotBudget& budget) {
  const Clock::time_point deadline =
      Clock::now() + std::chrono::microseconds(static_cast<int64_t>(budget.seconds * 1e6));
  std::vector<DotRender> out;
  for (const std::string& dot : dots) {
    if (!out.empty() && out.back().not_installed) {
      out.push_back(out.back());
      continue;
    }
    const int left = MillisLeft(deadline);
    // The first drawing gets the whole budget even when this thread was
    // descheduled since the deadline was set.
    if (left == 0 && !out.empty()) {
      DotRender r;
      r.timed_out = true;
      r.note = "the drawings before it used up the " + Seconds(budget.seconds) +
               " Graphviz may take, so it was not started";
      out.push_back(r);
      continue;
    }
    DotBudget b = budget;
    if (!out.empty()) b.seconds = left / 1000.0;
    out.push_back(RenderDotSvg(dot, b));
    // Name the whole budget, not the part this drawing got.
    if (out.back().timed_out) {
      out.back().note = "Graphviz (`" + budget.program + "`) did not finish within the " + Seconds(budget.seconds) +
                        " the dump gives its drawings and was stopped";
    }
  }
  return out;
}

}  // namespace kiln::tools
