// Helpers shared by the tests of experiment files' data sections: the message a file's parse fails with.
#pragma once

#include "core/error.hpp"
#include "experiment/experiment.hpp"

#include <gtest/gtest.h>

#include <string>

namespace tessera::data::test {

// The error parse_experiment throws for `text` (named `file_name`), or "(no error)".
inline std::string parse_error(const std::string& text, const std::string& file_name) {
    try {
        experiment::parse_experiment(text, file_name);
    } catch (const Error& error) {
        return error.what();
    }
    return "(no error)";
}

inline void expect_parse_error(const std::string& text, const std::string& file_name, const std::string& expected) {
    const std::string message = parse_error(text, file_name);
    EXPECT_NE(message.find(expected), std::string::npos) << "expected: " << expected << "\ngot: " << message;
}

}  // namespace tessera::data::test
