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

#include "launch_op/default_jit.h"
#include "framework/executor.h"
#include "framework/feed_check.h"
#include "framework/suggest.h"
#include "framework/var_origin.h"
#include "framework/flags.h"
#include "framework/op_desc.h"
#include "python/src/binding.h"
#include "python/src/flags_state.h"
#include "python/src/tensor_convert.h"
#include "tools/pipeline_setup.h"

namespace py = pybind11;

namespace kiln::python {
namespace {

// A startup program kept what the scope holds (framework/var_origin.h): a
// warning pointing at the caller's line (stacklevel 2: past executor.py).
void WarnKept(const std::vector<std::string>& kept) {
  const std::string msg = "kiln: the startup program keeps " + QuotedNames(kept, 4) +
                          ": the scope holds them from another program (trained, or initialised by it) or from "
                          "outside (loaded, fed, set), and a startup program never overwrites those. To initialise "
                          "them again, erase them (scope.erase(name)) or run in a fresh kiln.Scope()";
  if (PyErr_WarnEx(PyExc_UserWarning, msg.c_str(), 2) != 0) throw py::error_already_set();
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
    std::map<std::string, Dims> fed_dims;
    for (const auto& [k, value] : feed) {
      const std::string name = k.cast<std::string>();
      const proto::VarDesc* v = &RequireVarDesc(block, name, "feed");
      // A persistable var is updated in place by the program (optimizer
      // state, parameters): it gets a copy, never the caller's memory.
      Binding how;
      Tensor t = TensorFromPython(value, FromProto(v->dtype()), !v->persistable(), "feed '" + name + "'", &how);
      if (!v->persistable()) fed.Add(name);
      FeedTensor(block, scope, name, t, /*share=*/true);  // checks dims
      fed_dims[name] = t.dims();
      ++(how == Binding::kShared ? stats_.feeds_shared : stats_.feeds_copied);
    }
    Facts& facts = FactsOf(program);
    CheckFeeds(facts.required_feeds, fed.names());
    if (facts.fitting_feeds.insert(fed_dims).second) {
      try {
        CheckFeedShapes(block, fed_dims);
      } catch (...) {
        facts.fitting_feeds.erase(fed_dims);
        throw;
      }
    }
    KeptVars kept;
    if (program.is_startup()) kept = KeptByScope(block, facts.initialisers, program.id(), scope);
    if (!kept.kept.empty()) WarnKept(kept.kept);
    Prepared& prepared = Prepare(program, fed.names(), fetch, kept.skipped_ops);
    {
      py::gil_scoped_release release;
      kiln::Executor exec(ExecutorOptionsFromFlags());
      exec.Run(*prepared.plan, scope);
    }
    MarkWritten(scope, facts.persistable_writes, kept.kept, program.id());
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

  // What a run checks before it starts and records after it, per program
  // version; `fitting_feeds` are the feed dims that passed CheckFeedShapes.
  struct Facts {
    std::vector<std::string> required_feeds;
    std::vector<Initialiser> initialisers;
    std::vector<std::string> persistable_writes;
    std::set<std::map<std::string, Dims>> fitting_feeds;
  };
  Facts& FactsOf(const Program& program) {
    const std::pair<int64_t, int64_t> key{program.id(), program.version()};
    for (auto it = facts_.begin(); it != facts_.end(); ++it) {
      if (it->first != key) continue;
      facts_.splice(facts_.begin(), facts_, it);
      return facts_.front().second;
    }
    const proto::BlockDesc& block = program.desc().blocks(0);
    facts_.emplace_front(key, Facts{RequiredFeeds(block), InitialiserOps(block), PersistableWrites(block), {}});
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
    const jit::JitStats s = jit::DefaultJit().stats();
    py::dict d;
    d["compiles"] = s.compiles;
    d["hits"] = s.hits;
    d["evictions"] = s.evictions;
    d["failures"] = s.failures;
    d["fallback_calls"] = s.fallback_calls;
    d["denied_calls"] = s.denied_calls;
    d["compile_ms"] = s.compile_ms;
    d["dynamic_compiles"] = s.dynamic_compiles;
    d["dynamic_failures"] = s.dynamic_failures;
    d["instances"] = s.instances;
    d["guard_failures"] = s.guard_failures;
    d["instance_ms"] = s.instance_ms;
    d["compiles_per_cluster"] = s.compiles_per_key;
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
