#include "framework/attribute.h"

#include <sstream>

namespace kiln {

const char* AttrKindName(AttrKind kind) {
  switch (kind) {
    case AttrKind::kInt: return "INT";
    case AttrKind::kFloat: return "FLOAT";
    case AttrKind::kString: return "STRING";
    case AttrKind::kBool: return "BOOL";
    case AttrKind::kInts: return "INTS";
    case AttrKind::kFloats: return "FLOATS";
    case AttrKind::kStrings: return "STRINGS";
  }
  return "?";
}

Attribute AttrFromProto(const proto::AttrDesc& d) {
  switch (d.type()) {
    case proto::AttrDesc::INT: return d.i();
    case proto::AttrDesc::FLOAT: return d.f();
    case proto::AttrDesc::STRING: return d.s();
    case proto::AttrDesc::BOOL: return d.b();
    case proto::AttrDesc::INTS: return std::vector<int64_t>(d.ints().begin(), d.ints().end());
    case proto::AttrDesc::FLOATS: return std::vector<float>(d.floats().begin(), d.floats().end());
    case proto::AttrDesc::STRINGS:
      return std::vector<std::string>(d.strings().begin(), d.strings().end());
    default: break;
  }
  return int64_t{0};
}

proto::AttrDesc AttrToProto(const std::string& name, const Attribute& value) {
  proto::AttrDesc d;
  d.set_name(name);
  d.set_type(static_cast<proto::AttrDesc::AttrType>(value.index()));
  std::visit(
      [&d](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) d.set_i(v);
        if constexpr (std::is_same_v<T, float>) d.set_f(v);
        if constexpr (std::is_same_v<T, std::string>) d.set_s(v);
        if constexpr (std::is_same_v<T, bool>) d.set_b(v);
        if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          for (auto x : v) d.add_ints(x);
        }
        if constexpr (std::is_same_v<T, std::vector<float>>) {
          for (auto x : v) d.add_floats(x);
        }
        if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          for (const auto& x : v) d.add_strings(x);
        }
      },
      value);
  return d;
}

std::string AttrToString(const Attribute& value) {
  std::ostringstream os;
  std::visit(
      [&os](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          os << '"' << v << '"';
        } else if constexpr (std::is_same_v<T, bool>) {
          os << (v ? "true" : "false");
        } else if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, float>) {
          os << v;
        } else {
          os << '[';
          for (size_t i = 0; i < v.size(); ++i) {
            if (i) os << ',';
            if constexpr (std::is_same_v<T, std::vector<std::string>>) {
              os << '"' << v[i] << '"';
            } else {
              os << v[i];
            }
          }
          os << ']';
        }
      },
      value);
  return os.str();
}

}  // namespace kiln
