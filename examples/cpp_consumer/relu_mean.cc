// Builds a two-op kiln program (relu, then mean) with ProgramBuilder, runs it
// with the Executor on a fed tensor and prints the result: mean(relu(x)) for
// x = [-2, -1, 0, 1, 2, 3] is 1.
#include <cmath>
#include <cstdio>

#include "framework/executor.h"
#include "framework/program_builder.h"
#include "framework/scope.h"

int main() {
  kiln::proto::ProgramDesc main = kiln::EmptyProgram(), startup = kiln::EmptyProgram();
  kiln::ProgramBuilder builder(&main, &startup, /*seed=*/1);
  const std::string x = builder.Data("x", {2, 3});
  const std::string y = builder.Op1("relu", {{"X", {x}}});
  const std::string loss = builder.Op1("mean", {{"X", {y}}});

  kiln::Scope scope;
  kiln::Tensor* in = scope.Var(x)->GetMutable();
  in->Resize({2, 3});
  float* data = in->mutable_data<float>();
  for (int i = 0; i < 6; ++i) data[i] = static_cast<float>(i - 2);
  kiln::Executor().RunProgram(main, scope);

  const float got = scope.GetTensor(loss)->data<float>()[0];
  std::printf("mean(relu(x)) = %g\n", got);
  return std::fabs(got - 1.0f) < 1e-6f ? 0 : 1;
}
