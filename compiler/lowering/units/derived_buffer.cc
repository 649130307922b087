#include "compiler/lowering/units/derived_buffer.h"

#include "compiler/kernels/onednn/batch_norm_kernels.h"
#include "framework/error.h"

namespace kiln::jit {

std::string DerivedBuffer::Name() const {
  switch (kind) {
    case DerivedKind::kNone: return var;
    case DerivedKind::kOldValue: return var + "@OLD";
    case DerivedKind::kBf16Copy: return var + "@BF16";
    case DerivedKind::kKeptLayout: return var + "@" + ActLayoutName(layout);
    case DerivedKind::kReluMask: return var + "@RELU_MASK";
    case DerivedKind::kPoolArgmax: return var + "@ARGMAX";
  }
  return var;
}

proto::VarDesc DerivedBuffer::Desc(const Cluster& c) const {
  KILN_CHECK(derived(), "DerivedBuffer::Desc: ", var, " is a var of the cluster, not a derived buffer");
  proto::VarDesc v = c.var(var);
  v.set_name(Name());
  v.set_persistable(false);
  if (dtype == DataType::kBF16) v.set_dtype(proto::BF16);
  if (kind == DerivedKind::kReluMask) {
    const Dims d = c.dims(var);
    KILN_CHECK(d.size() == 4 && c.IsF32(var));
    v.set_dtype(proto::BOOL);
    v.clear_dims();
    v.add_dims(BatchNormReluMaskBytes(layout, d));
  }
  if (kind == DerivedKind::kPoolArgmax) {  // a byte per element, grouped as `layout`
    const Dims d = c.dims(var);
    KILN_CHECK(d.size() == 4);
    v.set_dtype(proto::BOOL);
    v.clear_dims();
    for (int64_t x : ActStoredDims(layout, d)) v.add_dims(x);
  }
  if (kind == DerivedKind::kKeptLayout) {
    const Dims d = c.dims(var);
    KILN_CHECK(d.size() == 4 && c.IsF32(var));
    v.clear_dims();
    for (int64_t x : ActStoredDims(layout, d)) v.add_dims(x);
  }
  return v;
}

}  // namespace kiln::jit
