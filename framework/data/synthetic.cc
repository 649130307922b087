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

Dataset MakeSyntheticSequences(int64_t n, int64_t seq_len, int64_t d_model, int64_t classes, uint64_t seed,
                               uint64_t teacher_seed) {
  if (n < 0 || seq_len < 2 || d_model < 1 || classes < 2) {
    ThrowInvalidArgument("MakeSyntheticSequences: need n >= 0, seq_len >= 2, d_model >= 1, classes >= 2; got n=",
                         n, " seq_len=", seq_len, " d_model=", d_model, " classes=", classes);
  }
  const int64_t L = seq_len;
  const int64_t D = d_model;
  const int64_t C = classes;

  const SyntheticTeacher teacher = MakeSyntheticTeacher(D, C, teacher_seed);
  const std::vector<double>& w1 = teacher.w1;
  const std::vector<double>& w2 = teacher.w2;

  Dataset data;
  data.features = Tensor(DataType::kFP32, {n, L, D});
  data.labels = Tensor(DataType::kINT64, {n, 1});
  float* x = data.features.mutable_data<float>();
  int64_t* labels = data.labels.mutable_data<int64_t>();
  NormalSource normal(seed);
  for (int64_t i = 0; i < n * L * D; ++i) x[i] = static_cast<float>(normal.Next());

  // The teacher reads the stored FP32 values, so a model sees exactly what
  // the labels were computed from.
  std::vector<double> m(D), c(D), s(L), logits(C);
  const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(D));
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * L * D;
    std::fill(m.begin(), m.end(), 0.0);
    for (int64_t t = 0; t < L; ++t) {
      for (int64_t d = 0; d < D; ++d) m[d] += xi[t * D + d];
    }
    for (double& v : m) v /= static_cast<double>(L);

    double s_max = -INFINITY;
    for (int64_t t = 1; t < L; ++t) {
      double dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(xi[d]) * xi[t * D + d];
      s[t] = dot * inv_sqrt_d;
      s_max = std::max(s_max, s[t]);
    }
    double z = 0;
    for (int64_t t = 1; t < L; ++t) z += (s[t] = std::exp(s[t] - s_max));
    std::fill(c.begin(), c.end(), 0.0);
    for (int64_t t = 1; t < L; ++t) {
      const double a = s[t] / z;
      for (int64_t d = 0; d < D; ++d) c[d] += a * xi[t * D + d];
    }

    const double m_scale = std::sqrt(static_cast<double>(L));
    int64_t best = 0;
    for (int64_t k = 0; k < C; ++k) {
      double v = 0;
      for (int64_t d = 0; d < D; ++d) v += m_scale * m[d] * w1[d * C + k] + kInteractionScale * c[d] * w2[d * C + k];
      logits[k] = v;
      if (v > logits[best]) best = k;
    }
    labels[i] = best;
  }
  return data;
}

}  // namespace kiln
