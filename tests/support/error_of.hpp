// The message of the tessera::Error an action throws, or "(no error)": for tests that check what a
// user would read.
#pragma once

#include "core/error.hpp"

#include <functional>
#include <string>

namespace tessera::test {

inline std::string error_of(const std::function<void()>& action) {
    try {
        action();
    } catch (const Error& error) {
        return error.what();
    }
    return "(no error)";
}

}  // namespace tessera::test
