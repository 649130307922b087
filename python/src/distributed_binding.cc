// kiln._kiln's data-parallel part (kiln.distributed): the MPI communicator
// and the program transform, as the command line's --data_parallel uses them.
#include <pybind11/stl.h>

#include "framework/distributed/communicator.h"
#include "framework/distributed/data_parallel.h"
#include "framework/error.h"
#include "python/src/binding.h"

namespace py = pybind11;

namespace kiln::python {

void BindDistributed(py::module_& m) {
  using distributed::Communicator;
  m.def(
      "dist_init",
      [](double timeout_s) {
        if (!(timeout_s > 0)) ThrowInvalidArgument("kiln.distributed.init: timeout_s must be > 0, got ", timeout_s);
        Communicator& c = Communicator::Global();
        c.set_timeout_seconds(timeout_s);
        py::gil_scoped_release release;
        c.Init();
      },
      py::arg("timeout_s"));
  m.def("dist_rank", [] { return Communicator::Global().rank(); });
  m.def("dist_size", [] { return Communicator::Global().size(); });
  m.def(
      "dist_mean",
      [](double value) {
        Communicator& c = Communicator::Global();
        py::gil_scoped_release release;
        return c.AllreduceSum(value, "kiln.distributed.all_reduce_mean") / c.size();
      },
      py::arg("value"));
  m.def("dist_stats", [] {
    const Communicator::Stats s = Communicator::Global().stats();
    py::dict d;
    d["averages"] = s.averages;
    d["bytes"] = s.bytes;
    d["comm_ms"] = s.comm_ms;
    d["waited_ms"] = s.waited_ms;
    return d;
  });
  m.def(
      "append_data_parallel",
      [](Program& program, double bucket_mb) {
        DataParallelOptions o;
        if (!(bucket_mb > 0)) ThrowInvalidArgument("kiln.distributed.data_parallel: bucket_mb must be > 0");
        o.bucket_bytes = static_cast<int64_t>(bucket_mb * (1 << 20));
        proto::ProgramDesc trial = program.desc();
        const DataParallelReport r = AppendDataParallel(&trial, o);
        program.mutable_desc() = std::move(trial);
        return r.ToString();
      },
      py::arg("program"), py::arg("bucket_mb"));
}

}  // namespace kiln::python
