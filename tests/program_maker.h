// One-block programs for the pass tests, declared var by var and op by op.
#pragma once

#include <string>
#include <utility>

#include "framework/backward.h"
#include "framework/op_desc.h"
#include "framework/proto/framework.pb.h"
#include "framework/shape_util.h"
#include "framework/validate.h"

namespace kiln::test {

// Who declares an op's outputs: the test, var by var, or shape inference as
// each op is appended.
enum class OutputDecl { kByTest, kByShapeInference };

class ProgramMaker {
 public:
  explicit ProgramMaker(OutputDecl outputs = OutputDecl::kByTest) : outputs_(outputs) {
    program.set_version(1);
    block = program.add_blocks();
    block->set_idx(0);
    block->set_parent_idx(-1);
  }

  // A var the program computes or is fed.
  ProgramMaker& Var(const std::string& name, Dims dims, proto::DataType dtype = proto::FP32) {
    Declare(name, std::move(dims), dtype);
    return *this;
  }
  // A persistable FP32 var (a parameter or optimizer state).
  ProgramMaker& Param(const std::string& name, Dims dims) {
    Declare(name, std::move(dims), proto::FP32)->set_persistable(true);
    return *this;
  }
  // A fed FP32 var that takes no gradient.
  ProgramMaker& Input(const std::string& name, Dims dims) {
    Declare(name, std::move(dims), proto::FP32)->set_stop_gradient(true);
    return *this;
  }
  ProgramMaker& Op(const OpBuilder& op) {
    *block->add_ops() = op.Build();
    if (outputs_ == OutputDecl::kByShapeInference) {
      InferShapeAtBuild(block, block->ops_size() - 1, /*declare_outputs=*/true);
    }
    return *this;
  }
  // The program built so far with the backward of `loss` appended.
  proto::ProgramDesc WithBackward(const std::string& loss) const {
    proto::ProgramDesc p = program;
    AppendBackward(&p, loss);
    return p;
  }

  proto::ProgramDesc program;
  proto::BlockDesc* block;

 private:
  proto::VarDesc* Declare(const std::string& name, Dims dims, proto::DataType dtype) {
    proto::VarDesc* v = block->add_vars();
    v->set_name(name);
    v->set_dtype(dtype);
    for (int64_t d : dims) v->add_dims(d);
    return v;
  }

  OutputDecl outputs_;
};

}  // namespace kiln::test
