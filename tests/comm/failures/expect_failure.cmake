# Runs a command that must fail: nonzero exit, output matching EXPECT (a regex), within TIMEOUT
# seconds. CMD is the command with its arguments joined by '|'.
#   cmake -DCMD="mpiexec|-np|2|prog|mode" -DEXPECT="regex" -DTIMEOUT=20 -P expect_failure.cmake
string(REPLACE "|" ";" command "${CMD}")
execute_process(COMMAND ${command} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT ${TIMEOUT})
set(all "${out}${err}")
message("${all}")
if(rc EQUAL 0)
  message(FATAL_ERROR "expected a failure, but the command exited 0")
endif()
if(rc MATCHES "timeout")
  message(FATAL_ERROR "the command hung: still running after ${TIMEOUT} s")
endif()
if(NOT all MATCHES "${EXPECT}")
  message(FATAL_ERROR "the output does not match '${EXPECT}'")
endif()
message("failed as expected (exit: ${rc})")
