// elementwise_pow (+grad): X^Y with Y broadcast into X from axis, a
// binary_op.h functor. Floats follow std::pow (IEEE pow's special cases),
// integers are exact powers (negative exponents are refused, as numpy
// does). The JIT's form is exp(Y ln|X|) with pow's sign and special cases
// put back by selects.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/binary_op.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

// x^n by squaring in unsigned arithmetic: overflow wraps as the dtype would.
template <typename T>
T IntPow(T x, T n) {
  using U = std::make_unsigned_t<T>;
  U result = 1, base = static_cast<U>(x);
  for (U e = static_cast<U>(n); e != 0; e >>= 1) {
    if (e & 1u) result *= base;
    base *= base;
  }
  return static_cast<T>(result);
}

// The f32 lane's round half to even (see unary_math_ops.cc's floor): exact
// for |v| < 2^23, v itself beyond, which is an integer there.
EwValue EwRoundToInteger(EwProgram& p, EwValue v) {
  const EwValue two23 = p.Const(8388608.0f);
  const EwValue a = p.Abs(v);
  const EwValue r = p.Sub(p.Add(a, two23), two23);
  return p.Select(p.Lt(a, two23), p.Select(p.Lt(v, p.Const(0.0f)), p.Neg(r), r), v);
}

// pow(x, y) as IEEE pow defines it, from m = exp(y ln|x|):
// - x < 0, or x = -0 (1/x < 0): an integer y gives m, negated for odd y
//   (y/2 not an integer); any other y gives NaN, except for x = -0 and
//   x = -inf, where it gives m;
// - y = 0 gives 1 (also for NaN x), x = 1 gives 1 (also for NaN y), and
//   x = -1 with y = +-inf gives 1, where y ln|x| is inf * 0.
// m carries exp's and log's errors, and ln|x|'s rounding scaled by y: within
// about (2 + |y ln x|) ulp. Infinite y is an "even integer" here (inf/2 = inf).
EwValue EwPowXY(EwProgram& p, EwValue x, EwValue y) {
  const EwValue zero = p.Const(0.0f), one = p.Const(1.0f), inf = p.Const(std::numeric_limits<float>::infinity());
  const EwValue m = p.Exp(p.Mul(y, p.Log(p.Abs(x))));
  const EwValue is_int = p.Eq(EwRoundToInteger(p, y), y);
  const EwValue half = p.Mul(y, p.Const(0.5f));
  const EwValue odd = p.Ne(EwRoundToInteger(p, half), half);
  const EwValue zero_or_minus_inf = p.Add(p.Eq(x, zero), p.Eq(x, p.Neg(inf)));
  const EwValue non_int = p.Select(zero_or_minus_inf, m, p.Const(std::numeric_limits<float>::quiet_NaN()));
  const EwValue negative = p.Select(is_int, p.Select(odd, p.Neg(m), m), non_int);
  // x < 0 misses -0, 1/x < 0 misses -inf: either marks a negative x.
  EwValue r = p.Select(p.Add(p.Lt(x, zero), p.Lt(p.Div(one, x), zero)), negative, m);
  const EwValue minus_one_inf = p.Mul(p.Eq(x, p.Neg(one)), p.Eq(p.Abs(y), inf));
  r = p.Select(p.Add(p.Eq(y, zero), minus_one_inf), one, r);
  return p.Select(p.Eq(x, one), one, r);
}

struct Pow {
  template <typename Ctx>
  explicit Pow(const Ctx&) {}
  template <typename T>
  void CheckY(const ExecContext& ctx, const T* y, int64_t n) const {
    if constexpr (std::is_integral_v<T>) {
      for (int64_t i = 0; i < n; ++i) {
        if (y[i] < 0) {
          ctx.Fail("input Y: integer X to a negative power (element ", i, " of Y is ", y[i],
                   "; numpy refuses these too)");
        }
      }
    }
  }
  template <typename T>
  T Fwd(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {
      return IntPow(x, y);
    } else {
      return std::pow(x, y);
    }
  }
  // torch's pow_backward: 0 where Y is 0 (not 0 * X^-1, NaN at X = 0).
  template <typename T>
  T Dx(T x, T y, T dout) const {
    return y == T(0) ? T(0) : y * std::pow(x, y - T(1)) * dout;
  }
  // torch's pow_backward_exponent: 0 where X is 0 and Y >= 0 (not 0 * -inf).
  template <typename T>
  T Dy(T x, T y, T dout) const {
    return x == T(0) && y >= T(0) ? T(0) : std::pow(x, y) * std::log(x) * dout;
  }
  EwValue Ew(EwProgram& p, EwValue x, EwValue y) const { return EwPowXY(p, x, y); }
  EwValue EwDx(EwProgram& p, EwValue g, EwValue x, EwValue y) const {
    const EwValue d = p.Mul(p.Mul(y, EwPowXY(p, x, p.Sub(y, p.Const(1.0f)))), g);
    return p.Select(p.Eq(y, p.Const(0.0f)), p.Const(0.0f), d);
  }
  EwValue EwDy(EwProgram& p, EwValue g, EwValue x, EwValue y) const {
    const EwValue d = p.Mul(p.Mul(EwPowXY(p, x, y), p.Log(x)), g);
    const EwValue zero = p.Const(0.0f);
    return p.Select(p.Mul(p.Eq(x, zero), p.Ge(y, zero)), zero, d);
  }
};

}  // namespace

void RegisterElementwisePowOps(OpRegistry& r) {
  binary_op::RegisterBinaryOp<Pow>(
      r, "elementwise_pow",
      "Out = X^Y, Y broadcast into X from axis. Floats: std::pow (a negative X needs an integer Y, else NaN; "
      "X^0 = 1 and 1^Y = 1 even for NaN); i64 and i32: the exact power (wrapping on overflow), a negative Y is an "
      "error naming the element. JIT (f32): exp(Y * ln|X|) with pow's signs and special cases, within about (2 + "
      "|Y ln X|) ulp",
      {},
      "Gradient of elementwise_pow: X@GRAD = Y * X^(Y - 1) * Out@GRAD (0 where Y is 0), Y@GRAD = X^Y * ln(X) * "
      "Out@GRAD (0 where X is 0 and Y >= 0, NaN for X < 0), summed over Y's broadcast dims; as torch.pow");
}

}  // namespace kiln
