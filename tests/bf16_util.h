// bf16 matmuls need oneDNN's AVX512_CORE kernels at least; on a CPU without
// them kiln refuses --amp bf16 at start-up and the tests that run bf16
// matmuls skip, saying why.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "framework/onednn/handlers.h"

#define KILN_SKIP_WITHOUT_BF16()                                                        \
  do {                                                                                  \
    std::string kiln_bf16_why;                                                          \
    if (!::kiln::onednn::Bf16MatmulAvailable(&kiln_bf16_why)) {                         \
      GTEST_SKIP() << "this CPU has no fast bf16 matmul in oneDNN: " << kiln_bf16_why; \
    }                                                                                   \
  } while (0)
