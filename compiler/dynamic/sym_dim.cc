#include "compiler/dynamic/sym_dim.h"

#include <limits>

namespace kiln::jit {
namespace {

using Wide = __int128;

Wide Gcd(Wide a, Wide b) {
  if (a < 0) a = -a;
  if (b < 0) b = -b;
  while (b != 0) {
    const Wide t = a % b;
    a = b;
    b = t;
  }
  return a;
}

bool FitsInt64(Wide v) {
  return v >= std::numeric_limits<int64_t>::min() && v <= std::numeric_limits<int64_t>::max();
}

// num/den reduced into a Ratio; nullopt on a zero denominator or overflow.
std::optional<Ratio> Reduce(Wide num, Wide den) {
  if (den == 0) return std::nullopt;
  if (den < 0) {
    num = -num;
    den = -den;
  }
  const Wide g = Gcd(num, den);
  if (g > 1) {
    num /= g;
    den /= g;
  }
  if (!FitsInt64(num) || !FitsInt64(den)) return std::nullopt;
  return Ratio{static_cast<int64_t>(num), static_cast<int64_t>(den)};
}

std::optional<Ratio> Sub(const Ratio& a, const Ratio& b) {
  return Reduce(Wide(a.num) * b.den - Wide(b.num) * a.den, Wide(a.den) * b.den);
}

std::optional<Ratio> Mul(const Ratio& a, const Ratio& b) {
  return Reduce(Wide(a.num) * b.num, Wide(a.den) * b.den);
}

std::optional<Ratio> Div(const Ratio& a, const Ratio& b) {
  return Reduce(Wide(a.num) * b.den, Wide(a.den) * b.num);
}

}  // namespace

std::string SymbolPositionsKey(const std::vector<Symbol>& symbols) {
  std::string out;
  for (size_t j = 0; j < symbols.size(); ++j) {
    out += j ? ";" : "";
    for (size_t k = 0; k < symbols[j].positions.size(); ++k) {
      out += (k ? "," : "") + std::to_string(symbols[j].positions[k].first) + ":" +
             std::to_string(symbols[j].positions[k].second);
    }
  }
  return out;
}

SymDim SymDim::Constant(int64_t v) {
  SymDim d;
  if (v != 0) d.terms_[0] = Ratio{v, 1};
  return d;
}

SymDim SymDim::Of(int symbol) {
  SymDim d;
  d.terms_[1u << symbol] = Ratio{1, 1};
  return d;
}

bool SymDim::IsConstant() const {
  return terms_.empty() || (terms_.size() == 1 && terms_.begin()->first == 0);
}

std::optional<int64_t> SymDim::Eval(const std::vector<int64_t>& values) const {
  // Sum over terms of num * product / den, exactly: accumulate as a fraction.
  Ratio sum{0, 1};
  for (const auto& [mask, coef] : terms_) {
    Ratio term = coef;
    for (size_t j = 0; j < values.size(); ++j) {
      if ((mask >> j) & 1u) {
        auto t = Mul(term, Ratio{values[j], 1});
        if (!t) return std::nullopt;
        term = *t;
      }
    }
    auto s = Reduce(Wide(sum.num) * term.den + Wide(term.num) * sum.den, Wide(sum.den) * term.den);
    if (!s) return std::nullopt;
    sum = *s;
  }
  if (sum.den != 1 || sum.num < 0) return std::nullopt;
  return sum.num;
}

std::string SymDim::ToString(const std::vector<Symbol>& symbols) const {
  if (terms_.empty()) return "0";
  std::string out;
  // Highest-degree monomials first: "N*S+2*N+1".
  for (auto it = terms_.rbegin(); it != terms_.rend(); ++it) {
    const auto& [mask, coef] = *it;
    std::string product;
    for (size_t j = 0; j < symbols.size(); ++j) {
      if ((mask >> j) & 1u) product += (product.empty() ? "" : "*") + symbols[j].name;
    }
    int64_t num = coef.num;
    std::string term;
    if (!out.empty()) {
      out += num < 0 ? "-" : "+";
      if (num < 0) num = -num;
    } else if (num < 0) {
      out += "-";
      num = -num;
    }
    if (product.empty()) {
      term = std::to_string(num);
    } else if (num == 1) {
      term = product;
    } else {
      term = std::to_string(num) + "*" + product;
    }
    if (coef.den != 1) term = (term.find('*') != std::string::npos ? "(" + term + ")" : term) + "/" +
                              std::to_string(coef.den);
    out += term;
  }
  return out;
}

std::vector<int64_t> GridPoint(const std::vector<std::vector<int64_t>>& values, uint32_t m) {
  std::vector<int64_t> p;
  for (size_t j = 0; j < values.size(); ++j) p.push_back(values[j][(m >> j) & 1u]);
  return p;
}

std::vector<int64_t> CheckPoint(const std::vector<std::vector<int64_t>>& values) {
  std::vector<int64_t> p;
  for (const auto& v : values) p.push_back(v[2]);
  return p;
}

std::optional<SymDim> FitSymDim(const std::vector<int64_t>& grid, const std::vector<std::vector<int64_t>>& values,
                                int64_t check) {
  const size_t k = values.size();
  if (k > static_cast<size_t>(kMaxSymbols) || grid.size() != (size_t{1} << k)) return std::nullopt;
  std::vector<Ratio> f;
  for (int64_t g : grid) f.push_back(Ratio{g, 1});
  // Along each symbol: the two values at a and b become the intercept (at
  // the point without the bit) and the slope (at the point with it). After
  // all symbols, f[m] is the coefficient of monomial m.
  for (size_t j = 0; j < k; ++j) {
    const uint32_t bit = 1u << j;
    const Ratio a{values[j][0], 1}, b{values[j][1], 1};
    const auto span = Sub(b, a);
    if (!span || span->num == 0) return std::nullopt;
    for (uint32_t m = 0; m < grid.size(); ++m) {
      if (m & bit) continue;
      const auto rise = Sub(f[m | bit], f[m]);
      if (!rise) return std::nullopt;
      const auto slope = Div(*rise, *span);
      if (!slope) return std::nullopt;
      const auto at_a = Mul(*slope, a);
      if (!at_a) return std::nullopt;
      const auto intercept = Sub(f[m], *at_a);
      if (!intercept) return std::nullopt;
      f[m] = *intercept;
      f[m | bit] = *slope;
    }
  }
  SymDim d;
  for (uint32_t m = 0; m < f.size(); ++m) {
    if (f[m].num != 0) d.terms_[m] = f[m];
  }
  // Exact at every grid point by construction; the check point rejects
  // dims that are not of this form (a max, a floor of an odd size).
  const auto at_check = d.Eval(CheckPoint(values));
  if (!at_check || *at_check != check) return std::nullopt;
  return d;
}

std::string SymbolValuesString(const std::vector<Symbol>& symbols, const std::vector<int64_t>& values) {
  std::string s;
  for (size_t j = 0; j < symbols.size() && j < values.size(); ++j) {
    s += (j ? ", " : "") + symbols[j].name + "=" + std::to_string(values[j]);
  }
  return s;
}

std::string SymDimsToString(const SymDims& dims, const std::vector<Symbol>& symbols) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? "," : "") + dims[i].ToString(symbols);
  return out + "]";
}

std::optional<Dims> EvalSymDims(const SymDims& dims, const std::vector<int64_t>& values) {
  Dims out;
  for (const SymDim& d : dims) {
    const auto v = d.Eval(values);
    if (!v) return std::nullopt;
    out.push_back(*v);
  }
  return out;
}

}  // namespace kiln::jit
