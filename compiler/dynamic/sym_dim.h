// Symbolic dims of a compiled object that serves every value of some input
// dims (issue 32's dynamic shapes): a dim is a polynomial in the symbols (the
// batch N, the sequence S, ...) that is linear in each symbol, with rational
// coefficients: 128, N, N*S, 4*S, S/2, N*S + 2*N. That covers what shape
// inference does with a size: products, sums and divisions by constants.
//
// Symbolic dims are found by evaluation, not by a second shape function per
// op: the same dim is computed at the 2^k points of a grid (every symbol at
// two values) and fitted exactly, then checked at a third value of every
// symbol (FitSymDim). A dim that is not such a polynomial (a floor division
// of an odd size, a max) fails the fit or the check, and the caller keeps
// that shape specialised: a fit is never a guess.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "framework/tensor.h"

namespace kiln::jit {

// A reduced fraction num/den, den > 0.
struct Ratio {
  int64_t num = 0;
  int64_t den = 1;
  bool operator==(const Ratio& o) const { return num == o.num && den == o.den; }
};

// The most symbols one compiled object has (the grid has 2^k points).
constexpr int kMaxSymbols = 3;

// One symbol of a compiled object: its name and the cluster input dims it
// stands for, (input index, axis); all of them hold its value.
struct Symbol {
  std::string name;
  std::vector<std::pair<int, int>> positions;
  bool operator==(const Symbol& o) const { return name == o.name && positions == o.positions; }
};

// "0:1,1:1" for symbols at (input 0, axis 1) and (input 1, axis 1); ";"
// between symbols. Names left out: equal for the same positions.
std::string SymbolPositionsKey(const std::vector<Symbol>& symbols);

// sum over monomials of coefficient * product of the symbols in the
// monomial's bit mask (bit j = symbol j). Zero coefficients are left out; the
// empty map is the constant 0.
class SymDim {
 public:
  SymDim() = default;
  static SymDim Constant(int64_t v);
  static SymDim Of(int symbol);  // the symbol itself

  const std::map<uint32_t, Ratio>& terms() const { return terms_; }
  bool IsConstant() const;
  // The value at `values` (one per symbol); nullopt when it is not a
  // non-negative integer there or does not fit in 64 bits.
  std::optional<int64_t> Eval(const std::vector<int64_t>& values) const;
  // "128", "N", "N*S", "4*S", "S/2", "N*S+2*N", "(3*S)/2".
  std::string ToString(const std::vector<Symbol>& symbols) const;
  bool operator==(const SymDim& o) const { return terms_ == o.terms_; }

 private:
  friend std::optional<SymDim> FitSymDim(const std::vector<int64_t>&, const std::vector<std::vector<int64_t>>&,
                                         int64_t);
  std::map<uint32_t, Ratio> terms_;
};
using SymDims = std::vector<SymDim>;

// The symbol values of grid point `m` (bit j of m: symbol j at its second
// value) and of the check point (index 2), from `values[j]` = the three
// values of symbol j.
std::vector<int64_t> GridPoint(const std::vector<std::vector<int64_t>>& values, uint32_t m);
std::vector<int64_t> CheckPoint(const std::vector<std::vector<int64_t>>& values);

// Fits one dim: `grid[m]` is its value at GridPoint(values, m) (2^k of
// them), `check` its value at CheckPoint(values). nullopt when no polynomial
// linear in each symbol gives all of them (or the arithmetic overflows).
std::optional<SymDim> FitSymDim(const std::vector<int64_t>& grid, const std::vector<std::vector<int64_t>>& values,
                                int64_t check);

// "N=3, S=16": the symbols at `values` (one per symbol).
std::string SymbolValuesString(const std::vector<Symbol>& symbols, const std::vector<int64_t>& values);

// "[N,S,128]".
std::string SymDimsToString(const SymDims& dims, const std::vector<Symbol>& symbols);
// The dims at `values`; nullopt when a dim does not evaluate (see Eval).
std::optional<Dims> EvalSymDims(const SymDims& dims, const std::vector<int64_t>& values);

}  // namespace kiln::jit
