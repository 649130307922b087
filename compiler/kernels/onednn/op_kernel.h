// A runtime::Kernel that runs one framework op (its oneDNN kernel where it has
// one, else its reference kernel) on buffers bound by the runner: the op reads
// and writes them in place through non-owning tensor views.
//
// Dynamic shapes: the op takes every size from the bound views and its
// attributes, so the kernel serves arguments of any dims as it is
// (ReadsDimsAtRunTime). An attribute may hold a size of its own (reshape2's
// `shape`, fill_constant's): before the op runs, its shape inference runs on
// the bound inputs' dims and Run throws kiln::Error (kInvalidArgument) when
// an output it infers differs from the bound one, instead of writing a
// buffer of other dims.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "runtime/program.h"

namespace kiln::jit {

class FrameworkOpKernel final : public runtime::Kernel {
 public:
  // Argument order: every input arg of `op` (slot order, @EMPTY@ skipped),
  // then every output arg. `arg_names` receives the var names in that order.
  // `onednn`: the settings of the compile (CompileOptions::OneDnnSettings()),
  // which the op's kernel sees in its ExecContext.
  FrameworkOpKernel(const proto::OpDesc& op, const OpInfo& info, bool use_onednn, const onednn::Settings& onednn,
                    std::vector<std::string>* arg_names, int* num_inputs);

  const std::string& name() const override { return name_; }
  std::string Describe() const override;
  void Run(const runtime::BufferView* args) const override;
  // The op's oneDNN kernel run dry (onednn::Settings::dry_run) on `args`:
  // the same handlers acquire the same primitives as Run, and list the
  // reorders they would run. Nothing for an op without a oneDNN kernel.
  std::vector<onednn::ReorderNote> Reorders(const runtime::BufferView* args) const override;
  bool ReadsDimsAtRunTime() const override { return true; }
  // sum's X[0] -> Out, elementwise_add's X -> Out, an activation's X -> Out:
  // the ops the in-place pass runs in place (OneDnnInplaceOps) whose element
  // i of Out depends on element i of X alone.
  std::vector<std::pair<int, int>> InplacePairs() const override { return inplace_; }
  // The same kernel (a copy): it reads the dims at run time.
  std::shared_ptr<const runtime::Kernel> Resize(const std::vector<Dims>& dims, std::string* why) const override;

 private:
  // Throws when the op's shape inference on the inputs of `args` gives an
  // output other dims than the bound one.
  void CheckOutputDims(const runtime::BufferView* args) const;
  void FindInplacePair(const OpInfo& info, int num_inputs);
  // The op's kernels on `args` with `settings`: the oneDNN kernel, and the
  // reference kernel when that one falls back and `reference` is set.
  void RunKernel(const runtime::BufferView* args, const onednn::Settings& settings, bool reference) const;

  std::string name_;
  proto::OpDesc op_;
  const OpInfo* info_;
  AttrMap attrs_;
  bool use_onednn_;
  onednn::Settings onednn_;
  // Slot layout: for each input/output slot, the arg positions (-1 = @EMPTY@).
  std::vector<std::pair<std::string, std::vector<int>>> in_slots_, out_slots_;
  std::vector<std::string> names_;
  std::vector<std::pair<int, int>> inplace_;
};

}  // namespace kiln::jit
