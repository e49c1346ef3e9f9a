#include "core/error.hpp"

namespace tessera::detail {

void throw_error(Error::Kind kind, const std::string& message, const char* file, int line) {
    // Internal errors carry the source location: they are reports for developers.
    // Caller mistakes do not: the message alone must tell the user what to fix.
    if (kind == Error::Kind::Internal) {
        std::ostringstream located;
        located << message << " [" << file << ':' << line << ']';
        throw Error(kind, located.str());
    }
    throw Error(kind, message);
}

}  // namespace tessera::detail
