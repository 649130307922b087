#include "tools/jit_setup.h"

#include "compiler/jit_compiler.h"
#include "framework/flags.h"
#include "framework/op_registry.h"
#include "launch_op/jit_launch_op.h"
#include "launch_op/jit_pipeline.h"
#include "passes/pass_flags.h"

namespace kiln::tools {

void ConfigureJitFromFlags() {
  jit::RegisterJitOps(OpRegistry::GlobalForRegistration());
  jit::JitCompilerOptions o;
  if (FLAGS_jit_cache_capacity < 1) ThrowInvalidArgument("--jit_cache_capacity must be at least 1");
  if (FLAGS_jit_recompile_limit < 1) ThrowInvalidArgument("--jit_recompile_limit must be at least 1");
  o.cache_capacity = static_cast<size_t>(FLAGS_jit_cache_capacity);
  o.recompile_limit = FLAGS_jit_recompile_limit;
  if (FLAGS_jit_isa.empty()) {
    o.compile.isa = jit::HostIsa();
  } else if (FLAGS_jit_isa == "avx512" || FLAGS_jit_isa == "avx2") {
    o.compile.isa = FLAGS_jit_isa == "avx512" ? jit::Isa::kAvx512 : jit::Isa::kAvx2;
    if (o.compile.isa == jit::Isa::kAvx512 && jit::HostIsa() != jit::Isa::kAvx512) {
      ThrowInvalidArgument("--jit_isa avx512: this CPU has no AVX-512");
    }
  } else {
    ThrowInvalidArgument("unknown --jit_isa '", FLAGS_jit_isa, "': expected avx512 or avx2");
  }
  o.compile.use_onednn = FLAGS_use_onednn;
  o.compile.fuse_elementwise = FLAGS_jit_fuse_elementwise;
  o.compile.reuse_buffers = FLAGS_jit_reuse_buffers;
  jit::JitCompiler::Instance().Configure(o);
  jit::SetLaunchMode(jit::ParseLaunchMode(FLAGS_jit_launch_mode));
}

proto::ProgramDesc MaybeApplyJit(const proto::ProgramDesc& program, const std::set<std::string>& keep) {
  if (!FLAGS_use_jit) return program;
  BuildJitPassOptions options = BuildJitPassOptionsFromFlags();
  options.keep_vars.insert(keep.begin(), keep.end());
  return jit::ApplyBuildJitPass(program, options);
}

}  // namespace kiln::tools
