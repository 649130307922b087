// The kiln Python binding (module kiln._kiln): a thin layer over the C++
// framework. It converts types (numpy arrays <-> Tensors, dicts <-> attrs)
// and errors (kiln::Error -> kiln.Error); the work stays in C++. The layer API
// users call lives in python/kiln/*.py.
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "framework/data_type.h"
#include "framework/proto/framework.pb.h"

namespace kiln::python {

// A program as Python holds it: the ProgramDesc, the seed its parameter
// initialisers use (Paddle's Program.random_seed) and a version that every
// change bumps, so executors know when a prepared plan is stale.
class Program {
 public:
  Program();
  explicit Program(proto::ProgramDesc desc);

  const proto::ProgramDesc& desc() const { return desc_; }
  // For changes: bumps the version.
  proto::ProgramDesc& mutable_desc() {
    ++version_;
    return desc_;
  }
  int64_t id() const { return id_; }
  int64_t version() const { return version_; }
  uint64_t random_seed() const { return random_seed_; }
  void set_random_seed(uint64_t seed) { random_seed_ = seed; }
  // A startup program: its runs keep what the scope holds from elsewhere
  // (framework/var_origin.h). The front end marks the programs it uses as
  // startup programs (program_guard, create_parameter, minimize).
  bool is_startup() const { return is_startup_; }
  void set_is_startup(bool on) { is_startup_ = on; }

 private:
  proto::ProgramDesc desc_;
  int64_t id_;
  int64_t version_ = 0;
  uint64_t random_seed_ = 1;
  bool is_startup_ = false;
};

// 'float32' | 'float64' | 'int64' | 'int32' | 'bool' (numpy's names);
// throws InvalidArgument for any other name.
DataType DataTypeFromName(const std::string& name);

void BindProgram(pybind11::module_& m);
void BindExecutor(pybind11::module_& m);
void BindFlags(pybind11::module_& m);
void BindIo(pybind11::module_& m);
void BindDatasets(pybind11::module_& m);
void BindDataLoader(pybind11::module_& m);
void BindDistributed(pybind11::module_& m);
void BindTraining(pybind11::module_& m);
void BindOnnx(pybind11::module_& m);

}  // namespace kiln::python
