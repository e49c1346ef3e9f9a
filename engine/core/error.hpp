// Tessera engine errors.
//
// One error type for the whole engine. Two checks throw it:
//   TESSERA_CHECK(cond, msg)  — the caller's mistake (bad file, bad spec). The message says what was
//                               expected and what came, and how to fix it when that is known.
//   TESSERA_ASSERT(cond, msg) — an internal invariant; a failure is a Tessera bug.
//   TESSERA_REJECT(msg)       — unconditional TESSERA_CHECK: the input is wrong (the end of a parser's
//                               accepted forms, a file that is none of the known kinds).
//   TESSERA_FAIL(msg)         — unconditional TESSERA_ASSERT: a state the code never reaches (the end of
//                               a switch over a closed set). Programs report it as a bug (exit 1).
// `msg` is a stream expression:  TESSERA_CHECK(extent > 0, "expected a positive extent, got " << extent);
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace tessera {

class Error : public std::runtime_error {
public:
    enum class Kind { InvalidInput, Internal };

    Error(Kind kind, const std::string& message) : std::runtime_error(message), m_kind(kind) {}

    Kind kind() const noexcept { return m_kind; }
    bool is_internal() const noexcept { return m_kind == Kind::Internal; }

private:
    Kind m_kind;
};

namespace detail {
[[noreturn]] void throw_error(Error::Kind kind, const std::string& message, const char* file, int line);
}  // namespace detail

}  // namespace tessera

#define TESSERA_CHECK(cond, msg)                                                                  \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            std::ostringstream tessera_check_stream_;                                             \
            tessera_check_stream_ << msg;                                                         \
            ::tessera::detail::throw_error(::tessera::Error::Kind::InvalidInput,                  \
                                           tessera_check_stream_.str(), __FILE__, __LINE__);      \
        }                                                                                         \
    } while (false)

#define TESSERA_ASSERT(cond, msg)                                                                 \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            std::ostringstream tessera_check_stream_;                                             \
            tessera_check_stream_ << "internal error (" #cond "): " << msg;                       \
            ::tessera::detail::throw_error(::tessera::Error::Kind::Internal,                      \
                                           tessera_check_stream_.str(), __FILE__, __LINE__);      \
        }                                                                                         \
    } while (false)

// Throw unconditionally: bad input, or an impossible state.
#define TESSERA_REJECT(msg) TESSERA_CHECK(false, msg)
#define TESSERA_FAIL(msg) TESSERA_ASSERT(false, msg)
