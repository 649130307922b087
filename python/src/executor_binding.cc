// kiln._kiln.Executor and Scope: running programs from Python. A program is
// transformed by the production pass pipeline (the JIT when the executor
// has it on) and prepared once per (program version, feeds, fetches, flags)
// and run with the GIL released. Feeds and fetches cross without copies
// where that is safe (tensor_convert.h).
#include <pybind11/stl.h>

#include <algorithm>
#include <list>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "compiler/jit_compiler.h"
#include "framework/executor.h"
#include "framework/feed_check.h"
#include "framework/flags.h"
#include "framework/op_desc.h"
#include "python/src/binding.h"
#include "python/src/flags_state.h"
#include "python/src/tensor_convert.h"
#include "tools/pipeline_setup.h"

namespace py = pybind11;

namespace kiln::python {
namespace {

// The non-persistable vars one run feeds; cleared from the scope when the
// run ends, whether it succeeded or raised.
class FedVars {
 public:
  explicit FedVars(Scope& scope) : scope_(scope) {}
  FedVars(const FedVars&) = delete;
  FedVars& operator=(const FedVars&) = delete;
  ~FedVars() {
    for (const auto& name : names_) {
      if (Variable* v = scope_.FindVar(name)) v->GetMutable()->Clear();
    }
  }
  void Add(const std::string& name) { names_.insert(name); }
  const std::set<std::string>& names() const { return names_; }

 private:
  Scope& scope_;
  std::set<std::string> names_;
};

// The ops of a program that initialise a persistable var (the first op to
// touch it writes it without reading it: a startup program's fill_constant
// and uniform_random), split by what the scope holds: `skipped_ops` would
// overwrite a value another program initialised, or one that was loaded or
// set; `ran` are the others, (op index, var).
struct Initialisers {
  std::vector<int> skipped_ops;
  std::vector<std::pair<int, std::string>> ran;
};

std::vector<std::pair<int, std::string>> InitialiserOps(const proto::BlockDesc& block) {
  std::set<std::string> touched;
  std::vector<std::pair<int, std::string>> out;
  for (int i = 0; i < block.ops_size(); ++i) {
    const std::vector<std::string> ins = AllInputArgs(block.ops(i)), outs = AllOutputArgs(block.ops(i));
    for (const auto& o : outs) {
      const proto::VarDesc* v = FindVarDesc(block, o);
      if (v == nullptr || !v->persistable() || touched.count(o)) continue;
      if (std::find(ins.begin(), ins.end(), o) == ins.end()) out.emplace_back(i, o);
    }
    touched.insert(ins.begin(), ins.end());
    touched.insert(outs.begin(), outs.end());
  }
  return out;
}

// Running a startup program never overwrites what another program trained:
// its initialisers of vars the scope holds from elsewhere are skipped, with
// a warning naming them. Running the same startup program again does
// initialise them again (as in Paddle).
Initialisers KeptByScope(const std::vector<std::pair<int, std::string>>& initialisers, int64_t program_id,
                         const Scope& scope) {
  Initialisers out;
  std::map<int, bool> skip;  // op -> every var it initialises is kept
  std::vector<std::string> kept;
  for (const auto& [op, name] : initialisers) {
    const Variable* v = scope.FindVar(name);
    const bool keep = v != nullptr && v->Get().initialized() && v->origin() != program_id;
    auto it = skip.emplace(op, true).first;
    it->second = it->second && keep;
    if (keep) kept.push_back(name);
    out.ran.emplace_back(op, name);
  }
  for (const auto& [op, keep] : skip) {
    if (keep) out.skipped_ops.push_back(op);
  }
  out.ran.erase(std::remove_if(out.ran.begin(), out.ran.end(),
                               [&skip](const auto& r) { return skip.at(r.first); }),
                out.ran.end());
  if (!kept.empty()) {
    std::string names;
    for (size_t i = 0; i < kept.size() && i < 4; ++i) names += (i ? ", '" : "'") + kept[i] + "'";
    if (kept.size() > 4) names += " and " + std::to_string(kept.size() - 4) + " more";
    const std::string msg = "kiln: this run keeps " + names +
                            " as the scope holds them: another program initialised, trained or loaded them, and a "
                            "startup program never overwrites that. To initialise them again, erase them "
                            "(scope.erase(name)) or run in a fresh kiln.Scope()";
    if (PyErr_WarnEx(PyExc_UserWarning, msg.c_str(), 1) != 0) throw py::error_already_set();
  }
  return out;
}

Scope& GlobalScope() {
  static Scope* scope = new Scope();  // never destroyed: Python may hold arrays into it at exit
  return *scope;
}

class Executor {
 public:
  // What crossed without a copy, and how often a prepared plan was reused.
  struct Stats {
    int64_t feeds_shared = 0, feeds_copied = 0;
    int64_t fetches_shared = 0, fetches_copied = 0;
    int64_t plans_prepared = 0, plan_hits = 0;
  };

  explicit Executor(std::optional<bool> use_jit) : use_jit_(use_jit) {}

  bool use_jit() const { return use_jit_.value_or(FLAGS_use_jit); }
  const Stats& stats() const { return stats_; }

  py::list Run(Program& program, const py::dict& feed, const std::vector<std::string>& fetch, Scope& scope) {
    // One run at a time per executor (its plans are bound to a scope while
    // they run). Wait without the GIL: the run holding the lock needs it to
    // finish.
    std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
    {
      py::gil_scoped_release release;
      lock.lock();
    }
    const proto::BlockDesc& block = program.desc().blocks(0);
    for (const auto& f : fetch) {
      RequireVarDesc(block, f, "fetch");
    }
    // Fed vars belong to this run: let go of them however it ends (a feed
    // left from a failed run must not stand in for a missing one).
    FedVars fed(scope);
    for (const auto& [k, value] : feed) {
      const std::string name = k.cast<std::string>();
      const proto::VarDesc* v = &RequireVarDesc(block, name, "feed");
      // A persistable var is updated in place by the program (optimizer
      // state, parameters): it gets a copy, never the caller's memory.
      Binding how;
      Tensor t = TensorFromPython(value, FromProto(v->dtype()), !v->persistable(), "feed '" + name + "'", &how);
      if (!v->persistable()) fed.Add(name);
      FeedTensor(block, scope, name, t, /*share=*/true);  // checks dims
      ++(how == Binding::kShared ? stats_.feeds_shared : stats_.feeds_copied);
    }
    const Facts& facts = FactsOf(program);
    CheckFeeds(facts.required_feeds, fed.names());
    const Initialisers skip = KeptByScope(facts.initialisers, program.id(), scope);
    Prepared& prepared = Prepare(program, fed.names(), fetch, skip.skipped_ops);
    {
      py::gil_scoped_release release;
      kiln::Executor exec(ExecutorOptionsFromFlags());
      exec.Run(*prepared.plan, scope);
    }
    for (const auto& [op, var] : skip.ran) scope.Var(var)->set_origin(program.id());
    py::list out;
    std::map<std::string, py::array> fetched;  // a name fetched twice is one array
    for (const auto& f : fetch) {
      auto it = fetched.find(f);
      if (it == fetched.end()) {
        it = fetched.emplace(f, Fetch(block, scope, f, fed.names().count(f) > 0, &stats_)).first;
      }
      out.append(it->second);
    }
    return out;
  }

 private:
  struct Prepared {
    proto::ProgramDesc program;
    std::unique_ptr<ExecutionPlan> plan;
  };
  using Key = std::tuple<int64_t, int64_t, std::set<std::string>, std::vector<std::string>, int64_t, bool,
                         std::vector<int>>;

  // What a run checks before it starts, per program version.
  struct Facts {
    std::vector<std::string> required_feeds;
    std::vector<std::pair<int, std::string>> initialisers;
  };
  const Facts& FactsOf(const Program& program) {
    const std::pair<int64_t, int64_t> key{program.id(), program.version()};
    for (auto it = facts_.begin(); it != facts_.end(); ++it) {
      if (it->first != key) continue;
      facts_.splice(facts_.begin(), facts_, it);
      return facts_.front().second;
    }
    const proto::BlockDesc& block = program.desc().blocks(0);
    facts_.emplace_front(key, Facts{RequiredFeeds(block), InitialiserOps(block)});
    if (facts_.size() > kCacheSize) facts_.pop_back();
    return facts_.front().second;
  }

  // `skip`: ops left out (initialisers of vars the scope keeps).
  Prepared& Prepare(const Program& program, const std::set<std::string>& fed, const std::vector<std::string>& fetch,
                    const std::vector<int>& skip) {
    const bool jit = use_jit();
    Key key{program.id(), program.version(), fed, fetch, FlagsGeneration(), jit, skip};
    for (auto it = cache_.begin(); it != cache_.end(); ++it) {
      if (it->first != key) continue;
      cache_.splice(cache_.begin(), cache_, it);
      ++stats_.plan_hits;
      return *cache_.front().second;
    }
    ++stats_.plans_prepared;
    std::set<std::string> keep(fed.begin(), fed.end());
    keep.insert(fetch.begin(), fetch.end());
    PipelineOptions options = tools::PipelineOptionsFromFlags(keep);
    options.build_jit = jit;
    auto p = std::make_unique<Prepared>();
    proto::ProgramDesc source = program.desc();
    for (auto it = skip.rbegin(); it != skip.rend(); ++it) source.mutable_blocks(0)->mutable_ops()->DeleteSubrange(*it, 1);
    p->program = RunPipeline(source, options);
    p->plan = kiln::Executor(ExecutorOptionsFromFlags()).Prepare(p->program, 0, {fetch.begin(), fetch.end()});
    cache_.emplace_front(key, std::move(p));
    if (cache_.size() > kCacheSize) cache_.pop_back();
    return *cache_.front().second;
  }

  // A fetched intermediate is handed over without a copy: the array takes the
  // buffer and the scope lets go of it, so the next run writes a new one. A
  // persistable var (updated in place by the next step) or a fed var is copied.
  static py::array Fetch(const proto::BlockDesc& block, Scope& scope, const std::string& name, bool was_fed,
                         Stats* stats) {
    Variable* var = scope.FindVar(name);
    if (var == nullptr || !var->Get().initialized()) {
      ThrowInvalidArgument("fetch '", name, "': no op wrote it and it was not fed");
    }
    const proto::VarDesc* v = FindVarDesc(block, name);
    // Only a buffer this var alone holds: another tensor sharing it (a view,
    // an in-place alias) might be written later.
    const bool share = v != nullptr && !v->persistable() && !was_fed && var->Get().allocation()->owned() &&
                       var->Get().use_count() == 1;
    py::array a = ArrayFromTensor(var->Get(), share);
    if (share) var->GetMutable()->Clear();
    ++(share ? stats->fetches_shared : stats->fetches_copied);
    return a;
  }

  static constexpr size_t kCacheSize = 8;
  std::optional<bool> use_jit_;
  std::mutex mu_;
  Stats stats_;
  std::list<std::pair<Key, std::unique_ptr<Prepared>>> cache_;
  std::list<std::pair<std::pair<int64_t, int64_t>, Facts>> facts_;
};

}  // namespace

void BindExecutor(py::module_& m) {
  py::class_<Scope>(m, "Scope")
      .def(py::init<>())
      .def("var_names", &Scope::LocalVarNames)
      .def("has", [](const Scope& s, const std::string& name) {
        const Variable* v = s.FindVar(name);
        return v != nullptr && v->Get().initialized();
      })
      .def("get",
           [](const Scope& s, const std::string& name) {
             const Variable* v = s.FindVar(name);
             if (v == nullptr || !v->Get().initialized()) ThrowNotFound("the scope holds no value for '", name, "'");
             return ArrayFromTensor(v->Get(), /*share=*/false);
           })
      .def("set",
           [](Scope& s, const std::string& name, const py::handle& value) {
             Variable* v = s.Var(name);
             const DataType dtype = v->Get().initialized() ? v->Get().dtype()
                                    : py::isinstance<py::array>(value)
                                        ? DataTypeFromName(py::str(value.attr("dtype")).cast<std::string>())
                                        : DataType::kFP32;
             Tensor t = TensorFromPython(value, dtype, /*may_share=*/false, "scope var '" + name + "'");
             if (v->Get().initialized() && v->Get().dims() != t.dims()) {
               ThrowInvalidArgument("scope var '", name, "': expected dims ", DimsToString(v->Get().dims()), ", got ",
                                    DimsToString(t.dims()));
             }
             *v->GetMutable() = std::move(t);
             v->set_origin(0);  // set from outside: a startup program keeps it
           })
      .def("dims",
           [](const Scope& s, const std::string& name) -> py::object {
             const Variable* v = s.FindVar(name);
             if (v == nullptr || !v->Get().has_shape()) return py::none();
             return py::cast(v->Get().dims());
           })
      .def("erase", &Scope::EraseVar);
  m.def("global_scope", &GlobalScope, py::return_value_policy::reference);
  m.def("jit_stats", [] {
    const jit::JitStats s = jit::JitCompiler::Instance().stats();
    py::dict d;
    d["compiles"] = s.compiles;
    d["hits"] = s.hits;
    d["evictions"] = s.evictions;
    d["failures"] = s.failures;
    d["fallback_calls"] = s.fallback_calls;
    d["denied_calls"] = s.denied_calls;
    d["compile_ms"] = s.compile_ms;
    d["launches"] = s.launch.launches;
    d["framework_fallbacks"] = s.launch.framework_fallbacks;
    return d;
  });

  py::class_<Executor>(m, "Executor")
      .def(py::init<std::optional<bool>>(), py::arg("use_jit") = py::none())
      .def_property_readonly("use_jit", &Executor::use_jit)
      .def("stats",
           [](const Executor& e) {
             const Executor::Stats& s = e.stats();
             py::dict d;
             d["feeds_shared"] = s.feeds_shared;
             d["feeds_copied"] = s.feeds_copied;
             d["fetches_shared"] = s.fetches_shared;
             d["fetches_copied"] = s.fetches_copied;
             d["plans_prepared"] = s.plans_prepared;
             d["plan_hits"] = s.plan_hits;
             return d;
           })
      .def("run", &Executor::Run, py::arg("program"), py::arg("feed"), py::arg("fetch"), py::arg("scope"));
}

}  // namespace kiln::python
