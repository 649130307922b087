// kiln._kiln datasets: the C++ loaders (their file checks and error
// messages) for Python, as numpy arrays, plus kiln's reproducible shuffle.
#include <pybind11/stl.h>

#include <string>

#include "framework/data/dataset.h"
#include "framework/data/digits.h"
#include "framework/data/idx.h"
#include "python/src/binding.h"
#include "python/src/tensor_convert.h"

namespace py = pybind11;

namespace kiln::python {
namespace {

// ((train features, train labels), (test features, test labels)); the
// arrays own their buffers (the dataset's tensors go away here).
py::tuple Arrays(const TrainTest& data) {
  auto pair = [](const Dataset& d) {
    return py::make_tuple(ArrayFromTensor(d.features, /*share=*/true), ArrayFromTensor(d.labels, /*share=*/true));
  };
  return py::make_tuple(pair(data.train), pair(data.test));
}

}  // namespace

void BindDatasets(py::module_& m) {
  m.def(
      "load_fashion_mnist", [](const std::string& dir) { return Arrays(LoadFashionMnist(dir)); },
      py::arg("dir") = std::string(kDefaultFashionMnistDir));
  m.def(
      "load_digits",
      [](const std::string& path, uint64_t seed, double train_fraction) {
        return Arrays(LoadDigits(path.empty() ? DefaultDigitsPath() : path, seed, train_fraction));
      },
      py::arg("path") = "", py::arg("seed") = 1, py::arg("train_fraction") = 0.8);
  m.def("shuffled_indices", &ShuffledIndices, py::arg("n"), py::arg("seed"));
}

}  // namespace kiln::python
