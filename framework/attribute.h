// Typed op attributes and conversion from/to proto::AttrDesc.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "framework/proto/framework.pb.h"

namespace kiln {

// Alternatives in the order of proto::AttrDesc::AttrType.
using Attribute = std::variant<int64_t, float, std::string, bool, std::vector<int64_t>,
                               std::vector<float>, std::vector<std::string>>;
enum class AttrKind : int { kInt = 0, kFloat, kString, kBool, kInts, kFloats, kStrings };
using AttrMap = std::map<std::string, Attribute>;

inline AttrKind KindOf(const Attribute& a) { return static_cast<AttrKind>(a.index()); }
const char* AttrKindName(AttrKind kind);  // "INT", "FLOAT", ...

Attribute AttrFromProto(const proto::AttrDesc& desc);
proto::AttrDesc AttrToProto(const std::string& name, const Attribute& value);
// Readable form for IR printing: 3, 0.5, "max", true, [1,2], [0.5,1], ["a"].
std::string AttrToString(const Attribute& value);

}  // namespace kiln
