// An op's elementwise meaning, as its registry entry gives it to the JIT
// (OpInfo::elementwise): the pieces of EwProgram it computes, each over one
// iteration space. The JIT groups fragments of neighbouring ops that share an
// iteration space into one generated kernel, keeping values that stay inside
// the group in registers.
//
// Adding an elementwise op: give its registry entry an `elementwise` function
// that returns its fragments; the code generator changes only when the op
// needs an instruction EwProgram does not have.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "framework/attribute.h"
#include "framework/error.h"
#include "framework/ew/ew_program.h"
#include "framework/proto/framework.pb.h"
#include "framework/tensor.h"

namespace kiln {

// A var a fragment reads or writes, with its dims padded with leading 1s to
// the iteration rank. Each dim equals the iteration dim or is 1: a read
// broadcasts along it, a write sums over it (a reduction, as a broadcast
// input's gradient).
struct EwAccess {
  std::string var;
  Dims dims;
};

struct EwFragment {
  Dims iter;  // the iteration space
  std::vector<EwAccess> reads;
  std::vector<EwAccess> writes;
  // Emits the fragment into `p`: in[k] is the value of reads[k]; returns one
  // value per write, in order. A bool var's value is 0.0 or 1.0 (loads give
  // that), and a fragment writing one must give it that too: the group's
  // later fragments read it from the register, not from its stored bytes.
  std::function<std::vector<EwValue>(EwProgram& p, const std::vector<EwValue>& in)> emit;
  // The program `emit` gives holds constants computed from the dims (a
  // mean's 1/count): a kernel made of it serves these dims only (its
  // Resize to other sizes fails).
  bool constants_from_dims = false;
};

// The dtypes whose values generated kernels load and store: f32, and bool
// as 0.0/1.0 in a float lane (EwElem::kBool). An op whose vars hold other
// dtypes (f64, i64, i32) gives no fragments and runs its framework kernel.
inline bool IsEwDtype(DataType d) { return d == DataType::kFP32 || d == DataType::kBOOL; }

// What an elementwise lowering sees of its op: single-arg slots, the
// concrete dims and dtypes of its vars and its attributes (defaults filled).
class EwOpView {
 public:
  using VarDims = std::function<Dims(const std::string& var)>;
  using VarDtype = std::function<DataType(const std::string& var)>;
  EwOpView(const proto::OpDesc& op, const AttrMap& attrs, VarDims dims, VarDtype dtypes)
      : op_(op), attrs_(attrs), dims_(std::move(dims)), dtypes_(std::move(dtypes)) {}

  const proto::OpDesc& op() const { return op_; }
  // The single arg of a slot; "" when the slot is absent or its arg @EMPTY@.
  std::string In(std::string_view slot) const;
  std::string Out(std::string_view slot) const;
  Dims DimsOf(const std::string& var) const { return dims_(var); }
  DataType DtypeOf(const std::string& var) const { return dtypes_(var); }
  // The var with all its dims.
  EwAccess Full(const std::string& var) const { return {var, DimsOf(var)}; }
  // A [1] var (learning rate, beta powers) read at every point of a space of `rank` dims.
  static EwAccess Scalar(const std::string& var, size_t rank) { return {var, Dims(rank, 1)}; }

  template <typename T>
  const T& Attr(const std::string& name) const {
    auto it = attrs_.find(name);
    if (it == attrs_.end() || !std::holds_alternative<T>(it->second)) {
      ThrowInvalidArgument("op '", op_.type(), "': elementwise lowering needs attribute '", name, "'");
    }
    return std::get<T>(it->second);
  }

 private:
  const proto::OpDesc& op_;
  const AttrMap& attrs_;
  VarDims dims_;
  VarDtype dtypes_;
};

// The fragments of one op instance; none when this instance is not lowered
// (a slot it needs is absent or @EMPTY@, a dtype generated kernels do not
// hold, an attribute the fragments do not cover).
using EwLoweringFn = std::function<std::vector<EwFragment>(const EwOpView& op)>;

}  // namespace kiln
