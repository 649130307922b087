// A runtime::Kernel that runs one framework op (its oneDNN kernel where it has
// one, else its reference kernel) on buffers bound by the runner: the op reads
// and writes them in place through non-owning tensor views.
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

 private:
  std::string name_;
  proto::OpDesc op_;
  const OpInfo* info_;
  AttrMap attrs_;
  bool use_onednn_;
  onednn::Settings onednn_;
  // Slot layout: for each input/output slot, the arg positions (-1 = @EMPTY@).
  std::vector<std::pair<std::string, std::vector<int>>> in_slots_, out_slots_;
  std::vector<std::string> names_;
};

}  // namespace kiln::jit
