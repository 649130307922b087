#include "framework/shape_util.h"

namespace kiln {

bool DimsCompatible(const Dims& a, const Dims& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!DimCompatible(a[i], b[i])) return false;
  }
  return true;
}

Dims BroadcastYDims(const Dims& x, const Dims& y, int64_t axis, const std::string& who) {
  const int64_t xr = static_cast<int64_t>(x.size());
  const int64_t yr = static_cast<int64_t>(y.size());
  if (yr > xr) {
    ThrowInvalidArgument(who, ": Y ", DimsToString(y), " has higher rank than X ", DimsToString(x));
  }
  const int64_t start = axis < 0 ? xr - yr : axis;
  if (start < 0 || start + yr > xr) {
    ThrowInvalidArgument(who, ": axis ", axis, " places Y ", DimsToString(y), " outside X ", DimsToString(x));
  }
  Dims out(x.size(), 1);
  for (int64_t k = 0; k < yr; ++k) {
    const int64_t xd = x[start + k];
    const int64_t yd = y[k];
    if (yd != 1 && !DimCompatible(xd, yd)) {
      ThrowInvalidArgument(who, ": Y ", DimsToString(y), " does not broadcast into X ", DimsToString(x),
                           " at axis ", start, " (dim ", k, " of Y is ", yd, ", X has ", xd, ")");
    }
    out[start + k] = yd;
  }
  return out;
}

std::vector<int64_t> Strides(const Dims& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * dims[i + 1];
  return s;
}

int64_t NormalizeAxis(int64_t axis, size_t rank, const std::string& who) {
  const int64_t r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) ThrowInvalidArgument(who, ": axis ", axis, " is out of range for rank ", r);
  return axis < 0 ? axis + r : axis;
}

}  // namespace kiln
