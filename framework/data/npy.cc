#include "framework/data/npy.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <vector>

#include "framework/file_util.h"

// The data bytes are copied as they are: the host must be little-endian like
// the only byte order read and written here.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "npy I/O assumes a little-endian host");

namespace kiln {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
// NumPy aligns the start of the data to 64 bytes and leaves room for the
// leading dim to grow to 21 digits; matching both makes our files byte-identical
// to np.save's.
constexpr size_t kArrayAlign = 64;
constexpr size_t kGrowthAxisMaxDigits = 21;

struct NpyDtype {
  const char* descr;
  DataType dtype;
};
constexpr NpyDtype kDtypes[] = {
    {"<f4", DataType::kFP32}, {"<f8", DataType::kFP64}, {"<i8", DataType::kINT64},
    {"<i4", DataType::kINT32}, {"|b1", DataType::kBOOL},
};

std::string SupportedDtypes() {
  std::string s;
  for (const NpyDtype& d : kDtypes) s += std::string(s.empty() ? "" : ", ") + d.descr;
  return s;
}

// One value of the header dict.
struct HeaderValue {
  enum Kind { kString, kBool, kTuple, kOther } kind = kOther;
  std::string text;  // kString: the string; kOther: the raw source text
  bool flag = false;
  std::vector<int64_t> ints;
};

// Parses the header, a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// followed by spaces and a newline. Accepts the subset of Python literals
// NumPy writes: quoted strings, True/False, tuples of non-negative ints (an
// 'L' suffix from Python 2 writers is allowed), and skips bracketed values
// (structured dtypes) so that they can be reported as unsupported dtypes.
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& file) : s_(text), file_(file) {}

  std::map<std::string, HeaderValue> Parse() {
    std::map<std::string, HeaderValue> dict;
    SkipSpace();
    Expect('{');
    SkipSpace();
    while (Peek() != '}') {
      if (Peek() != '\'' && Peek() != '"') Fail("expected a quoted key");
      std::string key = ParseString();
      SkipSpace();
      Expect(':');
      SkipSpace();
      HeaderValue value = ParseValue();
      if (!dict.emplace(key, std::move(value)).second) Fail("duplicate key '" + key + "'");
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
        SkipSpace();
      } else if (Peek() != '}') {
        Fail("expected ',' or '}'");
      }
    }
    ++pos_;
    SkipSpace();
    if (pos_ != s_.size()) Fail("unexpected text after the closing '}'");
    return dict;
  }

 private:
  char Peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  void Expect(char c) {
    if (Peek() != c) Fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  [[noreturn]] void Fail(const std::string& what) const {
    std::string shown = s_.size() > 200 ? s_.substr(0, 200) + "..." : s_;
    while (!shown.empty() && (shown.back() == '\n' || shown.back() == ' ')) shown.pop_back();
    ThrowInvalidArgument("npy file '", file_, "': malformed header: ", what, " at offset ", pos_,
                         " of header \"", shown, "\"");
  }

  std::string ParseString() {
    char quote = s_[pos_++];
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != quote) {
      if (s_[pos_] == '\\') Fail("escape sequences are not supported in strings");
      out += s_[pos_++];
    }
    if (pos_ == s_.size()) Fail("unterminated string");
    ++pos_;
    return out;
  }

  HeaderValue ParseValue() {
    HeaderValue v;
    char c = Peek();
    if (c == '\'' || c == '"') {
      v.kind = HeaderValue::kString;
      v.text = ParseString();
    } else if (s_.compare(pos_, 4, "True") == 0) {
      v.kind = HeaderValue::kBool;
      v.flag = true;
      pos_ += 4;
    } else if (s_.compare(pos_, 5, "False") == 0) {
      v.kind = HeaderValue::kBool;
      pos_ += 5;
    } else if (c == '(') {
      v.kind = HeaderValue::kTuple;
      v.ints = ParseTuple();
    } else if (c == '[' || c == '{') {
      v.kind = HeaderValue::kOther;
      v.text = SkipBracketed();
    } else {
      Fail("expected a string, True, False or a tuple");
    }
    return v;
  }

  std::vector<int64_t> ParseTuple() {
    std::vector<int64_t> ints;
    ++pos_;  // '('
    SkipSpace();
    while (Peek() != ')') {
      if (Peek() == '-') Fail("negative dimension");
      if (Peek() < '0' || Peek() > '9') Fail("expected a non-negative integer");
      int64_t v = 0;
      while (Peek() >= '0' && Peek() <= '9') {
        int digit = Peek() - '0';
        if (v > (std::numeric_limits<int64_t>::max() - digit) / 10) Fail("dimension too large");
        v = v * 10 + digit;
        ++pos_;
      }
      if (Peek() == 'L') ++pos_;
      ints.push_back(v);
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
        SkipSpace();
      } else if (Peek() != ')') {
        Fail("expected ',' or ')' in tuple");
      }
    }
    ++pos_;
    return ints;
  }

  // Returns the text of a [...] or {...} value, nesting and strings included.
  std::string SkipBracketed() {
    size_t start = pos_;
    int depth = 0;
    do {
      char c = Peek();
      if (c == '\0') Fail("unterminated bracket");
      if (c == '\'' || c == '"') {
        ParseString();
        continue;
      }
      if (c == '[' || c == '{' || c == '(') ++depth;
      if (c == ']' || c == '}' || c == ')') --depth;
      ++pos_;
    } while (depth > 0);
    return s_.substr(start, pos_ - start);
  }

  const std::string& s_;
  const std::string& file_;
  size_t pos_ = 0;
};

uint32_t LoadLE(const std::string& bytes, size_t offset, size_t width) {
  uint32_t v = 0;
  for (size_t i = 0; i < width; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[offset + i])) << (8 * i);
  return v;
}

std::string PrintableBytes(const std::string& bytes, size_t n) {
  std::string out;
  static const char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < n && i < bytes.size(); ++i) {
    auto c = static_cast<uint8_t>(bytes[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// Python's repr of a tuple of ints: (), (3,), (3, 4).
std::string ShapeRepr(const Dims& dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  if (dims.size() == 1) s += ",";
  return s + ")";
}

// The header dict's text after the magic, version and length checks; sets
// data_start to the offset of the first data byte.
std::string HeaderText(const std::string& bytes, const std::string& name, size_t* data_start) {
  if (bytes.size() < kMagicLen || bytes.compare(0, kMagicLen, kMagic, kMagicLen) != 0) {
    ThrowInvalidArgument("npy file '", name, "': bad magic: expected \"\\x93NUMPY\", got \"",
                         PrintableBytes(bytes, kMagicLen), "\"");
  }
  if (bytes.size() < kMagicLen + 2) {
    ThrowDataLoss("npy file '", name, "': truncated header: file ends after ", bytes.size(), " bytes");
  }
  int major = static_cast<uint8_t>(bytes[6]);
  int minor = static_cast<uint8_t>(bytes[7]);
  if (minor != 0 || major < 1 || major > 3) {
    ThrowInvalidArgument("npy file '", name, "': unsupported format version ", major, ".", minor,
                         " (supported: 1.0, 2.0, 3.0)");
  }
  size_t len_width = major == 1 ? 2 : 4;
  size_t header_start = kMagicLen + 2 + len_width;
  if (bytes.size() < header_start) {
    ThrowDataLoss("npy file '", name, "': truncated header: file ends after ", bytes.size(), " bytes");
  }
  size_t header_len = LoadLE(bytes, kMagicLen + 2, len_width);
  if (bytes.size() - header_start < header_len) {
    ThrowDataLoss("npy file '", name, "': truncated header: header length is ", header_len, " bytes, but only ",
                  bytes.size() - header_start, " follow");
  }
  *data_start = header_start + header_len;
  return bytes.substr(header_start, header_len);
}

// The dtype and shape a parsed header dict declares, after checking its keys.
const NpyDtype& HeaderDtypeAndDims(std::map<std::string, HeaderValue>& dict, const std::string& name, Dims* dims) {
  for (const auto& [key, value] : dict) {
    if (key != "descr" && key != "fortran_order" && key != "shape") {
      ThrowInvalidArgument("npy file '", name, "': malformed header: unexpected key '", key, "'");
    }
  }
  for (const char* key : {"descr", "fortran_order", "shape"}) {
    if (dict.count(key) == 0) ThrowInvalidArgument("npy file '", name, "': malformed header: no '", key, "' key");
  }
  const HeaderValue& descr = dict["descr"];
  const HeaderValue& fortran = dict["fortran_order"];
  const HeaderValue& shape = dict["shape"];
  if (fortran.kind != HeaderValue::kBool) {
    ThrowInvalidArgument("npy file '", name, "': malformed header: 'fortran_order' must be True or False");
  }
  if (shape.kind != HeaderValue::kTuple) {
    ThrowInvalidArgument("npy file '", name, "': malformed header: 'shape' must be a tuple of ints");
  }
  if (descr.kind != HeaderValue::kString) {
    ThrowInvalidArgument("npy file '", name, "': unsupported dtype ", descr.text,
                         ": structured dtypes are not supported (supported: ", SupportedDtypes(), ")");
  }
  const NpyDtype* dtype = nullptr;
  for (const NpyDtype& d : kDtypes) {
    if (descr.text == d.descr) dtype = &d;
  }
  if (dtype == nullptr) {
    ThrowInvalidArgument("npy file '", name, "': unsupported dtype '", descr.text, "' (supported: ",
                         SupportedDtypes(), ")");
  }
  if (fortran.flag) {
    ThrowInvalidArgument("npy file '", name, "': fortran_order True is not supported (write the array in C order, ",
                         "e.g. np.ascontiguousarray)");
  }
  *dims = shape.ints;
  return *dtype;
}

// The data's byte count for dims of dtype, checked against the bytes available.
size_t CheckedDataBytes(const NpyDtype& dtype, const Dims& dims, size_t available, const std::string& name) {
  const size_t item = SizeOf(dtype.dtype);
  // Computed with overflow checks so that an absurd shape is reported as
  // too large rather than wrapping around. As NumPy does, the non-zero dims
  // must multiply to a representable size even when another dim is 0: the
  // tensor's element count is an int64 product of all of them.
  constexpr size_t kMaxBytes = static_cast<size_t>(std::numeric_limits<int64_t>::max());
  size_t nonzero = item;
  bool overflow = false, empty = false;
  for (int64_t d : dims) {
    if (d == 0) {
      empty = true;
      continue;
    }
    if (nonzero > kMaxBytes / static_cast<size_t>(d)) overflow = true;
    nonzero *= static_cast<size_t>(d);
  }
  const size_t expected = empty ? 0 : nonzero;
  if (overflow) {
    ThrowInvalidArgument("npy file '", name, "': shape ", DimsToString(dims), " is too large");
  }
  if (available < expected) {
    ThrowDataLoss("npy file '", name, "': truncated data: shape ", DimsToString(dims), " of ", dtype.descr,
                  " needs ", expected, " bytes, got ", available);
  }
  if (available > expected) {
    ThrowInvalidArgument("npy file '", name, "': trailing garbage: shape ", DimsToString(dims), " of ", dtype.descr,
                         " needs ", expected, " bytes, got ", available, " (", available - expected, " extra)");
  }
  return expected;
}

}  // namespace

Tensor ParseNpy(const std::string& bytes, const std::string& name) {
  size_t data_start = 0;
  std::string header = HeaderText(bytes, name, &data_start);
  std::map<std::string, HeaderValue> dict = HeaderParser(header, name).Parse();
  Dims dims;
  const NpyDtype& dtype = HeaderDtypeAndDims(dict, name, &dims);
  const size_t expected = CheckedDataBytes(dtype, dims, bytes.size() - data_start, name);

  Tensor t(dtype.dtype, dims);
  void* dst = t.raw_mutable_data(dtype.dtype);
  if (expected > 0) std::memcpy(dst, bytes.data() + data_start, expected);
  if (dtype.dtype == DataType::kBOOL) {
    // Any other byte would be an invalid bool object.
    const auto* b = reinterpret_cast<const uint8_t*>(bytes.data() + data_start);
    for (size_t i = 0; i < expected; ++i) {
      if (b[i] > 1) {
        ThrowInvalidArgument("npy file '", name, "': bool element ", i, " has byte value ", int{b[i]},
                             " (expected 0 or 1)");
      }
    }
  }
  return t;
}

Tensor ReadNpy(const std::string& path) { return ParseNpy(ReadFile(path), path); }

std::string NpyBytes(const Tensor& t) {
  const char* descr = nullptr;
  for (const NpyDtype& d : kDtypes) {
    if (d.dtype == t.dtype()) descr = d.descr;
  }
  KILN_CHECK(descr != nullptr, "no npy dtype for ", DataTypeName(t.dtype()));
  for (int64_t d : t.dims()) {
    if (d < 0) ThrowInvalidArgument("cannot write tensor ", t.ShapeString(), " as npy: negative dimension");
  }
  if (t.numel() > 0 && !t.initialized()) {
    ThrowInvalidArgument("cannot write tensor ", t.ShapeString(), " as npy: it holds no data");
  }

  std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " +
                     ShapeRepr(t.dims()) + ", }";
  if (!t.dims().empty()) {
    size_t digits = std::to_string(t.dims()[0]).size();
    if (digits < kGrowthAxisMaxDigits) dict.append(kGrowthAxisMaxDigits - digits, ' ');
  }
  // As np.save: the header ends with '\n' and is padded with spaces so that
  // the data starts at a multiple of 64 (a full 64 when already aligned).
  auto wrap = [&](int major) {
    size_t prefix = kMagicLen + 2 + (major == 1 ? 2 : 4);
    size_t hlen = dict.size() + 1;
    size_t pad = kArrayAlign - (prefix + hlen) % kArrayAlign;
    size_t total_len = hlen + pad;
    std::string out(kMagic, kMagicLen);
    out += static_cast<char>(major);
    out += '\0';
    for (size_t i = 0; i < prefix - kMagicLen - 2; ++i) out += static_cast<char>((total_len >> (8 * i)) & 0xff);
    out += dict;
    out.append(pad, ' ');
    out += '\n';
    return out;
  };
  std::string out = wrap(1);
  if (out.size() - 10 > 0xffff) out = wrap(2);
  if (t.bytes() > 0) out.append(static_cast<const char*>(t.raw_data()), t.bytes());
  return out;
}

void WriteNpy(const std::string& path, const Tensor& t) { WriteFileAtomic(path, NpyBytes(t)); }

}  // namespace kiln
