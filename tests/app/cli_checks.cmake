# Runs tessera-cli on good and bad input and checks exit codes and messages.
# Usage: cmake -DCLI=<tessera-cli> -DWORK=<scratch dir> -DEXAMPLE=<example data dir> -P cli_checks.cmake
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(expect_run expected_code expected_output)
  execute_process(COMMAND ${CLI} ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code EQUAL expected_code)
    message(FATAL_ERROR "tessera-cli ${ARGN}: expected exit code ${expected_code}, got ${code}\n${out}\n${err}")
  endif()
  if(NOT "${out}${err}" MATCHES "${expected_output}")
    message(FATAL_ERROR "tessera-cli ${ARGN}: expected output matching '${expected_output}', got\n${out}\n${err}")
  endif()
  message(STATUS "ok: tessera-cli ${ARGN}")
endfunction()

# A phantom written, read back and converted keeps its grid.
expect_run(0 "wrote" phantom ${WORK}/phantom.nii.gz --labels ${WORK}/labels.nii.gz --size 40,32,24 --spacing 1,1,2)
expect_run(0 "40 ?×32 ?×24" info ${WORK}/phantom.nii.gz --labels ${WORK}/labels.nii.gz)
expect_run(0 "wrote" convert ${WORK}/phantom.nii.gz ${WORK}/phantom.mha)
expect_run(0 "40 ?×32 ?×24" info ${WORK}/phantom.mha)

# Bad input: exit code 2 and a message that names the problem.
expect_run(2 "no_such_file" info ${WORK}/no_such_file.nii.gz)
file(WRITE ${WORK}/notes.nii.gz "these are notes, not an image\n")
expect_run(2 "notes.nii.gz" info ${WORK}/notes.nii.gz)
expect_run(2 "--size" phantom ${WORK}/bad.nii.gz --size 40,32)
expect_run(2 "grid" info ${EXAMPLE}/KmeansTest_T1UCharRaw.nii.gz --labels ${WORK}/labels.nii.gz)
expect_run(2 "" info)
