// Element types of tensors; values mirror proto::DataType.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "framework/proto/framework.pb.h"

namespace kiln {

// kBF16 only inside compiled clusters (the JIT's bf16 weight copies under
// --amp bf16); no framework kernel reads or writes it.
enum class DataType : int { kFP32 = 0, kINT64 = 1, kINT32 = 2, kFP64 = 3, kBOOL = 4, kBF16 = 5 };

// The type a primitive multiplies in while its tensors stay f32 (--amp):
// kBF16 converts the operands to bf16 and accumulates in f32.
enum class ComputeType : uint8_t { kF32, kBF16 };
// "f32", "bf16".
const char* ComputeTypeName(ComputeType type);

size_t SizeOf(DataType dtype);
// Short readable name used in IR printing and errors: f32, i64, i32, f64, bool, bf16.
const char* DataTypeName(DataType dtype);
// "float32", "int64", "int32", "float64", "bool" (numpy's names), and back.
const char* NumpyDtypeName(DataType dtype);
std::optional<DataType> DataTypeFromNumpyName(std::string_view name);

inline DataType FromProto(proto::DataType d) { return static_cast<DataType>(static_cast<int>(d)); }
inline proto::DataType ToProto(DataType d) { return static_cast<proto::DataType>(static_cast<int>(d)); }

template <typename T>
struct DataTypeOf;
template <> struct DataTypeOf<float> { static constexpr DataType value = DataType::kFP32; };
template <> struct DataTypeOf<double> { static constexpr DataType value = DataType::kFP64; };
template <> struct DataTypeOf<int64_t> { static constexpr DataType value = DataType::kINT64; };
template <> struct DataTypeOf<int32_t> { static constexpr DataType value = DataType::kINT32; };
template <> struct DataTypeOf<bool> { static constexpr DataType value = DataType::kBOOL; };

}  // namespace kiln
