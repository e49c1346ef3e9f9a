#include "core/json_support.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cctype>
#include <limits>
#include <set>

namespace tessera::json {


// Built by appending: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string.
std::string in_quotes(std::string_view text) {
    std::string out(1, '"');
    out += text;
    out += '"';
    return out;
}

std::string join_path(std::string_view parent, std::string_view key) {
    if (parent.empty()) return std::string(key);
    return std::string(parent) + "." + std::string(key);
}

std::string shown(const Json& value) {
    std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
    constexpr std::size_t k_max = 60;
    if (text.size() > k_max) text = text.substr(0, k_max) + "…";
    return text;
}

std::string type_name(const Json& value) {
    if (value.is_object()) return "an object";
    if (value.is_array()) return "an array";
    if (value.is_string()) return std::string("the string ").append(shown(value));
    if (value.is_boolean()) return std::string("the boolean ").append(shown(value));
    if (value.is_null()) return "null";
    return std::string("the number ").append(shown(value));
}

namespace {
template <typename Names>
std::string joined(const Names& names, std::string_view separator) {
    std::string out;
    for (const auto& name : names) {
        if (!out.empty()) out += separator;
        out += std::string(name);
    }
    return out;
}
}  // namespace

std::string listed(const std::vector<std::string_view>& names, std::string_view separator) { return joined(names, separator); }
std::string listed(const std::vector<std::string>& names, std::string_view separator) { return joined(names, separator); }

std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diagonal = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t above = row[j];
            const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                              std::tolower(static_cast<unsigned char>(b[j - 1]));
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
            diagonal = above;
        }
    }
    return row[b.size()];
}

Closest closest(std::string_view wrong, const std::vector<std::string_view>& known) {
    Closest best;
    std::size_t best_distance = std::numeric_limits<std::size_t>::max();
    for (std::string_view name : known) {
        const std::size_t distance = edit_distance(wrong, name);
        if (distance < best_distance) {
            best.name = name;
            best_distance = distance;
        }
    }
    best.is_close = !known.empty() && best_distance <= std::max<std::size_t>(2, wrong.size() / 3);
    return best;
}

std::string did_you_mean_key(std::string_view wrong, const std::vector<std::string_view>& known) {
    if (known.empty()) return {};
    const Closest best = closest(wrong, known);
    std::string out = std::string("; did you mean ").append(in_quotes(best.name)).append("?");
    if (!best.is_close) out.append(" (known keys: ").append(listed(known)).append(")");
    return out;
}

Json parse_json_strictly(const std::string& text, const std::string& file) {
    struct Frame {
        bool is_object = false;
        std::set<std::string> keys;
        std::string last_key;
    };
    std::vector<Frame> frames;
    const auto check_duplicates = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
        switch (event) {
            case Json::parse_event_t::object_start: frames.push_back({true, {}, {}}); break;
            case Json::parse_event_t::array_start: frames.push_back({false, {}, {}}); break;
            case Json::parse_event_t::object_end:
            case Json::parse_event_t::array_end:
                if (!frames.empty()) frames.pop_back();
                break;
            case Json::parse_event_t::key: {
                if (frames.empty() || !parsed.is_string()) break;
                const std::string key = parsed.get<std::string>();
                Frame& top = frames.back();
                top.last_key = key;
                if (!top.keys.insert(key).second) {
                    std::string path;
                    for (const Frame& frame : frames)
                        if (frame.is_object) path = join_path(path, frame.last_key);
                    TESSERA_REJECT(file << ": " << path << ": duplicate key (each key may appear once)");
                }
                break;
            }
            case Json::parse_event_t::value: break;
        }
        return true;
    };
    try {
        return Json::parse(text, check_duplicates);
    } catch (const Json::parse_error& error) {
        // nlohmann: "[json.exception.parse_error.101] parse error at line 3, column 5: syntax error …"
        std::string what = error.what();
        if (const auto at = what.find("parse error"); at != std::string::npos) {
            if (const auto colon = what.find(": ", at); colon != std::string::npos) what = what.substr(colon + 2);
        }
        const std::size_t byte = std::min<std::size_t>(error.byte, text.size());
        std::size_t line = 1;
        std::size_t column = 1;
        for (std::size_t i = 0; i + 1 < byte; ++i) {
            if (text[i] == '\n') {
                ++line;
                column = 1;
            } else {
                ++column;
            }
        }
        TESSERA_REJECT(file << ": not valid JSON at byte " << error.byte << " (line " << line << ", column " << column
                            << "): " << what);
    } catch (const Json::exception& error) {
        // E.g. "[json.exception.out_of_range.406] number overflow parsing '1e400'".
        std::string what = error.what();
        if (const auto end = what.find("] "); what.rfind("[json.exception", 0) == 0 && end != std::string::npos)
            what = what.substr(end + 2);
        TESSERA_REJECT(file << ": not valid JSON: " << what);
    }
}

}  // namespace tessera::json
