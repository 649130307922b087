// Building the model that --model and its flags describe (shared by kiln
// train and kiln program).
#pragma once

#include "framework/models/models.h"

namespace kiln::tools {

// Input dims follow the dataset (digits: 64 or 1x8x8, fashion-mnist: 784 or
// 1x28x28, synthetic: seq_len x d_model).
Model BuildModelFromFlags(const std::string& dataset);
// --dataset, or the model's default when empty.
std::string DatasetFromFlags();

}  // namespace kiln::tools
