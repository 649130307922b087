// Helpers shared by the fuzz harnesses (tests/fuzz/README.md): the libFuzzer
// entry point's declaration, a reader that turns the fuzzer's bytes into
// choices, and scratch files for readers that take a path.
//
// A harness accepts kiln::Error (bad input reported as documented) and
// nothing else: any other exception escapes LLVMFuzzerTestOneInput, which
// libFuzzer and the replay driver report as a crash.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "framework/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace kiln::fuzz {

// Choices drawn from the input bytes, front to back; once the bytes run out
// every choice is its lowest value, so any input decodes to something.
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  bool Bool() { return Byte() & 1; }
  // Uniform enough in [lo, hi] for hi - lo < 2^16 (two bytes).
  int64_t Int(int64_t lo, int64_t hi) {
    if (hi <= lo) return lo;
    const uint64_t range = static_cast<uint64_t>(hi - lo) + 1;
    uint64_t v = Byte();
    if (range > 256) v = (v << 8) | Byte();
    return lo + static_cast<int64_t>(v % range);
  }
  // One of `n` options (n >= 1).
  size_t Pick(size_t n) { return static_cast<size_t>(Int(0, static_cast<int64_t>(n) - 1)); }
  // A float in [lo, hi] in 256 steps.
  float Float(float lo, float hi) { return lo + (hi - lo) * static_cast<float>(Byte()) / 255.0f; }
  size_t remaining() const { return size_ - pos_; }
  // The rest of the bytes.
  std::string Rest() {
    std::string s(reinterpret_cast<const char*>(data_ + pos_), size_ - pos_);
    pos_ = size_;
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// A directory of its own for this process under $TMPDIR (or /tmp), made on
// first use. Harnesses write the bytes they test there, so that readers that
// take a path see exactly the fuzzer's input.
// Removed at exit (the name is never destroyed: exit handlers run after
// static destructors registered later).
inline const std::string& ScratchDir() {
  static const std::string* dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr && *base ? base : "/tmp") + "/kiln-fuzz-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    auto* name = new std::string(tmpl);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(ScratchDir(), ec);
    });
    return name;
  }();
  return *dir;
}

// Writes `bytes` to `path` (no fsync: WriteFileAtomic's would cap a harness
// at a few dozen executions a second).
inline void WritePlainFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) std::abort();
}

// Writes `bytes` to ScratchDir()/name (name holds no '/') and returns the path.
inline std::string WriteScratch(const std::string& name, const std::string& bytes) {
  const std::string path = ScratchDir() + "/" + name;
  WritePlainFile(path, bytes);
  return path;
}

// Runs `fn`; a kiln::Error is the documented answer to bad input.
template <typename Fn>
void ExpectOnlyKilnErrors(Fn&& fn) {
  try {
    fn();
  } catch (const Error&) {
  }
}

// An invariant of a harness that failed: aborts so the fuzzer saves the input.
[[noreturn]] inline void Finding(const std::string& what) {
  std::fputs(("kiln fuzz finding: " + what + "\n").c_str(), stderr);
  std::abort();
}

}  // namespace kiln::fuzz
