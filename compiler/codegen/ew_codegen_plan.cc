#include "compiler/codegen/ew_codegen_plan.h"

#include <cstring>
#include <map>

#include "framework/error.h"

namespace kiln::jit {

int EwVectorRegs(Isa isa) { return isa == Isa::kAvx512 ? 32 : 16; }

namespace {

// Dead-code elimination, merging of identical instructions, stores last.
std::vector<EwInstr> Simplify(const EwProgram& program) {
  const std::vector<EwInstr>& code = program.instrs();
  std::vector<bool> live(code.size(), false);
  for (size_t i = code.size(); i-- > 0;) {
    if (code[i].op == EwOp::kStore) live[i] = true;
    if (!live[i]) continue;
    for (int a = 0; a < EwOpArity(code[i].op); ++a) live[code[i].args[a]] = true;
  }
  std::map<std::array<int64_t, 6>, int32_t> seen;
  std::vector<int32_t> remap(code.size(), -1);
  std::vector<EwInstr> body;
  std::vector<EwInstr> stores;
  for (size_t i = 0; i < code.size(); ++i) {
    if (!live[i]) continue;
    EwInstr in = code[i];
    for (int a = 0; a < EwOpArity(in.op); ++a) in.args[a] = remap[in.args[a]];
    if (in.op == EwOp::kStore) {
      stores.push_back(in);
      continue;
    }
    uint32_t bits = 0;
    std::memcpy(&bits, &in.imm, sizeof(bits));
    const std::array<int64_t, 6> key{{static_cast<int64_t>(in.op), in.args[0], in.args[1], in.args[2], in.operand,
                                      in.op == EwOp::kConst ? static_cast<int64_t>(bits) : 0}};
    auto it = seen.find(key);
    if (it != seen.end()) {
      remap[i] = it->second;
      continue;
    }
    remap[i] = static_cast<int32_t>(body.size());
    seen.emplace(key, remap[i]);
    body.push_back(in);
  }
  body.insert(body.end(), stores.begin(), stores.end());
  return body;
}

class Allocator {
 public:
  Allocator(EwKernelPlan& plan, int num_regs)
      : plan_(plan), instrs_(plan.instrs), holder_(static_cast<size_t>(num_regs), -1) {
    const size_t n = instrs_.size();
    uses_.resize(n);
    next_.assign(n, 0);
    reg_of_.assign(n, -1);
    slot_of_.assign(n, -1);
    int first_store = static_cast<int>(n);
    for (size_t i = 0; i < n; ++i) {
      if (instrs_[i].op == EwOp::kStore && first_store == static_cast<int>(n)) first_store = static_cast<int>(i);
      for (int a = 0; a < EwOpArity(instrs_[i].op); ++a) {
        std::vector<int>& u = uses_[instrs_[i].args[a]];
        if (u.empty() || u.back() != static_cast<int>(i)) u.push_back(static_cast<int>(i));
      }
    }
    // A load re-read after a store could see an in-place output's new value.
    remat_.assign(n, false);
    for (size_t v = 0; v < n; ++v) {
      const EwOp op = instrs_[v].op;
      remat_[v] = op == EwOp::kConst || (op == EwOp::kLoad && (uses_[v].empty() || uses_[v].back() < first_store));
    }
  }

  void Run() {
    for (size_t pos = 0; pos < instrs_.size(); ++pos) {
      const EwInstr& in = instrs_[pos];
      const int arity = EwOpArity(in.op);
      std::vector<int> args;
      for (int a = 0; a < arity; ++a) {
        bool dup = false;
        for (int b : args) dup |= b == in.args[a];
        if (!dup) args.push_back(in.args[a]);
      }
      for (int v : args) {
        if (reg_of_[v] >= 0) continue;
        const int r = TakeReg(args);
        EwStep s;
        if (remat_[v]) {
          s.kind = EwStep::Kind::kCompute;
          s.instr = v;
        } else {
          KILN_CHECK(slot_of_[v] >= 0, "ew plan: %", v, " is neither in a register nor spilled");
          s.kind = EwStep::Kind::kReload;
          s.slot = slot_of_[v];
        }
        s.dst = r;
        plan_.steps.push_back(s);
        reg_of_[v] = r;
        holder_[r] = v;
      }
      EwStep step;
      step.instr = static_cast<int32_t>(pos);
      for (int a = 0; a < arity; ++a) step.src[a] = reg_of_[in.args[a]];
      for (int v : args) {
        while (next_[v] < uses_[v].size() && uses_[v][next_[v]] <= static_cast<int>(pos)) ++next_[v];
        if (next_[v] == uses_[v].size()) Release(v);
      }
      if (in.op != EwOp::kStore) {
        const int r = TakeReg(args);
        step.dst = r;
        reg_of_[pos] = r;
        holder_[r] = static_cast<int>(pos);
        if (uses_[pos].empty()) Release(static_cast<int>(pos));
      }
      plan_.steps.push_back(step);
    }
  }

 private:
  void Release(int v) {
    if (reg_of_[v] >= 0) holder_[reg_of_[v]] = -1;
    reg_of_[v] = -1;
    if (slot_of_[v] >= 0) free_slots_.push_back(slot_of_[v]);
    slot_of_[v] = -1;
  }

  // A free pool register, or the one whose value is needed furthest ahead
  // (Belady), never one holding a value in `protect`.
  int TakeReg(const std::vector<int>& protect) {
    for (size_t r = 0; r < holder_.size(); ++r) {
      if (holder_[r] < 0) return static_cast<int>(r);
    }
    int best = -1;
    int best_next = -1;
    for (size_t r = 0; r < holder_.size(); ++r) {
      const int v = holder_[r];
      bool keep = false;
      for (int p : protect) keep |= p == v;
      if (keep) continue;
      const int next = next_[v] < uses_[v].size() ? uses_[v][next_[v]] : 1 << 30;
      if (next > best_next) {
        best_next = next;
        best = static_cast<int>(r);
      }
    }
    KILN_CHECK(best >= 0, "ew plan: no register to evict");
    const int v = holder_[best];
    if (!remat_[v] && slot_of_[v] < 0) {
      int slot;
      if (!free_slots_.empty()) {
        slot = free_slots_.back();
        free_slots_.pop_back();
      } else {
        slot = plan_.num_spill_slots++;
      }
      slot_of_[v] = slot;
      ++plan_.num_spills;
      EwStep s;
      s.kind = EwStep::Kind::kSpill;
      s.dst = best;
      s.slot = slot;
      plan_.steps.push_back(s);
    }
    reg_of_[v] = -1;
    holder_[best] = -1;
    return best;
  }

  EwKernelPlan& plan_;
  const std::vector<EwInstr>& instrs_;
  std::vector<int> holder_;
  std::vector<std::vector<int>> uses_;
  std::vector<size_t> next_;
  std::vector<int> reg_of_;
  std::vector<int> slot_of_;
  std::vector<bool> remat_;
  std::vector<int> free_slots_;
};

}  // namespace

EwKernelPlan PlanEwKernel(const EwProgram& program, const EwLayout& layout, int num_regs) {
  KILN_CHECK(num_regs >= 4, "ew plan: needs at least 4 pool registers, got ", num_regs);
  EwKernelPlan plan;
  plan.layout = layout;
  plan.num_regs = num_regs;
  plan.instrs = Simplify(program);
  for (size_t k = 0; k < layout.outputs.size(); ++k) {
    if (layout.IsInnerReduction(static_cast<int>(k))) plan.inner_reduction_outputs.push_back(static_cast<int>(k));
  }
  Allocator(plan, num_regs).Run();
  return plan;
}

}  // namespace kiln::jit
