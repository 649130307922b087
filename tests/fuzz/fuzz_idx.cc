// Fuzzes the IDX reader through its file entry points (ReadIdx via
// LoadIdxImages and LoadIdxLabels), so that the gzip layer is fuzzed too:
// the input is written to a scratch file, plain or, when it starts with the
// gzip magic, as the gzip stream it is. Any file either loads or throws
// kiln::Error; what loads has as many elements as its dims say.
#include "framework/data/idx.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  const std::string path = fuzz::WriteScratch("fuzz.idx", std::string(reinterpret_cast<const char*>(data), size));
  fuzz::ExpectOnlyKilnErrors([&] {
    const Tensor images = LoadIdxImages(path);
    if (images.dims().size() != 4 || images.dims()[1] != 1) fuzz::Finding("images are not [N, 1, rows, cols]");
  });
  fuzz::ExpectOnlyKilnErrors([&] {
    const Tensor labels = LoadIdxLabels(path, 10);
    const int64_t* l = labels.data<int64_t>();
    for (int64_t i = 0; i < labels.numel(); ++i) {
      if (l[i] < 0 || l[i] >= 10) fuzz::Finding("a label outside 0-9 was accepted");
    }
  });
  return 0;
}
