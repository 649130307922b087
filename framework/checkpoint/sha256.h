// SHA-256 through OpenSSL's libcrypto (EVP), for checkpoint manifests.
#pragma once

#include <string>
#include <string_view>

namespace kiln {

// 64 lowercase hex digits of the SHA-256 of `bytes`.
std::string Sha256Hex(std::string_view bytes);

}  // namespace kiln
