// Helpers for the lowering-step tests (tests/lowering_*_test.cc): a small
// cluster built in code, lowered for concrete input shapes; its lowering
// trace compared with a golden file under tests/golden/lowering/
// (regenerated with KILN_UPDATE_GOLDEN=1), and its compiled program run on
// random inputs against the reference kernels.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compiler/lower.h"
#include "framework/op_desc.h"
#include "framework/tensor.h"

namespace kiln::test {

struct LoweringCase {
  // The golden file's name; it is or begins with the name of the step
  // under test (dead_ops_not_fired), which the golden shows even when the
  // step did not fire.
  std::string name;
  std::vector<proto::OpDesc> ops;
  // Vars read before any op writes them, with their dims, in order of first
  // read; f32 unless `dtypes` says otherwise.
  std::vector<std::pair<std::string, Dims>> inputs;
  std::map<std::string, DataType> dtypes;
  std::vector<std::string> outputs;    // needed after the cluster
  std::vector<std::string> donatable;  // inputs that die in the cluster
  // Input values to use instead of random ones (CheckLoweringNumerics).
  std::map<std::string, Tensor> given;
  // Absolute tolerances of single outputs (CheckLoweringNumerics), instead
  // of its `atol` argument.
  std::map<std::string, double> output_atol;
  jit::CompileOptions options = DefaultOptions();

  static jit::CompileOptions DefaultOptions();
};

// The subgraph build_jit_pass would make of the case.
JitSubgraph MakeSubgraph(const LoweringCase& c);
// Its inputs' dtypes and dims.
jit::ShapeSignature SignatureOf(const LoweringCase& c);
std::unique_ptr<jit::CompiledObject> LowerCase(const LoweringCase& c);

// The golden text: the cluster's ops with concrete shapes, the lowering
// trace and the buffer plan (no timings, no oneDNN implementation names).
// Of the trace's steps it shows those that fired and the step under test,
// without their numbers: a new step changes only the goldens it fires in.
std::string LoweringGolden(const LoweringCase& c);
// EXPECTs the golden text to equal tests/golden/lowering/<name>.golden.
void CheckLoweringGolden(const LoweringCase& c);
// Runs the compiled program (zero-copy, as jit_launch binds it) and the ops
// on the reference kernels on the same random inputs (bool ones 0 or 1;
// other dtypes than f32, f64 and bool must be given); EXPECTs every output
// to have the reference's dtype and to agree within atol + rtol*|ref|.
// Returns the compiled object.
std::unique_ptr<jit::CompiledObject> CheckLoweringNumerics(const LoweringCase& c, double atol = 1e-5,
                                                           double rtol = 1e-5, unsigned seed = 1);
// The same for `program` standing in for obj.program (obj the case's
// compiled object: its inputs, outputs and their dims).
void CheckProgramNumerics(const LoweringCase& c, const jit::CompiledObject& obj, const runtime::Program& program,
                          double atol = 1e-5, double rtol = 1e-5, unsigned seed = 1);

// Runs the compiled program on copies of `inputs` (by var name), bound as
// jit_launch binds them; returns its outputs (elements it does not write are
// NaN or 0xab bytes).
std::vector<Tensor> RunCompiled(const jit::CompiledObject& obj, const std::map<std::string, Tensor>& inputs);
// The same with `program` standing in for obj.program.
std::vector<Tensor> RunCompiled(const jit::CompiledObject& obj, const runtime::Program& program,
                                const std::map<std::string, Tensor>& inputs);

// conv2d of x `input` and f `filter` (square stride and padding, groups),
// then, when asked, elementwise_add of a [O] bias b at axis 1 and the
// activation `act` ("" for none): the conv epilogue's pattern.
LoweringCase ConvBiasAct(const std::string& name, bool bias, const std::string& act, Dims input, Dims filter,
                         int64_t stride, int64_t pad, int64_t groups);

// relu(x) -> r, matmul(r, w) -> m, elementwise_add(r, b) -> s of a [17]
// bias row and its grad (dx, db: the bias gradient a sum over the rows), for
// x [batch, 17], w [17, 3]; outputs m, dx, db; oneDNN off. Fragments of two
// spaces with a matmul (another space) between them.
LoweringCase ReluMatmulBiasGrad(const std::string& name, int64_t batch);

// conv2d_grad of ConvBiasAct's conv (x, f; square stride and padding, one
// group) from the gradient `dconv`, writing dx and df.
proto::OpDesc ConvGradOp(const std::string& dconv, int64_t stride, int64_t pad);

// elementwise_add_grad of ConvBiasAct's bias add (b at axis 1) from dsum:
// dconv and the bias gradient db.
proto::OpDesc BiasAddGradOp();

// matmul_grad of x[m,k] and w[k,n] with dY [m,n] (dX wanted or not), whose
// weight gradient dw feeds sgd(w, lr): the weight-gradient fold's pattern.
LoweringCase GradAndSgd(const std::string& name, int64_t m, int64_t k, int64_t n, bool want_dx);

// A line of the lowering trace: "matched #0 matmul, ..." for step `step`.
bool StepMatched(const jit::CompiledObject& obj, const std::string& step);

}  // namespace kiln::test
