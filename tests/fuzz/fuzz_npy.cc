// Fuzzes the .npy reader (ParseNpy, what ReadNpy and checkpoints use): any
// bytes either give a tensor that fits in the file or throw
// kiln::Error; a tensor read writes back (NpyBytes) to a file that reads
// back to the same dtype, shape and bytes.
#include <cstring>

#include "framework/data/npy.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  fuzz::ExpectOnlyKilnErrors([&] {
    const Tensor t = ParseNpy(bytes, "fuzz.npy");
    // The data are the file's last bytes: a tensor bigger than the file, or
    // one without a buffer, would mean the size checks were bypassed.
    if (t.bytes() > bytes.size() || (t.bytes() > 0 && !t.initialized())) fuzz::Finding("tensor larger than the file");
    const Tensor back = ParseNpy(NpyBytes(t), "written.npy");
    if (back.dtype() != t.dtype() || back.dims() != t.dims() || back.bytes() != t.bytes() ||
        (t.bytes() > 0 && std::memcmp(back.raw_data(), t.raw_data(), t.bytes()) != 0)) {
      fuzz::Finding("NpyBytes(ParseNpy(x)) does not read back the same tensor");
    }
  });
  return 0;
}
