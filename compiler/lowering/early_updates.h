// Lowering step: each parameter update (sgd, momentum, adam, adamw) runs as
// soon as what it reads is ready and nothing after it reads the parameter,
// instead of where the program lists it (after the whole backward pass). A
// whole-step cluster then frees each weight gradient right after the unit
// that computes it (and the update reads it while it is still in cache),
// where it would otherwise stay live through the rest of the backward pass:
// on the resnet at batch 32, the last stage's weight gradients (7.7 MiB)
// were live at the cluster's peak.
//
// An update moves to just after the last unit before it that writes what it
// reads or writes, or reads what it writes (the parameter's last reader: a
// conv's gradient reads the weight for the input's gradient), so no unit it
// passes touches what it touches. It does not move when a reader of the
// parameter is a layout op (reshape2, transpose2, ...), whose output may be a
// view of the parameter that other units read under another name. Only
// updates no step has claimed move (weight_grad_fold's matmul_sgd already
// runs where the gradient is made).
#pragma once

#include "compiler/lowering/trace.h"
#include "compiler/lowering/units/unit.h"

namespace kiln::jit {

Units RunUpdatesEarly(const Cluster& c, Units units, StepTrace& trace);
inline constexpr char kEarlyUpdatesStep[] = "early_updates";

}  // namespace kiln::jit
