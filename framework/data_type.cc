#include "framework/data_type.h"

#include <utility>

namespace kiln {

const char* ComputeTypeName(ComputeType type) { return type == ComputeType::kBF16 ? "bf16" : "f32"; }

size_t SizeOf(DataType dtype) {
  switch (dtype) {
    case DataType::kFP32: return 4;
    case DataType::kINT64: return 8;
    case DataType::kINT32: return 4;
    case DataType::kFP64: return 8;
    case DataType::kBOOL: return 1;
    case DataType::kBF16: return 2;
  }
  return 0;
}

const char* DataTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kFP32: return "f32";
    case DataType::kINT64: return "i64";
    case DataType::kINT32: return "i32";
    case DataType::kFP64: return "f64";
    case DataType::kBOOL: return "bool";
    case DataType::kBF16: return "bf16";
  }
  return "?";
}

namespace {
const std::pair<DataType, const char*> kNumpyNames[] = {{DataType::kFP32, "float32"},
                                                        {DataType::kINT64, "int64"},
                                                        {DataType::kINT32, "int32"},
                                                        {DataType::kFP64, "float64"},
                                                        {DataType::kBOOL, "bool"}};
}  // namespace

const char* NumpyDtypeName(DataType dtype) {
  for (const auto& [d, name] : kNumpyNames) {
    if (d == dtype) return name;
  }
  return "?";
}

std::optional<DataType> DataTypeFromNumpyName(std::string_view name) {
  for (const auto& [d, n] : kNumpyNames) {
    if (name == n) return d;
  }
  return std::nullopt;
}

}  // namespace kiln
