// Internals of random_program.cc: the generator state the op families share.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "framework/program_builder.h"
#include "tests/fuzz/random_program.h"

namespace kiln::fuzz {

struct GenVar {
  std::string name;
  Dims dims;
};

class Gen {
 public:
  explicit Gen(FuzzInput& in);

  FuzzInput& in() { return in_; }
  ProgramBuilder& b() { return b_; }
  RandomProgram& out() { return out_; }

  // Dims of rank in [lo, hi], each dim drawn from sizes around the SIMD
  // widths (1, 2, 3, 4, 5, 7, 8, 15, 16, 17), numel at most kMaxNumel.
  Dims RandomDims(int lo, int hi);
  int64_t RandomDim();
  // A fed FP32 input with values uniform in [lo, hi].
  GenVar NewData(const Dims& dims, float lo = -1.f, float hi = 1.f);
  // A fed INT64 input with values in [0, bound).
  std::string NewIds(const Dims& dims, int64_t bound);
  // A trainable parameter, U(-0.5, 0.5).
  GenVar NewParam(const Dims& dims);
  // A var of the pool (any rank), or a new input when the pool is empty.
  GenVar Pick();
  // A pool var of rank in [lo, hi], or a new input of such a rank.
  GenVar PickRank(int lo, int hi);
  // Appends an op; on success its FP32 outputs join the pool and the op's
  // family is recorded; a refusal (kiln::Error from shape inference) is
  // counted and the program stays as it was.
  bool AddOp(const proto::OpDesc& op, const std::vector<std::string>& pool_outputs);
  // Appends `type` with one output slot; returns the output var or "".
  std::string Op1(const std::string& type, const SlotArgsList& inputs, const AttrMap& attrs = {},
                  const std::string& out_slot = "Out");
  std::vector<std::string> OpN(const std::string& type, const SlotArgsList& inputs,
                               const std::vector<std::string>& outputs, const AttrMap& attrs,
                               const std::vector<std::string>& pooled);
  Dims DimsOf(const std::string& var) const { return b_.VarDimsOf(var); }
  void set_family(const std::string& family) { family_ = family; }
  std::vector<GenVar>& pool() { return pool_; }
  std::mt19937& rng() { return rng_; }

  static constexpr int64_t kMaxNumel = 4096;

 private:
  FuzzInput& in_;
  ProgramBuilder b_;
  std::mt19937 rng_;
  RandomProgram out_;
  std::vector<GenVar> pool_;
  std::string family_;
  int names_ = 0;
};

using FamilyFn = void (*)(Gen&);
struct Family {
  const char* name;
  FamilyFn build;
};

// The layout, CNN and embedding families (random_program_layout.cc).
const std::vector<Family>& LayoutFamilies();

}  // namespace kiln::fuzz
