// Text forms of input partitions, as users write them in TPUConfig: `[1, 4, 1, 1]`, `None`,
// `{'image': [1, 2, 2, 1], 'mask': None}`, and the pair `[[1, 4, 1, 1], None]`.
#include "partition/partition_spec.hpp"

#include "core/error.hpp"

#include <limits>
#include <sstream>

namespace tessera::partition {

namespace {

// Joins text pieces by appending. (Also avoids GCC 12's false -Wrestrict on "literal" + std::string.)
template <class... Parts>
std::string cat(const Parts&... parts) {
    std::string text;
    (text.append(std::string_view(parts)), ...);
    return text;
}

std::string python_string(const std::string& text) {
    std::string out = "'";
    for (char c : text) {
        if (c == '\'' || c == '\\') out += '\\';
        out += c;
    }
    return out + "'";
}

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
bool is_identifier_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '_';
}

// Recursive descent over the text; every error names the position and what was expected there.
class Parser {
public:
    explicit Parser(std::string_view text) : m_text(text) {}

    InputPartition parse_side(const char* what) {
        skip_space();
        if (peek() == '{') return InputPartition::dict(parse_dict());
        return InputPartition{parse_tensor(what)};
    }

    std::pair<InputPartition, InputPartition> parse_pair() {
        skip_space();
        expect('[', "'[' opening input_partition_dims = [features_dims, labels_dims]");
        skip_space();
        if (peek() == ']') fail("features_dims: a list, a dict or None");
        std::pair<InputPartition, InputPartition> sides{parse_side("features_dims: a list, a dict or None"),
                                                        InputPartition::none()};
        skip_space();
        if (peek() == ',') {
            ++m_pos;
            skip_space();
            if (peek() != ']') {
                sides.second = parse_side("labels_dims: a list, a dict or None");
                skip_space();
                if (peek() == ',') {
                    ++m_pos;
                    skip_space();
                }
                if (peek() != ']') {
                    fail(
                        "']' closing input_partition_dims, which has at most two elements "
                        "[features_dims, labels_dims]");
                }
            }
        }
        expect(']', "',' or ']' closing input_partition_dims");
        return sides;
    }

    void finish() {
        skip_space();
        if (m_pos < m_text.size()) fail("the end of the text");
    }

private:
    char peek() const { return m_pos < m_text.size() ? m_text[m_pos] : '\0'; }
    bool at_end() const { return m_pos >= m_text.size(); }

    void skip_space() {
        while (!at_end() && is_space(m_text[m_pos])) ++m_pos;
    }

    std::string found() const {
        if (at_end()) return "the end of the text";
        if (is_identifier_char(m_text[m_pos])) {
            std::size_t end = m_pos;
            while (end < m_text.size() && is_identifier_char(m_text[end])) ++end;
            return cat("'", m_text.substr(m_pos, end - m_pos), "'");
        }
        return cat("'", std::string(1, m_text[m_pos]), "'");
    }

    std::string position(std::size_t pos) const {
        std::size_t line = 1, column = 1;
        bool multi_line = false;
        for (std::size_t i = 0; i < m_text.size(); ++i) {
            if (m_text[i] != '\n') continue;
            multi_line = true;
            if (i < pos) {
                ++line;
                column = pos - i;
            }
        }
        if (line == 1) column = pos + 1;
        std::ostringstream text;
        if (multi_line) text << "line " << line << ", ";
        text << "column " << column;
        return text.str();
    }

    [[noreturn]] void fail_at(std::size_t pos, const std::string& message) const {
        TESSERA_REJECT("cannot parse the input partition \"" << m_text << "\": " << position(pos) << ": " << message);
    }
    [[noreturn]] void fail(const std::string& expected) const {
        fail_at(m_pos, cat("expected ", expected, ", found ", found()));
    }

    void expect(char c, const std::string& expected) {
        if (peek() != c) fail(expected);
        ++m_pos;
    }

    // None | list
    TensorPartition parse_tensor(const std::string& expected) {
        skip_space();
        if (peek() == '[' || peek() == '(') return TensorPartition::of(parse_list());
        if (is_identifier_char(peek())) {
            const std::size_t start = m_pos;
            while (!at_end() && is_identifier_char(m_text[m_pos])) ++m_pos;
            const std::string_view word = m_text.substr(start, m_pos - start);
            if (word == "None") return TensorPartition::none();
            m_pos = start;
            if (word == "none" || word == "null" || word == "NONE")
                fail(cat(expected, " (Python's None is capitalised)"));
        }
        fail(expected);
    }

    // '[' [int (',' int)* [',']] ']', or the same with parentheses (a tuple).
    std::vector<std::int64_t> parse_list() {
        const char close = peek() == '(' ? ')' : ']';
        ++m_pos;
        std::vector<std::int64_t> dims;
        skip_space();
        if (peek() == close) {
            ++m_pos;
            return dims;
        }
        for (;;) {
            dims.push_back(parse_int());
            skip_space();
            if (peek() == ',') {
                ++m_pos;
                skip_space();
                if (peek() == close) break;
                continue;
            }
            if (peek() == close) break;
            fail(cat("',' or '", std::string(1, close), "' in a list of dims"));
        }
        ++m_pos;
        return dims;
    }

    std::int64_t parse_int() {
        skip_space();
        const std::size_t start = m_pos;
        bool negative = false;
        if (peek() == '-' || peek() == '+') {
            negative = peek() == '-';
            ++m_pos;
        }
        if (!is_digit(peek())) {
            m_pos = start;
            fail("an integer (one dims entry per dimension)");
        }
        std::uint64_t value = 0;
        const std::uint64_t limit = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
        while (is_digit(peek())) {
            const auto digit = static_cast<std::uint64_t>(peek() - '0');
            if (value > (limit - digit) / 10) {
                fail_at(start, cat("integer out of range (at most ", std::to_string(limit), ")"));
            }
            value = value * 10 + digit;
            ++m_pos;
        }
        if (is_identifier_char(peek()) || peek() == '.') fail("',' or the end of the list after an integer");
        const auto magnitude = static_cast<std::int64_t>(value);
        return negative ? -magnitude : magnitude;
    }

    // '{' [key ':' (list | None) (',' ...)* [',']] '}'
    InputPartition::Dict parse_dict() {
        ++m_pos;  // '{'
        InputPartition::Dict entries;
        std::map<std::string, std::size_t> first_seen;
        skip_space();
        if (peek() == '}') {
            ++m_pos;
            return entries;
        }
        for (;;) {
            skip_space();
            const std::size_t key_pos = m_pos;
            std::string key = parse_key();
            skip_space();
            expect(':', cat("':' after the key ", python_string(key)));
            TensorPartition value = parse_tensor(cat("a list of dims or None for the key ", python_string(key)));
            if (auto seen = first_seen.find(key); seen != first_seen.end()) {
                fail_at(key_pos, cat("duplicate key ", python_string(key), " (first at ", position(seen->second), ")"));
            }
            first_seen.emplace(key, key_pos);
            entries.emplace(std::move(key), std::move(value));
            skip_space();
            if (peek() == ',') {
                ++m_pos;
                skip_space();
                if (peek() == '}') break;
                continue;
            }
            if (peek() == '}') break;
            fail("',' or '}' in a dict");
        }
        ++m_pos;
        return entries;
    }

    // A quoted key, '...' or "...", with \\ \' \" escapes.
    std::string parse_key() {
        const char quote = peek();
        if (quote != '\'' && quote != '"') fail("a quoted key such as 'image'");
        const std::size_t start = m_pos;
        ++m_pos;
        std::string key;
        for (;;) {
            if (at_end() || peek() == '\n')
                fail_at(start, cat("unterminated key: expected a closing ", std::string(1, quote)));
            const char c = m_text[m_pos++];
            if (c == quote) break;
            if (c == '\\') {
                const char escaped = peek();
                if (escaped != '\\' && escaped != '\'' && escaped != '"') {
                    fail_at(m_pos - 1, "unsupported escape in a key: expected \\\\, \\' or \\\"");
                }
                key += escaped;
                ++m_pos;
                continue;
            }
            key += c;
        }
        return key;
    }

    std::string_view m_text;
    std::size_t m_pos = 0;
};

}  // namespace

std::string to_string(const TensorPartition& partition) {
    if (partition.is_none()) return "None";
    std::string text = "[";
    const auto& dims = *partition.dims;
    for (std::size_t i = 0; i < dims.size(); ++i) {
        if (i > 0) text += ", ";
        text += std::to_string(dims[i]);
    }
    return text + "]";
}

std::string to_string(const InputPartition& partition) {
    if (!partition.is_dict()) return to_string(std::get<TensorPartition>(partition.value));
    std::string text = "{";
    bool first = true;
    for (const auto& [key, value] : std::get<InputPartition::Dict>(partition.value)) {
        if (!first) text += ", ";
        first = false;
        text += cat(python_string(key), ": ", to_string(value));
    }
    return text + "}";
}

std::string input_partition_dims_to_string(const PartitionSpec& spec) {
    return cat("[", to_string(spec.features), ", ", to_string(spec.labels), "]");
}

InputPartition parse_input_partition(std::string_view text) {
    Parser parser(text);
    InputPartition partition = parser.parse_side("a list of dims, a dict or None");
    parser.finish();
    return partition;
}

std::pair<InputPartition, InputPartition> parse_input_partition_dims(std::string_view text) {
    Parser parser(text);
    auto sides = parser.parse_pair();
    parser.finish();
    return sides;
}

}  // namespace tessera::partition
