// kiln._kiln.DataLoader: the C++ DataLoader (framework/data/data_loader.h)
// over numpy arrays, for kiln.io.DataLoader. A C-contiguous, aligned array is
// shared, not copied (others are copied once, here); each batch is gathered
// into new kiln buffers on the loader's threads, and the arrays returned view
// those buffers without a further copy. Waiting for a batch, starting and
// stopping an epoch release the GIL; the loader's threads never take it.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <mutex>
#include <string>
#include <vector>

#include "framework/data/data_loader.h"
#include "framework/error.h"
#include "python/src/binding.h"
#include "python/src/tensor_convert.h"

namespace py = pybind11;

namespace kiln::python {
namespace {

constexpr const char* kWho = "kiln.io.DataLoader";

std::vector<Tensor> TensorsOf(const py::sequence& arrays) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < arrays.size(); ++i) {
    const py::object item = arrays[i];
    const std::string who = StrCat(kWho, ": arrays[", i, "]");
    if (!py::isinstance<py::array>(item)) {
      const std::string type = py::str(py::type::of(item).attr("__name__")).cast<std::string>();
      throw py::type_error(who + ": expected a numpy array, got " + type);
    }
    const std::string dtype = py::str(py::reinterpret_borrow<py::array>(item).dtype()).cast<std::string>();
    const auto kind = DataTypeFromNumpyName(dtype);
    if (!kind) {
      ThrowInvalidArgument(who, ": dtype ", dtype, " is not one kiln holds: expected float32, float64, int64, int32 or ",
                           "bool (convert with .astype)");
    }
    out.push_back(TensorFromPython(item, *kind, /*may_share=*/true, who));
  }
  return out;
}

// One Python thread at a time drives the loader (the C++ class has one
// caller); the lock is taken with the GIL released.
class NativeLoader {
 public:
  NativeLoader(const py::sequence& arrays, DataLoaderOptions options) : loader_(TensorsOf(arrays), options) {}

  void StartEpoch(int64_t epoch, int64_t first_batch) {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    loader_.StartEpoch(epoch, first_batch);
  }
  // A tuple of arrays, or None when the epoch is over.
  py::object Next() {
    std::vector<Tensor> batch;
    bool more = false;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      more = loader_.Next(&batch);
    }
    if (!more) return py::none();
    py::tuple out(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) out[i] = ArrayFromTensor(batch[i], /*share=*/true);
    return std::move(out);
  }
  void Stop() {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    loader_.Stop();
  }
  const DataLoader& loader() const { return loader_; }

 private:
  std::mutex mu_;
  DataLoader loader_;
};

}  // namespace

void BindDataLoader(py::module_& m) {
  py::class_<NativeLoader>(m, "DataLoader")
      .def(py::init([](const py::sequence& arrays, int64_t batch_size, bool shuffle, bool drop_last, int num_workers,
                       uint64_t seed, int prefetch_factor) {
             DataLoaderOptions o;
             o.batcher.batch_size = batch_size;
             o.batcher.shuffle = shuffle;
             o.batcher.drop_last = drop_last;
             o.batcher.seed = seed;
             o.num_workers = num_workers;
             o.prefetch_factor = prefetch_factor;
             return new NativeLoader(arrays, o);
           }),
           py::arg("arrays"), py::arg("batch_size"), py::arg("shuffle"), py::arg("drop_last"),
           py::arg("num_workers"), py::arg("seed"), py::arg("prefetch_factor"))
      .def("start_epoch", &NativeLoader::StartEpoch, py::arg("epoch"), py::arg("first_batch") = 0)
      .def("next", &NativeLoader::Next)
      .def("stop", &NativeLoader::Stop)
      .def("__len__", [](const NativeLoader& l) { return l.loader().num_batches(); })
      .def_property_readonly("rows", [](const NativeLoader& l) { return l.loader().rows(); })
      .def_property_readonly("running_workers", [](const NativeLoader& l) { return l.loader().running_workers(); });
  m.def("epoch_seed", &Batcher::EpochSeed, py::arg("seed"), py::arg("epoch"));
}

}  // namespace kiln::python
