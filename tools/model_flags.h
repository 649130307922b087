// Building the model that --model and its flags describe (shared by kiln
// train and kiln program).
#pragma once

#include "framework/models/models.h"

namespace kiln::tools {

// Input dims follow the dataset (digits: 64 or 1x8x8, fashion-mnist: 784 or
// 1x28x28, synthetic: seq_len x d_model for the transformer, 3x32x32 for the
// resnet, seq_len + 1 token ids for gpt).
Model BuildModelFromFlags(const std::string& dataset);
// --dataset, or the model's default when empty.
std::string DatasetFromFlags();
// Whether `model` (a --model name) trains on synthetic data unless --dataset
// says otherwise: the transformer, resnet and gpt.
bool SyntheticByDefault(const std::string& model);

// kiln train --from DIR [--program P.pbtxt]: whether they are given.
bool ProgramModelFlagsSet();
// The classifier kiln import wrote to DIR (--from): its program
// (DIR/program.pbtxt unless --program names another), its one input and one
// output (DIR/model.json) and its values (DIR's .npy files), trained with
// --optimizer, --lr and --seed (BuildFromProgram). Throws InvalidArgument
// naming them when the program has several inputs or outputs, when its input
// dims do not match the dataset's samples (digits: 64 = 8x8, fashion-mnist:
// 784 = 28x28, synthetic: seq_len x d_model; matched as a count of values,
// as the built-in cnn reads digits as 1x8x8), when it has fewer classes than
// the dataset (10), when its fixed batch is not --batch_size (nor
// --eval_batch_size, when given) or meets --data_parallel, or when --model
// is given as well.
Model BuildProgramModelFromFlags(const std::string& dataset);

}  // namespace kiln::tools
