// Fuzzes the digits CSV reader (LoadDigitsCsv) through a scratch file
// (plain, or gzip when the input is a gzip stream): any file either loads or
// throws kiln::Error; what loads has pixels in [0, 1] and labels in 0-9.
#include "framework/data/digits.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  const std::string path = fuzz::WriteScratch("fuzz.csv", std::string(reinterpret_cast<const char*>(data), size));
  fuzz::ExpectOnlyKilnErrors([&] {
    const Dataset d = LoadDigitsCsv(path);
    if (d.features.dims() != Dims{d.labels.dim(0), kDigitsPixels}) fuzz::Finding("features and labels disagree");
    const float* f = d.features.data<float>();
    for (int64_t i = 0; i < d.features.numel(); ++i) {
      if (!(f[i] >= 0.0f && f[i] <= 1.0f)) fuzz::Finding("a pixel outside [0, 1] was accepted");
    }
    const int64_t* l = d.labels.data<int64_t>();
    for (int64_t i = 0; i < d.labels.numel(); ++i) {
      if (l[i] < 0 || l[i] >= kDigitsClasses) fuzz::Finding("a label outside 0-9 was accepted");
    }
  });
  return 0;
}
