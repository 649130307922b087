// Errors. Bad user input throws one typed kiln::Error at the API edge, with a
// message naming the op/var/file and what was expected. Broken internal
// invariants use KILN_CHECK, which aborts with file and line.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln {

enum class ErrorCode { kInvalidArgument, kNotFound, kUnimplemented, kDataLoss, kInternal };

const char* ErrorCodeName(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// Concatenates streamable pieces into one string.
template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

template <typename... Args>
[[noreturn]] void ThrowInvalidArgument(const Args&... args) {
  throw Error(ErrorCode::kInvalidArgument, StrCat(args...));
}
template <typename... Args>
[[noreturn]] void ThrowNotFound(const Args&... args) {
  throw Error(ErrorCode::kNotFound, StrCat(args...));
}
template <typename... Args>
[[noreturn]] void ThrowUnimplemented(const Args&... args) {
  throw Error(ErrorCode::kUnimplemented, StrCat(args...));
}
template <typename... Args>
[[noreturn]] void ThrowDataLoss(const Args&... args) {
  throw Error(ErrorCode::kDataLoss, StrCat(args...));
}
// A broken invariant that a caller can recover from (the JIT runs the
// cluster's framework ops instead), where KILN_CHECK would abort.
template <typename... Args>
[[noreturn]] void ThrowInternal(const Args&... args) {
  throw Error(ErrorCode::kInternal, StrCat(args...));
}

[[noreturn]] void CheckFailed(const char* file, int line, const char* cond, const std::string& msg);

}  // namespace kiln

// Internal invariant: aborts with file, line and the condition.
#define KILN_CHECK(cond, ...)                                                  \
  do {                                                                         \
    if (!(cond)) ::kiln::CheckFailed(__FILE__, __LINE__, #cond, ::kiln::StrCat("", ##__VA_ARGS__)); \
  } while (0)
