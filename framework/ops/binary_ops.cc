// elementwise_max, elementwise_min (+grads) and elementwise_mod: binary_op.h
// functors, Y broadcast into X from axis. max and min are elementwise in the
// JIT; mod runs its framework kernel (C's fmod is exact, x - trunc(x/y)*y in
// f32 is not).
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/binary_op.h"
#include "framework/ops/dtype_dispatch.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

// Paddle's grads: X gets dOut where it alone is the extreme (x > y for max),
// Y where x <= y, so ties go to Y; with a NaN operand neither comparison
// holds and both get 0. The forwards propagate NaN (numpy.maximum, ONNX Max,
// torch.maximum), as the IR's max and min do.
struct Max {
  template <typename Ctx>
  explicit Max(const Ctx&) {}
  template <typename T>
  T Fwd(T x, T y) const {
    return ops::IsNan(x) ? x : ops::IsNan(y) ? y : y > x ? y : x;
  }
  template <typename T>
  T Dx(T x, T y, T dout) const {
    return x > y ? dout : T(0);
  }
  template <typename T>
  T Dy(T x, T y, T dout) const {
    return x <= y ? dout : T(0);
  }
  EwValue Ew(EwProgram& p, EwValue x, EwValue y) const { return p.Max(x, y); }
  EwValue EwDx(EwProgram& p, EwValue g, EwValue x, EwValue y) const { return p.Select(p.Gt(x, y), g, p.Const(0.0f)); }
  EwValue EwDy(EwProgram& p, EwValue g, EwValue x, EwValue y) const { return p.Select(p.Le(x, y), g, p.Const(0.0f)); }
};

struct Min {
  template <typename Ctx>
  explicit Min(const Ctx&) {}
  template <typename T>
  T Fwd(T x, T y) const {
    return ops::IsNan(x) ? x : ops::IsNan(y) ? y : y < x ? y : x;
  }
  template <typename T>
  T Dx(T x, T y, T dout) const {
    return x < y ? dout : T(0);
  }
  template <typename T>
  T Dy(T x, T y, T dout) const {
    return x >= y ? dout : T(0);
  }
  EwValue Ew(EwProgram& p, EwValue x, EwValue y) const { return p.Min(x, y); }
  EwValue EwDx(EwProgram& p, EwValue g, EwValue x, EwValue y) const { return p.Select(p.Lt(x, y), g, p.Const(0.0f)); }
  EwValue EwDy(EwProgram& p, EwValue g, EwValue x, EwValue y) const { return p.Select(p.Ge(x, y), g, p.Const(0.0f)); }
};

// fmod = false (Paddle's elementwise_mod, ONNX Mod's default, Python's %):
// the result takes the divisor's sign; fmod = true: C's fmod and %, the
// dividend's sign. Integer division by zero is an error; floats give NaN.
struct Mod {
  template <typename Ctx>
  explicit Mod(const Ctx& ctx) : fmod(ctx.template Attr<bool>("fmod")) {}
  template <typename T>
  void CheckY(const ExecContext& ctx, const T* y, int64_t n) const {
    if constexpr (std::is_integral_v<T>) {
      for (int64_t i = 0; i < n; ++i) {
        if (y[i] == 0) ctx.Fail("input Y: integer division by zero (element ", i, " of Y is 0)");
      }
    }
  }
  template <typename T>
  T Fwd(T x, T y) const {
    T r;
    if constexpr (std::is_integral_v<T>) {
      r = y == T(-1) ? T(0) : T(x % y);  // x % -1 is 0; INT_MIN % -1 would trap
    } else {
      r = std::fmod(x, y);
    }
    if (!fmod && r != T(0) && ((r < T(0)) != (y < T(0)))) r += y;
    return r;
  }
  bool fmod;
};

}  // namespace

void RegisterBinaryOps(OpRegistry& r) {
  using binary_op::RegisterBinaryOp;
  const std::string dtypes = "; f32, f64, i64, i32 (grads f32 and f64)";
  RegisterBinaryOp<Max>(
      r, "elementwise_max",
      "Out = max(X, Y), Y broadcast into X from axis; a NaN in either gives NaN (numpy.maximum, ONNX Max)" + dtypes,
      {},
      "Gradient of elementwise_max (Paddle's rule: ties go to Y): X@GRAD = Out@GRAD where X > Y, Y@GRAD = "
      "Out@GRAD where X <= Y (summed over Y's broadcast dims), 0 elsewhere; with a NaN operand both get 0");
  RegisterBinaryOp<Min>(
      r, "elementwise_min",
      "Out = min(X, Y), Y broadcast into X from axis; a NaN in either gives NaN (numpy.minimum, ONNX Min)" + dtypes,
      {},
      "Gradient of elementwise_min (Paddle's rule: ties go to Y): X@GRAD = Out@GRAD where X < Y, Y@GRAD = "
      "Out@GRAD where X >= Y (summed over Y's broadcast dims), 0 elsewhere; with a NaN operand both get 0");
  r.Add(binary_op::BinaryForwardInfo<Mod>(
      "elementwise_mod",
      "Out = X mod Y, Y broadcast into X from axis. fmod false (Paddle's elementwise_mod, ONNX Mod fmod=0, "
      "Python's %): the result has Y's sign (floor division's remainder); fmod true (ONNX Mod fmod=1): C's fmod "
      "and %, the result has X's sign. f32, f64, i64, i32; an integer Y of 0 is an error naming the element, a "
      "float one gives NaN. Not differentiable. JIT: framework (C's fmod is exact; X - trunc(X / Y) * Y in f32 "
      "is not)",
      {{"fmod", AttrKind::kBool, Attribute(false)}}));
}

}  // namespace kiln
