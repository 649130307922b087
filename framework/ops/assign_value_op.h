// An assign_value op that fills `var` with the values of `t` (f32, i64, i32,
// bool): how a startup program holds values it did not compute (the ONNX
// importer's initializers, kiln train --program's imported checkpoint).
#pragma once

#include <string>

#include "framework/proto/framework.pb.h"
#include "framework/tensor.h"

namespace kiln {

// Throws InvalidArgument naming `var` for any other dtype.
proto::OpDesc AssignValueOp(const std::string& var, const Tensor& t);

}  // namespace kiln
