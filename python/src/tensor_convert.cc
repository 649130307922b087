#include "python/src/tensor_convert.h"

#include <cstring>
#include <memory>

#include "framework/error.h"
#include "python/src/binding.h"

namespace py = pybind11;

namespace kiln::python {
namespace {

py::dtype NumpyDtype(DataType dtype) { return py::dtype(NumpyDtypeName(dtype)); }

// Holds a Python object for C++ owners (a shared buffer's keeper): the last
// owner may let go on a thread without the GIL, so the release takes it.
std::shared_ptr<const void> KeepAlive(py::object obj) {
  auto* held = new py::object(std::move(obj));
  return std::shared_ptr<const void>(held, [](const void* p) {
    py::gil_scoped_acquire gil;
    delete static_cast<const py::object*>(p);
  });
}

Dims ShapeOf(const py::array& a) {
  Dims dims;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) dims.push_back(static_cast<int64_t>(a.shape(i)));
  return dims;
}

}  // namespace

Tensor TensorFromPython(const py::handle& value, DataType dtype, bool may_share, const std::string& who,
                        Binding* how) {
  const py::dtype want = NumpyDtype(dtype);
  py::array arr;
  if (py::isinstance<py::array>(value)) {
    arr = py::reinterpret_borrow<py::array>(value);
    if (!arr.dtype().is(want) && !arr.dtype().equal(want)) {
      ThrowInvalidArgument(who, ": expected dtype ", NumpyDtypeName(dtype), ", got ",
                           py::str(arr.dtype()).cast<std::string>(), " (convert with .astype('",
                           NumpyDtypeName(dtype), "'))");
    }
  } else {
    try {
      arr = py::module_::import("numpy").attr("asarray")(value, want);
    } catch (const py::error_already_set& e) {
      ThrowInvalidArgument(who, ": cannot convert ", py::repr(value).cast<std::string>(), " to a ",
                           NumpyDtypeName(dtype), " array (", e.what(), ")");
    }
  }
  const Dims dims = ShapeOf(arr);
  const bool contiguous = (arr.flags() & py::array::c_style) != 0;
  const bool aligned = reinterpret_cast<uintptr_t>(arr.data()) % SizeOf(dtype) == 0;
  if (may_share && contiguous && aligned && arr.size() > 0) {
    Tensor t;
    void* data = const_cast<void*>(arr.data());
    t.ShareAllocation(std::make_shared<Allocation>(data, static_cast<size_t>(arr.nbytes()), KeepAlive(arr)), dtype,
                      dims);
    if (how != nullptr) *how = Binding::kShared;
    return t;
  }
  py::array c = py::array::ensure(arr, py::array::c_style);
  Tensor t(dtype, dims);
  void* dst = t.raw_mutable_data(dtype);
  if (t.bytes() > 0) std::memcpy(dst, c.data(), t.bytes());
  if (how != nullptr) *how = Binding::kCopied;
  return t;
}

py::array ArrayFromTensor(const Tensor& t, bool share) {
  std::vector<py::ssize_t> shape(t.dims().begin(), t.dims().end());
  const py::dtype dtype = NumpyDtype(t.dtype());
  if (!share || t.bytes() == 0) {
    py::array out(dtype, shape);
    if (t.bytes() > 0) std::memcpy(out.mutable_data(), t.raw_data(), t.bytes());
    return out;
  }
  // The capsule owns a reference to the allocation: the buffer lives as long
  // as the array (and any view of it) does.
  auto* keep = new std::shared_ptr<Allocation>(t.allocation());
  py::capsule base(keep, [](void* p) { delete static_cast<std::shared_ptr<Allocation>*>(p); });
  return py::array(dtype, shape, {}, t.raw_data(), base);
}

}  // namespace kiln::python
