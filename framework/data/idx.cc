#include "framework/data/idx.h"

#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>

#include "framework/data/gzip_file.h"

namespace kiln {
namespace {

uint32_t LoadBE32(const std::string& bytes, size_t offset) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(bytes[offset + i]);
  return v;
}

std::string Hex32(uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(8) << std::setfill('0') << v;
  return os.str();
}

constexpr int64_t kImageSide = 28;

}  // namespace

IdxArray ReadIdx(const std::string& path, uint32_t expected_magic) {
  const std::string bytes = ReadMaybeGzippedFile(path);
  if (bytes.size() < 4) {
    ThrowDataLoss("idx file '", path, "': truncated: ", bytes.size(), " bytes, too short for the magic number");
  }
  const uint32_t magic = LoadBE32(bytes, 0);
  if (magic != expected_magic) {
    ThrowInvalidArgument("idx file '", path, "': bad magic number ", Hex32(magic), ", expected ",
                         Hex32(expected_magic), " (u8, rank ", expected_magic & 0xff, ")");
  }
  const size_t rank = magic & 0xff;
  const size_t header = 4 + 4 * rank;
  if (bytes.size() < header) {
    ThrowDataLoss("idx file '", path, "': truncated: ", bytes.size(), " bytes, too short for the ", rank,
                  " dims of the header");
  }
  IdxArray out;
  // The non-zero dims must multiply to an int64 even when another dim is 0:
  // the tensor's element count is an int64 product of all of them. Dims are
  // below 2^32 each; stop before the product could overflow.
  constexpr size_t kMax = static_cast<size_t>(std::numeric_limits<int64_t>::max());
  size_t nonzero = 1;
  bool empty = false;
  for (size_t i = 0; i < rank; ++i) {
    uint32_t d = LoadBE32(bytes, 4 + 4 * i);
    out.dims.push_back(d);
    if (d == 0) {
      empty = true;
      continue;
    }
    if (nonzero > kMax / d) {
      ThrowInvalidArgument("idx file '", path, "': dims ", DimsToString(out.dims), " are too large");
    }
    nonzero *= d;
  }
  const size_t expected = empty ? 0 : nonzero;
  const size_t available = bytes.size() - header;
  if (available < expected) {
    ThrowDataLoss("idx file '", path, "': truncated: dims ", DimsToString(out.dims), " need ", expected,
                  " data bytes, got ", available);
  }
  if (available > expected) {
    ThrowInvalidArgument("idx file '", path, "': trailing garbage: dims ", DimsToString(out.dims), " need ",
                         expected, " data bytes, got ", available, " (", available - expected, " extra)");
  }
  out.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return out;
}

Tensor LoadIdxImages(const std::string& path) {
  IdxArray a = ReadIdx(path, kIdxImagesMagic);
  Tensor t(DataType::kFP32, {a.dims[0], 1, a.dims[1], a.dims[2]});
  float* dst = t.mutable_data<float>();
  const size_t n = a.data.size();
  for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(a.data[i]) * (1.0f / 255.0f);
  return t;
}

Tensor LoadIdxLabels(const std::string& path, int64_t num_classes) {
  IdxArray a = ReadIdx(path, kIdxLabelsMagic);
  Tensor t(DataType::kINT64, {a.dims[0], 1});
  int64_t* dst = t.mutable_data<int64_t>();
  for (size_t i = 0; i < a.data.size(); ++i) {
    if (a.data[i] >= num_classes) {
      ThrowInvalidArgument("idx file '", path, "': label ", int{a.data[i]}, " of item ", i, " outside 0-",
                           num_classes - 1);
    }
    dst[i] = a.data[i];
  }
  return t;
}

namespace {

Dataset LoadFashionMnistPart(const std::string& dir, const std::string& prefix) {
  const std::string images_path = dir + "/" + prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  Dataset data;
  data.features = LoadIdxImages(images_path);
  data.labels = LoadIdxLabels(labels_path, kFashionMnistClasses);
  const Dims& d = data.features.dims();
  if (d[2] != kImageSide || d[3] != kImageSide) {
    ThrowInvalidArgument("idx file '", images_path, "': expected 28x28 images, got ", d[2], "x", d[3]);
  }
  if (data.labels.dim(0) != d[0]) {
    ThrowInvalidArgument("Fashion-MNIST ", prefix, " set: '", images_path, "' holds ", d[0], " images but '",
                         labels_path, "' holds ", data.labels.dim(0), " labels");
  }
  return data;
}

}  // namespace

FashionMnist LoadFashionMnist(const std::string& dir) {
  return {LoadFashionMnistPart(dir, "train"), LoadFashionMnistPart(dir, "t10k")};
}

}  // namespace kiln
