// kiln.set_flags / kiln.get_flags over the gflags definitions of
// framework/flags.cc: every flag the command line has, by the same name
// (with or without Paddle's "FLAGS_" prefix).
#pragma once

#include <cstdint>

namespace kiln::python {

// Bumped by every set_flags: prepared programs depend on the flags (passes,
// JIT options), so executors key their caches on it.
int64_t FlagsGeneration();

// Applies FLAGS_<name> environment variables, then configures the JIT and
// the allocator from the flags (as the command line does at start-up).
void InitFlags();

}  // namespace kiln::python
