#include "framework/ew/ew_fragment.h"

#include "framework/op_desc.h"

namespace kiln {
namespace {

std::string One(const std::vector<std::string>& args) {
  return args.size() == 1 && args[0] != kEmptyVarName ? args[0] : "";
}

}  // namespace

std::string EwOpView::In(std::string_view slot) const { return One(InputArgs(op_, slot)); }
std::string EwOpView::Out(std::string_view slot) const { return One(OutputArgs(op_, slot)); }

}  // namespace kiln
