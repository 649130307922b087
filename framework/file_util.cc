#include "framework/file_util.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <fcntl.h>
#include <unistd.h>

#include "framework/error.h"

namespace kiln {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) ThrowNotFound("cannot open '", path, "': ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) ThrowDataLoss("cannot read '", path, "'");
  return ss.str();
}

void WriteFileAtomic(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) ThrowInvalidArgument("cannot write '", path, "': ", std::strerror(errno));
  size_t done = 0;
  bool ok = true;
  while (ok && done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  const int err = errno;
  // The data reaches the disk before the rename makes it visible: a crash
  // leaves the old file or the new one, never a short new one.
  ok = ok && ::fsync(fd) == 0;
  ok = ::close(fd) == 0 && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    ThrowInvalidArgument("cannot write '", path, "': ", std::strerror(err ? err : errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    ThrowInvalidArgument("cannot write '", path, "': ", std::strerror(errno));
  }
}

void CheckWritableDir(const std::string& dir, const std::string& what) {
  const std::string probe = (dir.empty() ? "." : dir) + "/.kiln-write-check." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) ThrowInvalidArgument(what, ": cannot write in '", dir.empty() ? "." : dir, "': ", std::strerror(errno));
  ::close(fd);
  std::remove(probe.c_str());
}

void CheckWritableFile(const std::string& path, const std::string& what) {
  const size_t slash = path.rfind('/');
  CheckWritableDir(slash == std::string::npos ? "" : path.substr(0, slash == 0 ? 1 : slash), what);
}

}  // namespace kiln
