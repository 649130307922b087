// ReorderNote's text, and the notes of oneDNN reorders (onednn_handler.h).
#include "framework/onednn/reorder_note.h"

#include <algorithm>

#include "framework/allocator.h"
#include "framework/error.h"
#include "framework/onednn/onednn_handler.h"
#include "oneapi/dnnl/dnnl_debug.h"

namespace kiln::onednn {

std::string ReorderNote::ToString() const {
  return StrCat(arg, output ? " out: " : " in: ", from, " -> ", to, " ", DimsToString(dims), " ", bytes_read,
                " -> ", bytes_written, " B (", primitive, ")");
}

void ReorderTotals::Add(const ReorderNote& r) {
  ++count;
  bytes_read += r.bytes_read;
  bytes_written += r.bytes_written;
}

void ReorderTotals::Add(const ReorderTotals& t) {
  count += t.count;
  bytes_read += t.bytes_read;
  bytes_written += t.bytes_written;
}

std::string ReorderTotals::ToString() const {
  if (count == 0) return "no reorders";
  return StrCat(count, count == 1 ? " reorder, " : " reorders, ", FormatBytes(static_cast<size_t>(bytes_read)),
                " read, ", FormatBytes(static_cast<size_t>(bytes_written)), " written");
}

std::string ArgName(int arg) {
  switch (arg) {
    case DNNL_ARG_SRC: return "src";
    case DNNL_ARG_SRC_1: return "src_1";
    case DNNL_ARG_WEIGHTS: return "weights";
    case DNNL_ARG_BIAS: return "bias";
    case DNNL_ARG_DST: return "dst";
    case DNNL_ARG_DIFF_SRC: return "diff_src";
    case DNNL_ARG_DIFF_WEIGHTS: return "diff_weights";
    case DNNL_ARG_DIFF_BIAS: return "diff_bias";
    case DNNL_ARG_DIFF_DST: return "diff_dst";
    default: return "arg " + std::to_string(arg);
  }
}

// As oneDNN's verbose mode writes a blocked descriptor's tag (md2fmt_tag_str
// in its src/common/verbose.cpp): one letter per dim, outermost first by
// stride (ties: the larger outer block first), upper case for a dim that is
// also blocked inside, then the inner blocks ("16b": 16 of dim b).
std::string MemoryDescTag(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  const std::string type = dnnl_dt2str(d.data_type);
  if (d.format_kind == dnnl_format_kind_any) return type + ":any";
  if (d.format_kind != dnnl_blocked) return type + ":" + dnnl_fmt_kind2str(d.format_kind);
  const dnnl_blocking_desc_t& blk = d.format_desc.blocking;
  std::vector<int64_t> inner(d.ndims, 1);
  for (int i = 0; i < blk.inner_nblks; ++i) inner[blk.inner_idxs[i]] *= blk.inner_blks[i];
  struct Axis {
    int64_t stride;
    int64_t outer;
    char letter;
  };
  std::vector<Axis> axes;
  for (int k = 0; k < d.ndims; ++k) {
    axes.push_back({blk.strides[k], d.padded_dims[k] / inner[k], static_cast<char>((inner[k] == 1 ? 'a' : 'A') + k)});
  }
  std::stable_sort(axes.begin(), axes.end(), [](const Axis& a, const Axis& b) {
    return a.stride != b.stride ? a.stride > b.stride : a.outer > b.outer;
  });
  std::string tag;
  for (const Axis& a : axes) tag += a.letter;
  for (int i = 0; i < blk.inner_nblks; ++i) {
    tag += std::to_string(blk.inner_blks[i]) + static_cast<char>('a' + blk.inner_idxs[i]);
  }
  return type + ":" + tag;
}

std::string PrimitiveLabel(const dnnl::primitive_desc_base& pd) {
  std::string label = dnnl_prim_kind2str(dnnl::convert_to_c(pd.get_kind()));
  dnnl_prop_kind_t prop = dnnl_prop_kind_undef;
  // Kinds without a propagation kind (matmul, binary, reorder) refuse the query.
  if (dnnl_primitive_desc_query(pd.get(), dnnl_query_prop_kind, 0, &prop) == dnnl_success &&
      prop != dnnl_prop_kind_undef) {
    label += std::string(" ") + dnnl_prop_kind2str(prop);
  }
  return label;
}

ReorderNote NoteOf(const dnnl::memory::desc& from, const dnnl::memory::desc& to, int arg, bool output,
                   const std::string& primitive) {
  ReorderNote r;
  r.primitive = primitive;
  r.arg = ArgName(arg);
  r.output = output;
  r.from = MemoryDescTag(from);
  r.to = MemoryDescTag(to);
  r.dims = Dims(from.data.dims, from.data.dims + from.data.ndims);
  r.bytes_read = static_cast<int64_t>(from.get_size());
  r.bytes_written = static_cast<int64_t>(to.get_size());
  return r;
}

std::vector<ReorderNote> EntryReorders(const PrimitiveEntry& entry) {
  std::vector<ReorderNote> notes;
  if (entry.reorders.empty()) return notes;
  const std::string primitive = PrimitiveLabel(entry.pd);
  for (bool outputs : {false, true}) {
    for (const ArgReorder& r : entry.reorders) {
      if (r.output != outputs) continue;
      notes.push_back(r.output ? NoteOf(r.prim_md, r.user_md, r.arg, true, primitive)
                               : NoteOf(r.user_md, r.prim_md, r.arg, false, primitive));
    }
  }
  return notes;
}

}  // namespace kiln::onednn
