// JitSubgraph: one cluster carved out of a program by build_jit_pass, as the
// JIT compiler stores it. The jit_launch op that replaces the cluster reads
// `inputs` (its X slot, same order) and writes `outputs` (its Out slot).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "framework/proto/framework.pb.h"

namespace kiln {

struct JitSubgraph {
  // The cluster's ops in a valid execution order and a copy of the VarDesc
  // of every var they touch, in order of first use. idx 0, parent_idx -1.
  proto::BlockDesc block;
  // Vars the cluster reads that are produced outside it (or by no op), in
  // order of first read; jit_launch's X.
  std::vector<std::string> inputs;
  // Vars written in the cluster that are needed after it (read outside,
  // fetched, or persistable), in order of write; jit_launch's Out. An
  // in-place update (sgd's ParamOut is Param) puts one name in both lists:
  // the launch op aliases the output to the input.
  std::vector<std::string> outputs;
  // Outputs whose readers after the cluster all read only their shape
  // (OpInfo::no_need_buffer): the cluster computes them in its arena and the
  // launch hands them out shape-only (dims and dtype, no buffer).
  std::vector<std::string> shape_only_outputs;
  // Inputs whose values die in the cluster: written in the program, not
  // persistable or kept, and read after it by nothing but shape readers. The
  // compiled plan may put temps in their memory after their last read; the
  // launch donates such an input when nothing else shares its buffer.
  std::vector<std::string> donatable_inputs;
};

// 16 lowercase hex digits: 64-bit FNV-1a over a deterministic serialization of
// the block, the inputs and the outputs (and the shape-only outputs and donatable inputs, if any). Equal subgraphs (same ops, attrs,
// var names and descs, same order) give equal fingerprints in every process.
inline std::string JitSubgraphFingerprint(const JitSubgraph& subgraph) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    subgraph.block.SerializeToCodedStream(&coded);
  }  // the CodedOutputStream flushes into `bytes` when destroyed
  // Length-prefixed names, so ("ab", "c") and ("a", "bc") differ.
  auto append_list = [&bytes](char tag, const std::vector<std::string>& names) {
    bytes += tag;
    bytes += std::to_string(names.size());
    for (const std::string& n : names) {
      bytes += ':';
      bytes += std::to_string(n.size());
      bytes += ':';
      bytes += n;
    }
  };
  append_list('I', subgraph.inputs);
  append_list('O', subgraph.outputs);
  if (!subgraph.shape_only_outputs.empty()) append_list('S', subgraph.shape_only_outputs);
  if (!subgraph.donatable_inputs.empty()) append_list('D', subgraph.donatable_inputs);

  uint64_t hash = 14695981039346656037ull;  // FNV-1a 64-bit offset basis
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 1099511628211ull;  // FNV-1a 64-bit prime
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, hash >>= 4) out[i] = kHex[hash & 0xf];
  return out;
}

}  // namespace kiln
