// A seeded synthetic sequence-classification task for transformer encoders.
//
// Features x: FP32 [n, seq_len, d_model], i.i.d. standard normal.
// Labels: INT64 [n, 1] from a fixed random teacher with weights W1, W2
// (d_model x classes, entries N(0, 1/d_model), drawn from teacher_seed):
//   m      = mean over all positions t of x[t]
//   s[t]   = x[0] . x[t] / sqrt(d_model)          for t = 1 .. seq_len-1
//   a      = softmax(s)                            (over t = 1 .. seq_len-1)
//   c      = sum_t a[t] * x[t]                     (first token attending to the others)
//   logits = sqrt(seq_len) * m @ W1 + 2 * c @ W2
//   label  = argmax logits (lowest index on ties)
// The first term is what mean pooling sees; the second needs the query-key
// interaction of token 0 with the rest, which one attention layer (plus an
// FFN for the argmax) can express but a linear model on x cannot: with
// seq_len 8, d_model 16, 4 classes a least-squares linear probe (or softmax
// regression) on the flattened x reaches about 78% while the labels are
// exact. The factor 2 makes the labels agree with either term alone only
// about 60% of the time.
//
// Deterministic: the same arguments give the same data. The random bits are
// the same on every platform (std::mt19937_64 and a hand-written Box-Muller
// transform, no implementation-defined std:: distributions); values can
// differ in the last bit only where another libm rounds log/sin/cos/exp
// differently. Calls with different `seed`s but the same teacher_seed are
// independent samples of the same task (one seed for training data, another
// for test data).
#pragma once

#include <cstdint>
#include <vector>

#include "framework/data/dataset.h"

namespace kiln {

constexpr uint64_t kSyntheticTeacherSeed = 0x6b696c6e5f746561ULL;

// The teacher's weights, row-major [d_model, classes]; drawn from
// teacher_seed as w1 then w2. Exposed so tests can check the rule above.
struct SyntheticTeacher {
  int64_t d_model = 0;
  int64_t classes = 0;
  std::vector<double> w1;
  std::vector<double> w2;
};
SyntheticTeacher MakeSyntheticTeacher(int64_t d_model, int64_t classes,
                                      uint64_t teacher_seed = kSyntheticTeacherSeed);

// Requires n >= 0, seq_len >= 2, d_model >= 1, classes >= 2 (InvalidArgument
// otherwise). Row i's features come from a stream of its own (seeded by
// `seed` and i), so with hold_features false the dataset keeps only the
// labels and makes each row when a batch asks for it (Dataset::generate):
// the same values, without holding n * seq_len * d_model floats.
Dataset MakeSyntheticSequences(int64_t n, int64_t seq_len, int64_t d_model, int64_t classes, uint64_t seed,
                               uint64_t teacher_seed = kSyntheticTeacherSeed, bool hold_features = true);

}  // namespace kiln
