#include "framework/data/synthetic.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace kiln {
namespace {

constexpr double kInteractionScale = 2.0;
constexpr double kPi = 3.14159265358979323846;

// Standard normal samples by the Box-Muller transform on 53-bit uniforms.
class NormalSource {
 public:
  explicit NormalSource(uint64_t seed) : rng_(seed) {}
  double Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    // u1 in (0, 1] keeps log(u1) finite.
    double u1 = 1.0 - Uniform();
    double u2 = Uniform();
    double r = std::sqrt(-2.0 * std::log(u1));
    double theta = 2.0 * kPi * u2;
    spare_ = r * std::sin(theta);
    has_spare_ = true;
    return r * std::cos(theta);
  }

 private:
  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

  std::mt19937_64 rng_;
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace

SyntheticTeacher MakeSyntheticTeacher(int64_t d_model, int64_t classes, uint64_t teacher_seed) {
  if (d_model < 1 || classes < 2) {
    ThrowInvalidArgument("MakeSyntheticTeacher: need d_model >= 1, classes >= 2; got d_model=", d_model,
                         " classes=", classes);
  }
  SyntheticTeacher teacher;
  teacher.d_model = d_model;
  teacher.classes = classes;
  teacher.w1.resize(d_model * classes);
  teacher.w2.resize(d_model * classes);
  NormalSource normal(teacher_seed);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d_model));
  for (double& w : teacher.w1) w = normal.Next() * scale;
  for (double& w : teacher.w2) w = normal.Next() * scale;
  return teacher;
}

namespace {

// Row i draws from its own stream, so that any row can be made alone (a
// dataset too large to hold makes its rows a batch at a time).
uint64_t RowSeed(uint64_t seed, int64_t row) {
  uint64_t x = seed ^ (0x9e3779b97f4a7c15ULL * (static_cast<uint64_t>(row) + 1));
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

void MakeRow(uint64_t seed, int64_t row, int64_t n_values, float* x) {
  NormalSource normal(RowSeed(seed, row));
  for (int64_t i = 0; i < n_values; ++i) x[i] = static_cast<float>(normal.Next());
}

// The teacher's label of one row (the rule in synthetic.h), from the stored
// FP32 values, so a model sees exactly what the label was computed from.
int64_t TeacherLabel(const SyntheticTeacher& teacher, const float* xi, int64_t L) {
  const int64_t D = teacher.d_model, C = teacher.classes;
  std::vector<double> m(D, 0.0), c(D, 0.0), s(L);
  for (int64_t t = 0; t < L; ++t) {
    for (int64_t d = 0; d < D; ++d) m[d] += xi[t * D + d];
  }
  for (double& v : m) v /= static_cast<double>(L);
  const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(D));
  double s_max = -INFINITY;
  for (int64_t t = 1; t < L; ++t) {
    double dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(xi[d]) * xi[t * D + d];
    s[t] = dot * inv_sqrt_d;
    s_max = std::max(s_max, s[t]);
  }
  double z = 0;
  for (int64_t t = 1; t < L; ++t) z += (s[t] = std::exp(s[t] - s_max));
  for (int64_t t = 1; t < L; ++t) {
    const double a = s[t] / z;
    for (int64_t d = 0; d < D; ++d) c[d] += a * xi[t * D + d];
  }
  const double m_scale = std::sqrt(static_cast<double>(L));
  int64_t best = 0;
  double best_logit = -INFINITY;
  for (int64_t k = 0; k < C; ++k) {
    double v = 0;
    for (int64_t d = 0; d < D; ++d) {
      v += m_scale * m[d] * teacher.w1[d * C + k] + kInteractionScale * c[d] * teacher.w2[d * C + k];
    }
    if (v > best_logit) best = k, best_logit = v;
  }
  return best;
}

}  // namespace

Dataset MakeSyntheticSequences(int64_t n, int64_t seq_len, int64_t d_model, int64_t classes, uint64_t seed,
                               uint64_t teacher_seed, bool hold_features) {
  if (n < 0 || seq_len < 2 || d_model < 1 || classes < 2) {
    ThrowInvalidArgument("MakeSyntheticSequences: need n >= 0, seq_len >= 2, d_model >= 1, classes >= 2; got n=",
                         n, " seq_len=", seq_len, " d_model=", d_model, " classes=", classes);
  }
  const SyntheticTeacher teacher = MakeSyntheticTeacher(d_model, classes, teacher_seed);
  const int64_t row_values = seq_len * d_model;
  Dataset data;
  data.features = Tensor(DataType::kFP32, {n, seq_len, d_model});
  data.labels = Tensor(DataType::kINT64, {n, 1});
  int64_t* labels = data.labels.mutable_data<int64_t>();
  std::vector<float> scratch(hold_features ? 0 : static_cast<size_t>(row_values));
  float* x = hold_features ? data.features.mutable_data<float>() : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    float* xi = hold_features ? x + i * row_values : scratch.data();
    MakeRow(seed, i, row_values, xi);
    labels[i] = TeacherLabel(teacher, xi, seq_len);
  }
  if (!hold_features) {
    data.features.ReleaseBuffer();
    data.generate = [seed, row_values](int64_t row, float* out) { MakeRow(seed, row, row_values, out); };
  }
  return data;
}

}  // namespace kiln
