# Runs one command and checks both its exit code and its output (CTest's PASS_REGULAR_EXPRESSION alone
# ignores the exit code, so a command that prints the right words and then fails would pass).
# Usage: cmake -DEXPECT_CODE=<n> -DEXPECT_OUTPUT=<regex> -DCOMMAND=<program|arg|arg...> -P expect_run.cmake
# Arguments are separated by "|" in COMMAND (a CMake list would be split by -D).
string(REPLACE "|" ";" command "${COMMAND}")
execute_process(COMMAND ${command} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT code EQUAL EXPECT_CODE)
  message(FATAL_ERROR "${COMMAND}: expected exit code ${EXPECT_CODE}, got ${code}")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT_OUTPUT}")
  message(FATAL_ERROR "${COMMAND}: expected output matching '${EXPECT_OUTPUT}'")
endif()
