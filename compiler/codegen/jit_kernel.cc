#include "compiler/codegen/jit_kernel.h"

#include "framework/error.h"

namespace kiln::jit {

// AutoGrow: code size is not known up front (programs are unrolled and math
// functions expand inline); labels are resolved by ready().
JitKernel::JitKernel(std::string name)
    : Xbyak::CodeGenerator(16 * 1024, Xbyak::AutoGrow), name_(std::move(name)) {
  // Loop bodies of long fused programs exceed the reach of 8-bit jumps.
  setDefaultJmpNEAR(true);
}

void JitKernel::Create() {
  try {
    Generate();
    ready();
  } catch (const Xbyak::Error& e) {
    ThrowInternal("jit kernel '", name_, "': code generation failed: ", e.what());
  }
}

void JitKernel::Preamble(size_t frame_bytes) {
  frame_bytes_ = frame_bytes;
  push(rbx);
  push(rbp);
  push(r12);
  push(r13);
  push(r14);
  push(r15);
  if (frame_bytes_ > 0) sub(rsp, static_cast<uint32_t>(frame_bytes_));
}

void JitKernel::Postamble() {
  if (frame_bytes_ > 0) add(rsp, static_cast<uint32_t>(frame_bytes_));
  pop(r15);
  pop(r14);
  pop(r13);
  pop(r12);
  pop(rbp);
  pop(rbx);
  vzeroupper();
  ret();
}

}  // namespace kiln::jit
