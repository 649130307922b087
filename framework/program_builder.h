// ProgramBuilder: builds a main program and its startup program (parameter
// initialisation) op by op, declaring each output var from shape inference.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "framework/attribute.h"
#include "framework/proto/framework.pb.h"
#include "framework/tensor.h"

namespace kiln {

// How a parameter is initialised (seeded, by uniform_random/fill_constant ops
// in the startup program).
struct Init {
  enum class Kind { kConstant, kXavierUniform, kHeUniform, kUniform };
  Kind kind = Kind::kConstant;
  float value = 0.f;    // kConstant
  int64_t fan_in = 0;   // Xavier/He
  int64_t fan_out = 0;  // Xavier
  float limit = 0.f;    // kUniform: U(-limit, limit)

  static Init Constant(float v) { return {Kind::kConstant, v, 0, 0, 0.f}; }
  // U(-a, a) with a = sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio 2010).
  static Init XavierUniform(int64_t fan_in, int64_t fan_out) { return {Kind::kXavierUniform, 0.f, fan_in, fan_out, 0.f}; }
  // U(-a, a) with a = sqrt(6 / fan_in) (He et al. 2015, for ReLU layers).
  static Init HeUniform(int64_t fan_in) { return {Kind::kHeUniform, 0.f, fan_in, 0, 0.f}; }
  static Init Uniform(float limit) { return {Kind::kUniform, 0.f, 0, 0, limit}; }
};

using SlotArgsList = std::vector<std::pair<std::string, std::vector<std::string>>>;

// An empty program: one block, idx 0, parent -1.
proto::ProgramDesc EmptyProgram();

// Drops the vars and ops of block 0 past the first `vars` and `ops` (what a
// layer that raised had added). Throws InvalidArgument when the block has
// fewer.
void TruncateBlock(proto::ProgramDesc* program, int vars, int ops);

class ProgramBuilder {
 public:
  // Builds a main and a startup program of its own.
  explicit ProgramBuilder(uint64_t seed);
  // Builds into programs the caller owns and keeps alive (the Python front
  // end's Program objects), which may already hold vars and ops: new names
  // stay clear of the vars `main` declares, and parameter seeds continue
  // from the random initialisers `startup` already holds.
  ProgramBuilder(proto::ProgramDesc* main, proto::ProgramDesc* startup, uint64_t seed);
  ProgramBuilder(const ProgramBuilder&) = delete;
  ProgramBuilder& operator=(const ProgramBuilder&) = delete;

  // A fed input (not persistable).
  std::string Data(const std::string& name, const Dims& dims, DataType dtype = DataType::kFP32,
                   bool stop_gradient = true);
  // A trainable parameter, initialised in the startup program.
  std::string Param(const std::string& name, const Dims& dims, const Init& init);
  // A persistable non-trainable var (learning rate, optimizer state, running
  // statistics, RNG state), filled with `value` by the startup program.
  std::string Persistable(const std::string& name, const Dims& dims, float value,
                          DataType dtype = DataType::kFP32);

  // A persistable var the startup program initialises already (a parameter
  // shared with another program built alike under unique_name.guard()):
  // declares it in main, with stop_gradient = !trainable, and returns true;
  // false when startup does not declare it. Throws InvalidArgument naming
  // both when main declares it already or startup's dims or dtype differ.
  bool DeclareShared(const std::string& name, const Dims& dims, DataType dtype, bool trainable);

  // Appends an op to the main program. `outputs` lists output slot names; each
  // gets one fresh var named "<prefix>.<slot>_<n>" declared from shape
  // inference. Returns the output var names in `outputs` order.
  std::vector<std::string> Op(const std::string& type, const SlotArgsList& inputs,
                              const std::vector<std::string>& outputs, const AttrMap& attrs = {},
                              const std::string& prefix = "");
  // Single-output convenience (slot "Out").
  std::string Op1(const std::string& type, const SlotArgsList& inputs, const AttrMap& attrs = {},
                  const std::string& out_slot = "Out");
  // Appends an op with explicit outputs (vars may already exist, e.g. in-place updates).
  void RawOp(const proto::OpDesc& op);

  // "<prefix>_<n>" such that main declares neither that name nor any
  // "<that name>.<...>", with n counting up from the last name given.
  std::string UniqueName(const std::string& prefix);
  const std::vector<std::string>& params() const { return params_; }
  Dims VarDimsOf(const std::string& name) const;

  proto::ProgramDesc& main() { return *main_; }
  proto::ProgramDesc& startup() { return *startup_; }

 private:
  // Throws unless neither program declares `name` yet (a parameter or state
  // var is declared in both).
  void CheckNewPersistable(const std::string& name) const;
  proto::VarDesc* Declare(proto::ProgramDesc& program, const std::string& name, const Dims& dims, DataType dtype);

  uint64_t seed_;
  int64_t init_count_ = 0;
  std::map<std::string, int> name_counts_;
  std::vector<std::string> params_;
  proto::ProgramDesc owned_main_;
  proto::ProgramDesc owned_startup_;
  proto::ProgramDesc* main_;
  proto::ProgramDesc* startup_;
};

}  // namespace kiln
