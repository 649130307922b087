// The importer's table: one converter per ONNX op type, with the opsets it
// handles, and for op types kiln cannot import, why. Internal to
// framework/onnx/.
#pragma once

#include <string>
#include <vector>

#include "framework/onnx/import_context.h"

namespace kiln::onnx_import {

// Emits the kiln ops of one node (or computes its outputs as constants), or
// refuses it through ctx.Refuse.
using ConvertFn = void (*)(NodeContext& ctx);

struct Converter {
  std::string op_type;
  int since = 1;   // opsets handled: [since, until]
  int until = 17;
  ConvertFn convert = nullptr;  // nullptr: not importable (see `missing`)
  // The outputs are constants computed from constant inputs (Shape, Range):
  // the converter runs in place of folding and refuses run-time inputs.
  bool fold_only = false;
  // Outputs depend on a random draw (training-mode Dropout): never folded.
  bool random = false;
  std::string missing;  // why kiln cannot import it
};

// An entry for a converter handling opsets [since, until].
inline Converter MakeConverter(std::string op_type, int since, ConvertFn fn, int until = 17) {
  Converter c;
  c.op_type = std::move(op_type);
  c.since = since;
  c.until = until;
  c.convert = fn;
  return c;
}

// One function per family file adds its converters.
void AddNnConverters(std::vector<Converter>* table);        // convert_nn.cc
void AddConvPoolConverters(std::vector<Converter>* table);  // convert_conv_pool.cc
void AddMathConverters(std::vector<Converter>* table);      // convert_math.cc
void AddReduceConverters(std::vector<Converter>* table);    // convert_reduce.cc
void AddShapeConverters(std::vector<Converter>* table);     // convert_shape.cc
void AddConstantConverters(std::vector<Converter>* table);  // convert_constant.cc
void AddUnaryConverters(std::vector<Converter>* table);     // convert_unary.cc
void AddTilePadConverters(std::vector<Converter>* table);   // convert_tile_pad.cc
void AddLossConverters(std::vector<Converter>* table);      // convert_loss.cc

// Every entry, sorted by op type: converters and missing ops.
const std::vector<Converter>& ConverterTable();
// The entry for `op_type`, or nullptr when the table does not name it.
const Converter* FindConverter(const std::string& op_type);

}  // namespace kiln::onnx_import
