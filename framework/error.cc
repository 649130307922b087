#include "framework/error.h"

#include <cstdio>
#include <cstdlib>

namespace kiln {

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kNotFound: return "not found";
    case ErrorCode::kUnimplemented: return "unimplemented";
    case ErrorCode::kDataLoss: return "data loss";
    case ErrorCode::kInternal: return "internal";
  }
  return "unknown";
}

void CheckFailed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "%s:%d: KILN_CHECK failed: %s %s\n", file, line, cond, msg.c_str());
  std::abort();
}

}  // namespace kiln
