// JSON files users edit (device presets, experiments): strict parsing and messages that point at the
// mistake — the file, the field path, what was expected and what came, a did-you-mean for typos.
//
//   const Json root = parse_json_strictly(text, "tpu_v3.json");       // duplicate keys are errors
//   TESSERA_REJECT(file << ": " << join_path("link", "bandwidth") << ": expected …, got " << type_name(value));
//   did_you_mean_key("memory_per_cor", {"memory_per_core", "name"})  // "; did you mean \"memory_per_core\"?"
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::json {

using Json = nlohmann::json;

std::string in_quotes(std::string_view text);
std::string join_path(std::string_view parent, std::string_view key);
// A JSON value as it appears in the file, shortened for a message.
std::string shown(const Json& value);
// "an object", "the string \"GiB\"", "the number 3" …
std::string type_name(const Json& value);
std::string listed(const std::vector<std::string_view>& names, std::string_view separator = ", ");
std::string listed(const std::vector<std::string>& names, std::string_view separator = ", ");

std::size_t edit_distance(std::string_view a, std::string_view b);  // ignoring case
struct Closest {
    std::string_view name;
    bool is_close = false;  // near enough to be a likely typo
};
Closest closest(std::string_view wrong, const std::vector<std::string_view>& known);
// "; did you mean \"memory_per_core\"?", and every known key when even the closest one is far off.
std::string did_you_mean_key(std::string_view wrong, const std::vector<std::string_view>& known);

// Parses JSON, rejecting duplicate keys (nlohmann keeps the last silently, which would hide an edit);
// syntax errors give the byte, line and column. Errors start with `file`.
Json parse_json_strictly(const std::string& text, const std::string& file);

}  // namespace tessera::json
