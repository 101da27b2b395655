// Token ids as one JSON array ("[1,2,3]", no spaces), what `quill data encode` prints.
//
// Written with std::to_chars straight into one buffer sized for the worst case (10 digits and a
// comma an id), instead of a std::to_string and a string append per id: the output is the same
// bytes as nlohmann::json's dump of the array (tests/data/ids_json_test.cc).
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace quill {

std::string ids_json(std::span<const uint32_t> ids);

}  // namespace quill
