#include "framework/onnx/onnx_tensor.h"

#include <cctype>
#include <cstring>

#include "framework/error.h"

namespace kiln::onnx_import {
namespace {

using onnx::TensorProto;

// Bytes of one element as raw_data stores it (little-endian, bool one byte).
size_t RawSize(DataType dtype) { return dtype == DataType::kBOOL ? 1 : SizeOf(dtype); }

// How many values the typed field of `dtype` holds (ONNX stores bool and
// int32 in int32_data).
int64_t TypedCount(const TensorProto& t, DataType dtype) {
  switch (dtype) {
    case DataType::kFP32:
      return t.float_data_size();
    case DataType::kFP64:
      return t.double_data_size();
    case DataType::kINT64:
      return t.int64_data_size();
    default:
      return t.int32_data_size();
  }
}

void CopyTyped(const TensorProto& t, Tensor* out) {
  const int64_t n = out->numel();
  switch (out->dtype()) {
    case DataType::kFP32:
      std::memcpy(out->mutable_data<float>(), t.float_data().data(), n * sizeof(float));
      break;
    case DataType::kFP64:
      std::memcpy(out->mutable_data<double>(), t.double_data().data(), n * sizeof(double));
      break;
    case DataType::kINT64:
      std::memcpy(out->mutable_data<int64_t>(), t.int64_data().data(), n * sizeof(int64_t));
      break;
    case DataType::kINT32:
      std::memcpy(out->mutable_data<int32_t>(), t.int32_data().data(), n * sizeof(int32_t));
      break;
    default: {
      bool* p = out->mutable_data<bool>();
      for (int64_t i = 0; i < n; ++i) p[i] = t.int32_data(static_cast<int>(i)) != 0;
    }
  }
}

}  // namespace

std::optional<DataType> KilnDtype(int32_t onnx_type) {
  switch (onnx_type) {
    case TensorProto::FLOAT:
      return DataType::kFP32;
    case TensorProto::DOUBLE:
      return DataType::kFP64;
    case TensorProto::INT64:
      return DataType::kINT64;
    case TensorProto::INT32:
      return DataType::kINT32;
    case TensorProto::BOOL:
      return DataType::kBOOL;
    default:
      return std::nullopt;
  }
}

std::string OnnxDtypeName(int32_t onnx_type) {
  if (!TensorProto::DataType_IsValid(onnx_type)) return "element type " + std::to_string(onnx_type);
  std::string name = TensorProto::DataType_Name(static_cast<TensorProto::DataType>(onnx_type));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

int32_t OnnxDtype(DataType dtype) {
  switch (dtype) {
    case DataType::kFP32:
      return TensorProto::FLOAT;
    case DataType::kFP64:
      return TensorProto::DOUBLE;
    case DataType::kINT64:
      return TensorProto::INT64;
    case DataType::kINT32:
      return TensorProto::INT32;
    case DataType::kBOOL:
      return TensorProto::BOOL;
    default:
      return TensorProto::UNDEFINED;
  }
}

Tensor TensorFromProto(const TensorProto& t, const std::string& what) {
  const std::optional<DataType> dtype = KilnDtype(t.data_type());
  if (!dtype) {
    ThrowUnimplemented(what, ": element type ", OnnxDtypeName(t.data_type()),
                       " (kiln has float, double, int64, int32 and bool)");
  }
  if (t.data_location() == TensorProto::EXTERNAL) {
    ThrowInvalidArgument(what, ": external data was not resolved");  // onnx_model.cc resolves it first
  }
  Dims dims;
  int64_t numel = 1;
  for (int64_t d : t.dims()) {
    if (d < 0) ThrowInvalidArgument(what, ": negative dim ", d);
    // Checked before multiplying, so the product cannot overflow.
    if (d > 0 && numel > kMaxTensorElements / d) {
      ThrowInvalidArgument(what, ": more than ", kMaxTensorElements, " elements");
    }
    numel *= d;
    dims.push_back(d);
  }
  Tensor out(*dtype, dims);
  const bool raw = t.has_raw_data();
  const int64_t have = raw ? static_cast<int64_t>(t.raw_data().size()) : TypedCount(t, *dtype);
  const int64_t want = raw ? numel * static_cast<int64_t>(RawSize(*dtype)) : numel;
  if (have != want) {
    ThrowInvalidArgument(what, ": ", DimsToString(dims), " ", OnnxDtypeName(t.data_type()), " needs ", want,
                         raw ? " bytes of raw_data, got " : " values, got ", have);
  }
  if (numel == 0) return out;
  if (!raw) {
    CopyTyped(t, &out);
    return out;
  }
  // raw_data is little-endian, as this machine (x86-64); bool is one byte 0/1.
  void* dst = out.raw_mutable_data(*dtype);
  if (*dtype == DataType::kBOOL) {
    bool* p = static_cast<bool*>(dst);
    for (int64_t i = 0; i < numel; ++i) p[i] = t.raw_data()[static_cast<size_t>(i)] != 0;
  } else {
    std::memcpy(dst, t.raw_data().data(), t.raw_data().size());
  }
  return out;
}

}  // namespace kiln::onnx_import
