#include "framework/data_type.h"

namespace kiln {

size_t SizeOf(DataType dtype) {
  switch (dtype) {
    case DataType::kFP32: return 4;
    case DataType::kINT64: return 8;
    case DataType::kINT32: return 4;
    case DataType::kFP64: return 8;
    case DataType::kBOOL: return 1;
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
  }
  return "?";
}

}  // namespace kiln
